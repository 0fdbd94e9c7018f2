// Phases view: the mstx ranges of every rank as a Gantt grouped by role (pipeline stages with their send/recv links
// between microbatches), the pipeline's bubbles beside the schedule's theoretical ratio, each iteration's wall time
// and deciding chain, the iteration × phase table and each worker's idle time. Two requests: /phases/summary and
// /phases (the rows). Clicking a phase opens its rank's timeline at the range. The Gantt is a canvas (gantt.js); DOM
// by textContent only.

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { pct } from "../common/format.js";
import { formatDuration, relNs } from "../common/time.js";
import { appUrl, runPage } from "../common/urls.js";
import { CHART_COLORS } from "./charts.js";
import { errorBox } from "./blocks.js";
import { Gantt } from "./gantt.js";
import { apiBase as runBase, runId } from "./run.js";

const apiBase = `${runBase}/phases`;
const MAX_ROWS = 20000;
const state = { summary: null, rows: [], iteration: "" };

const dur = (ns) => formatDuration(ns);

function timelineAt(rank, sliceId, startNs, endNs) {
  const params = { ranks: rank, start_ns: startNs, end_ns: endNs };
  if (sliceId !== null && sliceId !== undefined) params.slice = sliceId;
  return runPage(runId, "timeline", params);
}

function rankLink(rank, startNs, endNs, sliceId, label) {
  return el("a", { href: timelineAt(rank, sliceId, startNs, endNs), class: "ph-rank-link" }, label ?? String(rank));
}

// a rank as its folders name it (an RL job's role folders reusing rank ids: its folder and the rank id in its files,
// "actor_update·0"), else its id
function labelOf(rank) {
  return state.summary.labels?.[String(rank)] ?? null;
}

function who(rank) {
  return labelOf(rank) ?? `rank ${rank}`;
}

function table(id, head, rows) {
  const t = el("table", { class: "grid v-table", id });
  t.append(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const r of rows) body.append(el("tr", {}, ...r.map((c) => el("td", {}, c))));
  t.append(body);
  return el("div", { class: "v-table-wrap" }, t);
}

function iterations() {
  return state.summary.iterations.filter((it) => state.iteration === "" || String(it.iteration) === state.iteration);
}

// --- the Gantt ------------------------------------------------------------------------------------------------------

// one lane per worker: the folders of one worker's profiled calls (verl's discrete mode) share its lane
function laneOf(r) {
  return labelOf(r.rank) ?? (r.role ? `${r.role} · rank ${r.rank}` : `rank ${r.rank}`);
}

const OVERLAP = /^forward_backward_overlap/;

function drawGantt() {
  const origin = state.summary.start_ns;
  // the rows are each rank's preferred ranges (device where it has them), as the summary counts them
  const rows = state.rows.filter((r) => state.iteration === "" || String(r.iteration) === state.iteration);
  const lanes = [...new Set(rows.map(laneOf))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  const colors = new Map();
  for (const r of rows) if (!colors.has(r.phase)) colors.set(r.phase, CHART_COLORS[colors.size % CHART_COLORS.length]);
  // DualPipeV's overlapped block (one chunk's forward with the other's backward): the forward's colour over the
  // backward's, so it reads as both at once
  const firstOf = (re) => [...colors.keys()].find((p) => re.test(p));
  const fwdColor = colors.get(firstOf(/^forward_step/)) ?? "#9aa4b2";
  const bwdColor = colors.get(firstOf(/^backward_step/)) ?? "#5b6473";
  const x = (abs) => relNs(abs, origin) / 1e6;
  const chain = new Set(iterations().flatMap((it) => it.chain.map((c) => c.slice_id)));
  const items = rows.map((r) => ({
    marked: chain.has(r.slice_id),
    lane: laneOf(r), x0: x(r.start_ns), x1: x(r.end_ns), url: r.timeline,
    ...(OVERLAP.test(r.phase) ? { color: fwdColor, split: bwdColor } : { color: colors.get(r.phase) }),
    label: r.microbatch === null ? "" : `${OVERLAP.test(r.phase) ? "F+B " : ""}${r.microbatch}`,
    tip: `${r.message}\n${who(r.rank)} · iteration ${r.iteration ?? "?"} · ${dur(r.dur_ns)} (${r.source})`,
  }));
  // pipeline send/recv: a microbatch's forward leaves stage s when it ends and starts on stage s+1; its backward
  // leaves stage s+1 and starts on stage s
  // DualPipeV: chunk 1 (microbatches m..2m-1) comes back up the stages, and an overlapped block carries its
  // forward's microbatch; its backwards name no microbatch, so only forwards are linked
  const links = [];
  const pp = state.summary.pipeline[0];
  if (pp) {
    const dual = pp.pp_type === "dualpipev";
    const ends = { forward: new Map(), backward: new Map() };
    for (const r of rows) {
      const kind = /^forward_step/.test(r.phase) || (dual && OVERLAP.test(r.phase)) ? "forward"
        : /^backward_step/.test(r.phase) && !dual ? "backward" : null;
      if (kind && r.microbatch !== null) ends[kind].set(`${r.iteration}/${r.rank}/${r.microbatch}`, r);
    }
    const stages = [...new Set(rows.map((r) => r.rank))].sort((a, b) => a - b);
    const next = new Map(stages.map((s, i) => [s, stages[i + 1]]));
    const prev = new Map(stages.map((s, i) => [s, stages[i - 1]]));
    const link = (from, to) => {
      if (from && to) links.push({ lane0: laneOf(from), x0: x(from.end_ns), lane1: laneOf(to), x1: x(to.start_ns) });
    };
    for (const r of ends.forward.values()) {
      const up = dual && r.microbatch >= pp.microbatches;
      link(r, ends.forward.get(`${r.iteration}/${(up ? prev : next).get(r.rank)}/${r.microbatch}`));
    }
    for (const r of ends.backward.values()) link(ends.backward.get(`${r.iteration}/${next.get(r.rank)}/${r.microbatch}`), r);
  }
  const legend = [...colors.entries()].filter(([p]) => !OVERLAP.test(p));
  if (rows.some((r) => OVERLAP.test(r.phase))) {
    legend.push(["forward + backward overlapped (split bar)", `linear-gradient(${fwdColor} 50%, ${bwdColor} 50%)`]);
  }
  if (links.length) legend.push(["send → recv", "rgba(220,220,220,0.6)"]);
  if (chain.size) legend.push(["deciding chain (outlined)", "#f1f3f6"]);
  if (!state.gantt) state.gantt = new Gantt($("#ph-gantt"), { onClick: (it) => window.location.assign(appUrl(it.url)) });
  state.gantt.set({ lanes, items, links, legend });
}

// --- the tables -----------------------------------------------------------------------------------------------------

function drawPipeline() {
  const pp = state.summary.pipeline.filter((p) => state.iteration === "" || String(p.iteration) === state.iteration);
  $("#ph-pipeline").hidden = !pp.length;
  const host = clear($("#ph-pp-body"));
  for (const p of pp) {
    const theory = p.theory_bubble_ratio === null ? "n/a for this schedule" : pct(p.theory_bubble_ratio);
    host.append(el("p", { class: "v-summary-line" }, `Iteration ${p.iteration ?? "?"}: ${p.pp_type}, `,
      el("b", {}, String(p.stages)), " stages × ", el("b", {}, String(p.microbatches)), " microbatches, step ",
      el("b", {}, dur(p.step_ns)), ", theoretical bubble ratio ", el("b", {}, theory), "; stage ",
      el("b", { class: "ph-setter" }, who(p.setter)), " sets the step (the busiest)."));
    const dual = p.per_stage.some((s) => s.overlap || s.weight);
    host.append(table(`ph-pp-${p.iteration}`, ["stage (rank)", "forward", "backward", ...(dual ? ["F+B overlapped",
      "weight"] : []), "busy", "bubble", "bubble ratio", "vs theory"], p.per_stage.map((s) => [
      rankLink(s.rank, p.start_ns, p.end_ns, null), String(s.forward), String(s.backward),
      ...(dual ? [String(s.overlap), String(s.weight)] : []), dur(s.busy_ns),
      dur(s.bubble_ns), s.bubble_ratio === null ? "" : pct(s.bubble_ratio),
      s.bubble_ratio === null || p.theory_bubble_ratio === null ? ""
        : `${s.bubble_ratio >= p.theory_bubble_ratio ? "+" : ""}${((s.bubble_ratio - p.theory_bubble_ratio) * 100).toFixed(1)} pt`,
    ])));
  }
}

function drawIterations() {
  const its = iterations();
  clear($("#ph-iterations")).append(table("ph-iter-table", ["iteration", "wall", "deciding chain", "per role: busy / idle"],
    its.map((it) => [
      String(it.iteration ?? "?"), dur(it.wall_ns),
      el("span", { class: "ph-chain ph-wrap" }, ...it.chain.flatMap((c, i) => [i ? " → " : "",
        rankLink(c.rank, c.start_ns, c.end_ns, c.slice_id, `${c.phase}@${labelOf(c.rank) ?? c.rank}`), ` (${dur(c.dur_ns)})`])),
      el("span", { class: "ph-wrap" },
        it.roles.map((r) => `${r.role ?? "all ranks"}: ${dur(r.busy_ns)} / ${dur(r.idle_ns)}`).join(" · ")),
    ])));
  clear($("#ph-table")).append(table("ph-phase-table", ["iteration", "phase", "ranks", "min", "median", "max",
    "straggler"], its.flatMap((it) => it.phases.map((p) => [String(it.iteration ?? "?"), p.phase, String(p.ranks),
    dur(p.min_ns), dur(p.median_ns), dur(p.max_ns), rankLink(p.straggler, it.start_ns, it.end_ns, null, who(p.straggler))]))));
  clear($("#ph-workers")).append(table("ph-worker-table", ["iteration", "rank", "roles", "busy", "idle", "idle %",
    "gaps", "longest gap"], its.flatMap((it) => it.workers.map((w) => {
    const longest = w.gaps.reduce((a, g) => (a && a.dur_ns >= g.dur_ns ? a : g), null);
    return [String(it.iteration ?? "?"), rankLink(w.rank, it.start_ns, it.end_ns, null, who(w.rank)), w.roles.join(", "),
      dur(w.busy_ns), dur(w.idle_ns), pct(w.idle_ns / it.wall_ns), String(w.gap_count),
      longest ? rankLink(w.rank, longest.start_ns, longest.end_ns, null, dur(longest.dur_ns)) : ""];
  }))));
}

function drawAll() {
  drawGantt();
  drawPipeline();
  drawIterations();
}

// --- loading --------------------------------------------------------------------------------------------------------

async function main() {
  let summary;
  try {
    summary = await apiGet(`${apiBase}/summary`);
  } catch (err) {
    clear($("#ph-summary")).append(errorBox(err));
    document.body.dataset.phasesReady = "1";
    return;
  }
  state.summary = summary;
  if (!summary.has_phases) {
    $("#ph-summary").textContent = summary.available ? "This run has no mstx ranges."
      : "This run was ingested before phases existed: ingest it again.";
    $("#ph-empty").hidden = false;
    document.body.dataset.phasesReady = "1";
    return;
  }
  const roles = summary.roles.filter((r) => r.role).map((r) => `${r.role} (${r.ranks} ranks, from the ${r.role_source})`);
  clear($("#ph-summary")).append(el("b", {}, String(summary.phases)), " phases on ", el("b", {}, String(summary.ranks)),
    " ranks", roles.length ? `; roles: ${roles.join(", ")}` : "",
    summary.device_phases ? `; ${summary.device_phases} device ranges (used where a rank has them)` : "");
  const sel = clear($("#ph-iteration"));
  sel.append(el("option", { value: "" }, "all"),
    ...summary.iterations.map((it) => el("option", { value: String(it.iteration ?? "") }, String(it.iteration ?? "?"))));
  sel.addEventListener("change", () => { state.iteration = sel.value; drawAll(); });
  $("#ph-iter-field").hidden = false;
  $("#ph-body").hidden = false;
  try {
    const got = await apiGet(apiBase, { limit: MAX_ROWS, preferred: true });
    state.rows = got.rows;
    if (got.truncated) $("#ph-note").textContent = `the chart shows the first ${got.rows.length} of ${got.total} phases`;
  } catch (err) {
    clear($("#ph-gantt")).append(errorBox(err));
  }
  if (summary.truncated) $("#ph-note").textContent = "the figures count the first 400,000 phases only";
  drawAll();
  let width = $("#ph-gantt").clientWidth;
  window.addEventListener("resize", () => {
    if (state.gantt && $("#ph-gantt").clientWidth !== width) { width = $("#ph-gantt").clientWidth; state.gantt.draw(); }
  });
  document.body.dataset.phasesReady = "1";
}

main();
