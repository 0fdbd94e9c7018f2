// Late arrivals, a section of the Cluster view: per step, every collective instance with the rank that arrived last,
// how far ahead of the next it was, the wait it caused the others and why (its window against the reference rank's:
// a later start, more computing, launch-bound or free time…); a row unfolds into every rank's wait and what the
// late rank ran in its window. Below, per rank: the wait caused (as the last rank) beside the wait suffered.
// Every answer comes from the cluster table cluster_collectives (/api/runs/{id}/late_arrivals/…), except the late
// rank's kernels, which load its shard (rank=). DOM text only; plotly gets numbers and rank labels only.

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { formatCount, pct } from "../common/format.js";
import { kernelText, PART_LABELS } from "../common/lateparts.js";
import { ms } from "../common/time.js";
import { runPage, urlParam, withQuery } from "../common/urls.js";
import { baseLayout, plot } from "./charts.js";
import { apiBase, runId } from "./run.js";
import { DataTable } from "./table.js";

const api = `${apiBase}/late_arrivals`;
const PARTS = ["computing", "other_comm", "launch_bound", "free", "preparing"];
const PAD_NS = 20000n;
const MAX_BAR_RANKS = 48;

let table = null;
let step = null;

/** The timeline of the late rank and the reference rank around an instance, its wait chain drawn. */
export function chainUrl(inst) {
  const ranks = [...new Set([inst.last_rank, inst.ref_rank].filter((r) => r !== null))].sort((a, b) => a - b);
  const start = inst.window_start_ns ?? inst.first_ns;
  return runPage(runId, "timeline", { ranks: ranks.join(","), overlay: "waits",
    start_ns: String(BigInt(start) - PAD_NS), end_ns: String(BigInt(inst.end_ns) + PAD_NS),
    slice: inst.late_slice_id ?? undefined });
}

function causeText(inst) {
  const c = inst.cause;
  if (!inst.attributed) return `simultaneous (lead under ${ms(inst.lead_ns)} ms)`;
  if (!c.part) return inst.late_source === "trace" ? "no part of its window is longer" : "unknown (no trace of the rank)";
  return `${PART_LABELS[c.part]} +${ms(c.delta_ns)} ms${kernelText(c, inst.ref_rank, (ns) => `${ms(ns)} ms`)}`;
}

const COLUMNS = [
  { key: "op_name", label: "Collective", render: (r) => el("span", { title: `group ${r.group_id}, occurrence ${r.seq}` },
    r.op_name, r.partial ? el("span", { class: "v-note", title: "some ranks of the group lack this op" }, " (partial)") : null) },
  { key: "ranks", label: "Ranks", num: true, sort: "ranks" },
  { key: "last_rank", label: "Last rank", num: true,
    render: (r) => el("a", { href: chainUrl(r), class: "cl-late-open", title: "open its wait chain on the timeline" },
      String(r.last_rank)) },
  { key: "lead_ns", label: "Lead (ms)", num: true, sort: "lead", title: "how much later than the next latest rank",
    render: (r) => ms(r.lead_ns) },
  { key: "wait_caused_ns", label: "Wait caused (ms)", num: true, sort: "wait_caused",
    title: "the other ranks' waits added up", render: (r) => ms(r.wait_caused_ns) },
  { key: "max_wait_ns", label: "Max wait (ms)", num: true, sort: "max_wait", render: (r) => ms(r.max_wait_ns) },
  { key: "cause", label: "Cause (against the median rank)", render: causeText },
];

function breakdownTable(inst) {
  const c = inst.cause;
  const t = el("table", { class: "v-table cl-late-why" });
  t.append(el("thead", {}, el("tr", {}, ...["Part of the window", `Rank ${inst.last_rank} (ms)`,
    `Δ vs rank ${inst.ref_rank} (ms)`].map((h) => el("th", {}, h)),
  el("th", { title: `share of the lateness (${ms(c.lateness_ns)} ms)` }, "Share"))));
  const body = el("tbody");
  const share = (p) => el("td", { class: "num" }, c.shares[p] === undefined ? "–" : pct(c.shares[p]));
  if (c.deltas.late_start !== undefined) {
    body.append(el("tr", {}, el("td", {}, PART_LABELS.late_start), el("td", { class: "num" }, "–"),
      el("td", { class: "num" }, ms(c.deltas.late_start)), share("late_start")));
  }
  for (const p of PARTS) {
    if (!c.late_window) break;
    body.append(el("tr", { class: p === c.part ? "cl-late-cause" : null }, el("td", {}, PART_LABELS[p]),
      el("td", { class: "num" }, ms(c.late_window[p])), el("td", { class: "num" },
        c.deltas[p] === undefined ? "–" : ms(c.deltas[p])), share(p)));
  }
  t.append(body);
  return t;
}

function itemsTable(inst) {
  if (!inst.window_items) return el("div", { class: "v-note" }, "No trace of this rank: its window cannot be listed.");
  const t = el("table", { class: "v-table cl-late-items" });
  t.append(el("thead", {}, el("tr", {}, ...["In the window", "Name", "Count", "Time (ms)"].map((h) => el("th", {}, h)),
    el("th", { title: `time inside the window, as a share of it (${ms(inst.cause.window_ns)} ms)` }, "Share"))));
  const body = el("tbody");
  for (const it of inst.window_items) {
    const link = it.slice_id === null ? it.name
      : el("a", { href: runPage(runId, "timeline", { slice: it.slice_id, ranks: inst.last_rank }) }, it.name);
    body.append(el("tr", {}, el("td", {}, it.kind), el("td", {}, link), el("td", { class: "num" }, formatCount(it.count)),
      el("td", { class: "num" }, ms(it.ns)), el("td", { class: "num" }, pct(it.share))));
  }
  t.append(body);
  return t;
}

function details(row) {
  const box = el("div", { class: "cl-late-details" }, el("div", { class: "v-note" }, "loading…"));
  apiGet(`${api}/instance`, { group_id: row.group_id, op_name: row.op_name, seq: row.seq, kernels: true,
    rank: row.last_rank }).then((inst) => {
    const chart = el("div", { class: "v-chart cl-late-arrivals" });
    clear(box).append(
      el("div", { class: "v-note" }, `Rank ${inst.last_rank} arrived ${ms(inst.cause.lateness_ns)} ms after rank ` +
        `${inst.ref_rank} (the median arrival) and ${ms(inst.lead_ns)} ms after the next latest; its window ` +
        `(since the group's previous collective, or the step's start) against rank ${inst.ref_rank}'s:`),
      el("div", { class: "cl-late-grid" }, el("div", { class: "cl-late-cell" }, breakdownTable(inst)),
        el("div", { class: "cl-late-cell" }, itemsTable(inst))), chart);
    const a = inst.arrivals;
    return plot(chart, [{ type: "bar", x: a.rank.map(String), y: a.wait_ns.map((v) => v / 1e6),
      marker: { color: a.rank.map((r) => (r === inst.last_rank ? "#e8533a" : "#3f7fd8")) },
      hovertemplate: "Rank %{x}: waited %{y:,.3f} ms<extra></extra>" }],
    baseLayout({ margin: { l: 60, r: 20, t: 10, b: 40 }, showlegend: false,
      xaxis: { title: { text: "Rank (latest first)" }, type: "category" },
      yaxis: { title: { text: `waited for rank ${inst.last_rank} (ms)` } } }));
  }).catch((err) => clear(box).append(el("div", { class: "v-error" }, `Could not load: ${err.message}`)));
  return box;
}

async function loadTotals() {
  const t = await apiGet(`${api}/totals`, { step: step ?? undefined });
  const node = $("#cl-late-totals");
  const ranks = t.rank.map(String);
  const caused = t.wait_caused_ns.map((v) => v / 1e6);
  const suffered = t.wait_suffered_ns.map((v) => v / 1e6);
  if (t.rank.length > MAX_BAR_RANKS) {
    // too many ranks for bars side by side: one point per rank, wait suffered across, wait caused up (the ranks
    // that held the others up stand out at the top)
    await plot(node, [{ type: "scatter", mode: "markers", x: suffered, y: caused, text: ranks,
      marker: { color: caused.map((v) => (v > 0 ? "#e8533a" : "#3f7fd8")), size: 6 },
      hovertemplate: "Rank %{text}: caused %{y:,.3f} ms, waited %{x:,.3f} ms<extra></extra>" }],
    baseLayout({ showlegend: false, margin: { l: 60, r: 20, t: 10, b: 50 },
      xaxis: { title: { text: "wait suffered (ms)" } }, yaxis: { title: { text: "wait caused as the last rank (ms)" } } }));
    node.dataset.kind = "scatter";
  } else {
    await plot(node, [
      { type: "bar", name: "wait caused (as the last rank)", x: ranks, y: caused,
        marker: { color: "#e8533a" }, hovertemplate: "Rank %{x}: caused %{y:,.3f} ms<extra></extra>" },
      { type: "bar", name: "wait suffered", x: ranks, y: suffered,
        marker: { color: "#3f7fd8" }, hovertemplate: "Rank %{x}: waited %{y:,.3f} ms<extra></extra>" },
    ], baseLayout({ barmode: "group", margin: { l: 60, r: 20, t: 30, b: 50 },
      xaxis: { title: { text: "Rank (most wait caused first)" }, type: "category" },
      yaxis: { title: { text: "ms" } } }));
    node.dataset.kind = "bars";
  }
  node.dataset.ranks = String(t.rank.length);
  const worst = t.rank.length && t.wait_caused_ns[0] > 0
    ? `rank ${t.rank[0]} caused the most: ${ms(t.wait_caused_ns[0])} ms, last ${t.times_last[0]} time(s)` : "";
  $("#cl-late-totals-note").textContent = worst + (t.truncated ? " · more ranks not drawn" : "");
}

function stepOptions(steps) {
  const sel = clear($("#cl-late-step"));
  sel.append(...steps.map((s) => el("option", { value: s.step === null ? "" : String(s.step) },
    `${s.step === null ? "no step" : `step ${s.step}`} · ${formatCount(s.instances)} collectives · ` +
    `${ms(s.wait_caused_ns)} ms caused`)));
  return sel;
}

/** Build the section (#cl-late) from /late_arrivals/steps; resolves when its table and chart have drawn. */
export async function initLateArrivals() {
  const answer = await apiGet(`${api}/steps`);
  const host = $("#cl-late-body");
  if (!answer.available || !answer.steps.length) {
    clear(host).append(el("div", { class: "v-note", id: "cl-late-none" }, answer.available
      ? "No collective ran on two ranks or more of one group in this run." : answer.message));
    return;
  }
  const sel = stepOptions(answer.steps);
  // the step the URL asks for (late_step=, the timeline's Slice Detail links here), else the one that lost the
  // most to late ranks
  const asked = answer.steps.find((s) => s.step !== null && String(s.step) === urlParam("late_step"));
  const worst = answer.steps.reduce((a, b) => (b.wait_caused_ns > a.wait_caused_ns ? b : a));
  step = (asked || worst).step;
  sel.value = step === null ? "" : String(step);
  table = new DataTable($("#cl-late-table"), {
    id: "cl-late-rows", columns: COLUMNS, sort: "wait_caused", pageSize: 15, details,
    rowKey: (r) => `${r.group_id}|${r.op_name}|${r.seq}`,
    load: (p) => apiGet(`${api}/table`, { ...p, q: undefined, step: step ?? undefined }),
    csv: () => withQuery(`${api}/table.csv`, { step: step ?? undefined }),
    onRows: (page) => {
      $("#cl-late-note").textContent = `${formatCount(page.total)} collective instances matched across ranks ` +
        `(same group, op name and occurrence); the last rank is attributed when it leads the next by ` +
        `${ms(answer.min_lead_ns)} ms or more`;
    },
  });
  sel.addEventListener("change", () => {
    step = sel.value === "" ? null : Number(sel.value);
    table.reset();
    loadTotals();
  });
  await Promise.all([table.reload(), loadTotals()]);
  host.dataset.ready = "1";
  if (location.hash === "#cl-late") $("#cl-late").scrollIntoView();
}
