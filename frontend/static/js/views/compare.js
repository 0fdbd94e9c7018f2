// Compare page: pick side A and side B (a ready run, one of its ranks, one step or the whole rank), then see the
// step breakdown, a step-aligned timeline of both, and the operator, torch op and communication tables with
// B − A deltas, as /api/compare answers them. The sides live in the URL (?a=&b=&rank_a=&step_a=…), so a copied
// link reopens the same comparison.

import { apiGet, isAbort } from "../common/api.js";
import { $, append, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { formatCount, pct } from "../common/format.js";
import { ms, nsToMs, us } from "../common/time.js";
import { COMPARE_API, RUNS_API, runPage, urlParam, withQuery } from "../common/urls.js";
import { baseLayout, plot } from "./charts.js";
import { CompareTimeline } from "./comparetimeline.js";
import { field, select } from "./controls.js";

const SIDES = ["a", "b"];
const STACK = [
  ["computing_not_overlapped_ns", "Computing (not overlapped)", "#3f7fd8"],
  ["overlapped_ns", "Overlapped", "#2f9e6e"],
  ["communication_not_overlapped_ns", "Exposed communication", "#35b0b5"],
  ["free_ns", "Free", "#7a52d6"],
  ["preparing_ns", "Preparing", "#e0643a"],
];
const KERNEL_FIELDS = [
  { key: "count", label: "Count", fmt: formatCount, pct: false },
  { key: "total_ns", label: "Total (μs)", fmt: us },
  { key: "avg_ns", label: "Avg (μs)", fmt: us },
];
const TORCH_FIELDS = [
  { key: "count", label: "Count", fmt: formatCount, pct: false },
  { key: "host_self_duration_ns", label: "Host self (μs)", fmt: us },
  { key: "device_self_duration_ns", label: "Device self (μs)", fmt: us },
];
const COMM_FIELDS = [
  { key: "count", label: "Ops", fmt: formatCount, pct: false },
  { key: "elapse_time_ns", label: "Elapse (ms)", fmt: ms },
  { key: "transit_time_ns", label: "Transit (ms)", fmt: ms },
  { key: "wait_time_ns", label: "Wait (ms)", fmt: ms },
];

const state = {
  a: urlParam("a"), b: urlParam("b"),
  rank_a: urlParam("rank_a") ?? urlParam("rank"), rank_b: urlParam("rank_b"),
  step_a: urlParam("step_a"), step_b: urlParam("step_b"),
  group_by: urlParam("group_by") || "name", sort: urlParam("sort") || "total", align: urlParam("align") || "host",
  show: "all", q: "",
};
let runs = [];
let data = null;
let seq = 0;
const view = $("#compare-view");
const timeline = new CompareTimeline($("#cmp-timeline"), {
  load: (params) => apiGet(`${COMPARE_API}/timeline`, params),
  onError: (err) => { $("#cmp-tl-note").textContent = `Could not load: ${err.message}`; },
});

function sideParams() {
  const p = { a: state.a, b: state.b };
  for (const k of ["rank_a", "rank_b", "step_a", "step_b"]) if (state[k] !== null && state[k] !== "") p[k] = state[k];
  return p;
}

function writeUrl() {
  const all = { ...sideParams(), group_by: state.group_by, sort: state.sort, align: state.align };
  const kept = Object.fromEntries(Object.entries(all).filter(([, v]) => v !== ""));  // queryString drops null too
  history.replaceState(history.state, "", withQuery(location.pathname, kept));
}

// ------------------------------------------------------------------ pickers

const stepValue = (side) => (side.step === null ? "all" : String(side.step));

function picker(s) {
  const host = clear($(`#cmp-pick-${s}`));
  const side = data?.[s];
  const named = new Map();
  for (const r of runs) named.set(r.name, (named.get(r.name) || 0) + 1);
  const runLabel = (r) => (named.get(r.name) > 1 ? `${r.name} (${r.id})` : r.name);
  const runSel = select(runs.map((r) => ({ value: r.id, label: runLabel(r) })), state[s], (v) => {
    state[s] = v;
    state[`rank_${s}`] = null;
    state[`step_${s}`] = null;
    load();
  }, { id: `cmp-run-${s}` });
  const ranks = side?.ranks || [];
  const rankSel = select(ranks.map((r) => ({ value: String(r), label: `Rank ${r}` })), side ? String(side.rank) : "",
    (v) => { state[`rank_${s}`] = v; state[`step_${s}`] = null; load(); }, { id: `cmp-rank-${s}` });
  const steps = side?.steps || [];
  const stepSel = select([...steps.map((st) => ({ value: String(st), label: `Step ${st}` })),
    { value: "all", label: steps.length ? "All steps (whole rank)" : "Whole rank (no steps)" }],
  side ? stepValue(side) : "", (v) => { state[`step_${s}`] = v; load(); },
  { id: `cmp-step-${s}` });
  host.append(el("span", { class: `cmp-side-tag cmp-tag-${s}` }, s.toUpperCase()),
    field("Run", runSel), field("Rank", rankSel), field("Step", stepSel),
    side ? el("a", { href: runPage(side.run_id, "summary", { rank: side.rank }), class: "cmp-open" },
      "open") : null);
}

// ------------------------------------------------------------------ tables

function deltaCell(d, p, fmt, withPct, ratio = false) {
  // more time on B is red, less is green; a ratio moving is neither good nor bad by itself
  const cls = ratio || d === null || d === undefined || d === 0 ? "" : d > 0 ? "cmp-up" : "cmp-down";
  // a ratio's change is in percentage points, not a percent of a percent
  const sign = (v) => (v > 0 ? "+" : "");
  const text = d === null || d === undefined ? "–" : sign(d) + (ratio ? `${(100 * d).toFixed(2)} pp` : fmt(d));
  const cells = [el("td", { class: `num cmp-delta ${cls}` }, text)];
  if (withPct) {
    const ptext = p === null || p === undefined ? "–" : sign(p) + pct(p, 1);
    cells.push(el("td", { class: `num cmp-delta ${cls}` }, ptext));
  }
  return cells;
}

function onlyBadge(r) {
  if (!r.only) return null;
  const side = r.only.toUpperCase();
  return el("span", { class: `v-badge cmp-only cmp-only-${r.only}`, title: `this row exists on side ${side} only` },
    `only in ${side}`);
}

/** A table of aligned rows: key columns, then per field A, B, Δ and (for times) Δ%. */
function compareTable(id, keyCols, fields, rows, emptyText) {
  const head1 = el("tr", {}, keyCols.map((c) => el("th", { rowspan: 2 }, c.label)),
    fields.map((f) => el("th", { colspan: f.pct === false ? 3 : 4, class: "cmp-group" }, f.label)));
  const head2 = el("tr", {}, fields.flatMap((f) => [el("th", { class: "num" }, "A"), el("th", { class: "num" }, "B"),
    el("th", { class: "num" }, "Δ"), f.pct === false ? null : el("th", { class: "num" }, "Δ%")]));
  const body = el("tbody");
  for (const r of rows) {
    body.append(el("tr", { class: r.only ? `cmp-row-only-${r.only}` : null, dataset: { key: r.key } },
      keyCols.map((c) => el("td", { title: c.title?.(r) ?? null }, c.render(r))),
      fields.flatMap((f) => [
        el("td", { class: "num" }, r.a ? f.fmt(r.a[f.key]) : "–"),
        el("td", { class: "num" }, r.b ? f.fmt(r.b[f.key]) : "–"),
        ...deltaCell(r.delta?.[f.key], r.delta_pct?.[f.key], f.fmt, f.pct !== false),
      ])));
  }
  if (!rows.length) body.append(el("tr", {}, el("td", { class: "empty", colspan: 99 }, emptyText)));
  return el("div", { class: "v-table-wrap cmp-scroll" },
    el("table", { class: "grid v-table cmp-table", id }, el("thead", {}, head1, head2), body));
}

function filtered(table, keyText) {
  const q = state.q.toLowerCase();
  return table.rows.filter((r) => (state.show === "all" || (state.show === "both" ? !r.only : r.only === state.show))
    && (!q || keyText(r).toLowerCase().includes(q)));
}

function tableBar(table, shown, what) {
  const cut = table.truncated ? " (cut to the largest: more rows exist)" : "";
  const only = `only in A: ${formatCount(table.only_a)} · only in B: ${formatCount(table.only_b)}`;
  return el("div", { class: "v-table-info cmp-count" },
    `${formatCount(shown)} of ${formatCount(table.rows.length)} ${what}${cut} · ${only}`);
}

function sourceText(src, name) {
  if (name) return name;  // the file or table, in the side's format (analysis.db, msprof op_summary…)
  if (src === "kernel_details") return "kernel_details.csv";
  if (src === "trace") return "the trace's device lanes (no kernel_details.csv)";
  return "no kernels";
}

function renderKernels() {
  const k = data.kernels;
  const unsplit = (s) => (data[s].step !== null && !k.step_filtered[s] ? ", whole rank (not split by step)" : "");
  $("#cmp-kernels-note").textContent = SIDES.map((s) => `${s.toUpperCase()}: ${sourceText(k.source[s], k.source_name?.[s])}${unsplit(s)}`)
    .join(" · ");
  const keyText = (r) => [r.name, r.type, r.accelerator_core].filter(Boolean).join(" ");
  const rows = filtered(k, keyText);
  const badged = (text, r) => el("span", {}, text ?? "–", " ", onlyBadge(r));
  const keyCols = [
    k.group_by === "name" ? { label: "Name", render: (r) => badged(r.name, r), title: (r) => r.name } : null,
    { label: "Type", render: (r) => (k.group_by === "name" ? (r.type ?? "–") : badged(r.type, r)) },
    { label: "Core", render: (r) => r.accelerator_core ?? "–" },
  ].filter(Boolean);
  clear($("#cmp-kernels")).append(tableBar(k, rows.length, "kernel groups"),
    compareTable("cmp-kernels-table", keyCols, KERNEL_FIELDS, rows, "No kernels on either side"));
}

function renderTorch() {
  const t = data.torch_ops;
  const rows = filtered(t, (r) => r.name || "");
  clear($("#cmp-torch")).append(tableBar(t, rows.length, "torch ops"),
    compareTable("cmp-torch-table",
      [{ label: "Name", render: (r) => el("span", {}, r.name, " ", onlyBadge(r)), title: (r) => r.name }],
      TORCH_FIELDS, rows, "No torch ops (operator_details.csv) on either side"));
}

function renderComm() {
  const c = data.communication;
  const rows = filtered(c, (r) => r.op_type || "");
  const total = c.total_row;
  const totalFields = [{ key: "ops", label: "Ops", fmt: formatCount, pct: false }, ...COMM_FIELDS.slice(1),
    { key: "synchronization_time_ns", label: "Synchronization (ms)", fmt: ms }];
  const totalKey = [{ label: "Rank total", render: () => "All ops (the Communication view's rank row)" }];
  const totalTable = total ? compareTable("cmp-comm-total", totalKey, totalFields, [total], "") : null;
  append(clear($("#cmp-comm")), tableBar(c, rows.length, "op types"),
    compareTable("cmp-comm-table", [{ label: "Op type", render: (r) => el("span", {}, r.op_type, " ", onlyBadge(r)) }],
      COMM_FIELDS, rows, "No communication ops (communication.json) on either side for these steps"),
    totalTable ? el("div", { class: "cmp-total" }, totalTable) : null);
}

function renderBreakdown() {
  const bd = data.breakdown;
  const names = { step_trace: "step_trace_time.csv", overlap: "the Overlap Analysis lane" };
  const src = (s) => bd.source_name?.[s] || names[bd.source[s]] || bd.source[s] || "no breakdown";
  $("#cmp-breakdown-note").textContent = `ms; A from ${src("a")}, B from ${src("b")}`;
  const body = el("tbody", {}, bd.rows.map((r) => {
    const fmt = r.ratio ? (x) => pct(x, 2) : (x) => ms(x);
    return el("tr", { dataset: { key: r.key } }, el("td", {}, r.label), el("td", { class: "num" }, fmt(r.a)),
      el("td", { class: "num" }, fmt(r.b)), deltaCell(r.delta, r.delta_pct, fmt, true, r.ratio));
  }));
  const table = el("table", { class: "grid v-table cmp-table", id: "cmp-breakdown-table" },
    el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", { class: "num" }, "A"), el("th", { class: "num" }, "B"),
      el("th", { class: "num" }, "Δ"), el("th", { class: "num" }, "Δ%"))), body);
  const missing = SIDES.filter((s) => !bd.source[s]).map((s) => el("div", { class: "v-note warn" },
    `Side ${s.toUpperCase()} has no step breakdown for this rank and step `
    + "(no step_trace_time.csv row and no Overlap Analysis lane)."));
  clear($("#cmp-breakdown")).append(el("div", { class: "v-table-wrap" }, table), ...missing);
  const byKey = Object.fromEntries(bd.rows.map((r) => [r.key, r]));
  const x = SIDES.map((s) => plotText(`${s.toUpperCase()} · ${data[s].run_name} · r${data[s].rank}`
    + (data[s].step === null ? "" : ` · step ${data[s].step}`)));
  const traces = STACK.map(([key, name, color]) => ({
    type: "bar", name, x, y: SIDES.map((s) => nsToMs(byKey[key]?.[s] ?? 0)), marker: { color },
    hovertemplate: `${name}: %{y:,.3f} ms<extra>%{x}</extra>`,
  }));
  plot($("#cmp-breakdown-chart"), traces, baseLayout({
    barmode: "stack", bargap: 0.45, margin: { l: 60, r: 20, t: 40, b: 40 },
    yaxis: { title: { text: "ms" }, rangemode: "tozero" }, xaxis: { type: "category" },
  }));
}

function renderFilters() {
  const bar = el("div", { class: "v-filterbar cmp-filters", id: "cmp-filters" },
    field("Kernels by", select(
      [{ value: "name", label: "Name + type + core" }, { value: "type", label: "Type + core" }],
      state.group_by, (v) => { state.group_by = v; load(); }, { id: "cmp-group-by" })),
    field("Order", select([{ value: "total", label: "Largest first" }, { value: "delta", label: "Largest |Δ| first" },
      { value: "name", label: "Name" }], state.sort, (v) => { state.sort = v; load(); }, { id: "cmp-sort" })),
    field("Rows", select([{ value: "all", label: "All" }, { value: "both", label: "On both sides" },
      { value: "a", label: "Only in A" }, { value: "b", label: "Only in B" }], state.show,
    (v) => { state.show = v; renderTables(); }, { id: "cmp-show" })));
  const q = el("input", { type: "search", class: "v-filter", id: "cmp-filter", placeholder: "Filter names",
    value: state.q, spellcheck: "false" });
  q.addEventListener("input", () => { state.q = q.value.trim(); renderTables(); });
  bar.append(q);
  const old = $("#cmp-filters");
  if (old) old.replaceWith(bar);
  else $("#cmp-kernels").before(bar);
}

function renderTables() {
  renderKernels();
  renderTorch();
  renderComm();
}

function renderTimelineNote() {
  const parts = SIDES.map((s) => {
    const d = data[s];
    return `${s.toUpperCase()}: ${d.step === null ? "whole rank, from its trace start" : `step ${d.step}`}`;
  });
  const align = el("select", { id: "cmp-align" },
    el("option", { value: "host", selected: state.align === "host" }, "each step's start (ProfilerStep)"),
    el("option", { value: "device", selected: state.align === "device" }, "each step's first device task"));
  align.addEventListener("change", () => {
    state.align = align.value;
    writeUrl();
    timeline.reset({ ...sideParams(), align: state.align });
  });
  clear($("#cmp-tl-note")).append(`${parts.join(" · ")} · aligned on `, align);
}

// ------------------------------------------------------------------ loading

async function load() {
  const mine = ++seq;
  writeUrl();
  view.dataset.ready = "false";
  $("#cmp-status").textContent = "Loading…";
  SIDES.forEach(picker);
  try {
    const answer = await apiGet(COMPARE_API, { ...sideParams(), group_by: state.group_by, sort: state.sort });
    if (mine !== seq) return;
    data = answer;
    if (data.a.run_id === data.b.run_id && state.rank_b === null && data.a.rank === data.b.rank
      && data.a.step === data.b.step && data.b.ranks.length > 1) {
      // one run against itself: its next rank is the likely question
      state.rank_b = String(data.b.ranks.find((r) => r !== data.a.rank));
      return load();
    }
  } catch (err) {
    if (isAbort(err) || mine !== seq) return;
    $("#cmp-status").textContent = `Could not compare: ${err.message}`;
    $("#cmp-status").classList.add("warn");
    return;
  }
  $("#cmp-status").classList.remove("warn");
  $("#cmp-status").textContent = data.a.run_id === data.b.run_id
    ? (data.a.rank === data.b.rank ? "The same run and rank on both sides: comparing two steps."
      : "The same run on both sides: comparing two ranks.")
    : "";
  SIDES.forEach(picker);
  renderBreakdown();
  renderFilters();
  renderTables();
  renderTimelineNote();
  view.dataset.ready = "true";
  await timeline.reset({ ...sideParams(), align: state.align });
}

async function start() {
  try {
    runs = (await apiGet(RUNS_API)).runs.filter((r) => r.status === "ready");
  } catch (err) {
    $("#cmp-status").textContent = `Could not list the runs: ${err.message}`;
    return;
  }
  if (!runs.length) {
    $("#cmp-status").textContent = "No ready run to compare yet: open or upload one on the runs page.";
    return;
  }
  const ids = new Set(runs.map((r) => r.id));
  if (!ids.has(state.a)) state.a = runs[0].id;
  if (!ids.has(state.b)) {
    // another run when there is one; else the same run, on its next rank when the URL did not pick one
    state.b = (runs.find((r) => r.id !== state.a) || runs[0]).id;
  }
  $("#cmp-swap").addEventListener("click", () => {
    [state.a, state.b] = [state.b, state.a];
    if (data) { // what each side showed, defaults included
      [state.rank_a, state.rank_b] = [String(data.b.rank), String(data.a.rank)];
      [state.step_a, state.step_b] = [stepValue(data.b), stepValue(data.a)];
    } else {
      [state.rank_a, state.rank_b] = [state.rank_b, state.rank_a];
      [state.step_a, state.step_b] = [state.step_b, state.step_a];
    }
    load();
  });
  load();
}

start();
