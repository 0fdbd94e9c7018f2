// Summary view: base info, the per-rank stacked time breakdown with ratio lines (step_trace_time.csv or derived
// from the Overlap Analysis lane), findings in plain words, top operators, the ranks' metadata and config.

import { apiGet } from "../common/api.js";
import { $, append, clear, el } from "../common/dom.js";
import { num, pct } from "../common/format.js";
import { currentRank, onRankChange } from "../common/nav.js";
import { sourceNote } from "../common/sources.js";
import { ms, nsToUs, us } from "../common/time.js";
import { runPage, withQuery } from "../common/urls.js";
import { baseLayout, plot } from "./charts.js";
import { field, select } from "./controls.js";
import { apiBase, markRanks, runId, showRank } from "./run.js";

// "step 50", "steps 1–10" for a consecutive run, else the first few ids
function stepList(steps) {
  const ids = steps.map(Number);
  if (ids.length === 1) return `step ${steps[0]}`;
  const consecutive = ids.every((v, i) => i === 0 || v === ids[i - 1] + 1);
  if (consecutive && ids.every(Number.isFinite)) return `steps ${steps[0]}–${steps[steps.length - 1]}`;
  return `steps ${steps.slice(0, 8).join(", ")}${steps.length > 8 ? ", …" : ""}`;
}

const STACK = [
  ["computing_not_overlapped_ns", "Computing(Not Overlapped)", "#3f7fd8"],
  ["overlapped_ns", "Computing_Communication Overlapped", "#2f9e6e"],
  ["communication_not_overlapped_ns", "Communication(Not Overlapped)", "#35b0b5"],
  ["free_ns", "Free", "#7a52d6"],
  ["preparing_ns", "Preparing", "#e0643a"],
];
const TABLE_COLS = [
  ["computing_ns", "Computing"], ["communication_not_overlapped_ns", "Communication(Not Overlapped)"],
  ["overlapped_ns", "Overlapped"], ["communication_ns", "Communication"], ["free_ns", "Free"],
  ["preparing_ns", "Preparing"], ["stage_ns", "Stage"], ["bubble_ns", "Bubble"],
];

const state = { source: "auto", step: "all", rank: currentRank() };
let data = null;

function kv(label, value, title) {
  return el("div", {}, el("div", { class: "k" }, label), el("div", { class: "v", title: title || String(value ?? "") }, value ?? "–"));
}

function renderBase(b) {
  const host = clear($("#sum-base"));
  host.append(
    kv("Source", b.source_path, b.source_path),
    kv("Ranks", `${b.rank_count} (${b.ranks_with_trace} with a trace)`),
    kv("Steps", b.steps.length ? `${b.steps.length} (${stepList(b.steps)})` : "none"),
    kv("Profiling duration", b.duration_ns ? `${ms(b.duration_ns, 2)} ms` : "unknown (no trace)"),
    kv("Profiler level", b.profiler_levels.join(", ") || "–"),
    kv("torch_npu", b.torch_npu_versions.join(", ") || "not recorded"),
    kv("CANN", b.cann_versions.join(", ") || "not recorded"),
    kv("Files read", `${b.files} (${num(b.bytes / 1e6, 2)} MB)` + (b.files_not_loaded ? `, ${b.files_not_loaded} not loaded` : "")),
    kv("Ingested", b.created_at),
  );
}

function stepRows() {
  const rows = data.breakdown;
  if (state.step !== "all") return rows.filter((r) => String(r.step) === state.step);
  const by = new Map();
  for (const r of rows) {
    const acc = by.get(r.rank) || { rank: r.rank, step: "all", source: r.source };
    for (const k of [...STACK.map((s) => s[0]), "computing_ns", "communication_ns", "stage_ns", "bubble_ns", "e2e_ns"]) {
      acc[k] = (acc[k] || 0) + (r[k] || 0);
    }
    by.set(r.rank, acc);
  }
  return [...by.values()].map((r) => ({ ...r,
    computing_ratio: r.e2e_ns ? r.computing_ns / r.e2e_ns : null,
    communication_ratio: r.e2e_ns ? r.communication_not_overlapped_ns / r.e2e_ns : null }));
}

function renderChart() {
  const rows = stepRows();
  const x = rows.map((r) => `Rank ${r.rank}`);
  const traces = STACK.map(([k, name, color]) => ({
    type: "bar", name, x, y: rows.map((r) => nsToUs(r[k] || 0)), marker: { color },
    hovertemplate: `${name}: %{y:,.3f} μs<extra>%{x}</extra>`,
  }));
  traces.push(
    { type: "scatter", mode: "lines+markers", name: "Communication Ratio", x, y: rows.map((r) => r.communication_ratio),
      yaxis: "y2", line: { color: "#e0508a", width: 2 }, hovertemplate: "Communication Ratio: %{y:.1%}<extra>%{x}</extra>" },
    { type: "scatter", mode: "lines+markers", name: "Computing Ratio", x, y: rows.map((r) => r.computing_ratio),
      yaxis: "y2", line: { color: "#5aa0ff", width: 2 }, hovertemplate: "Computing Ratio: %{y:.1%}<extra>%{x}</extra>" },
  );
  plot($("#sum-chart"), traces, baseLayout({
    barmode: "stack", bargap: 0.35, margin: { l: 80, r: 60, t: 50, b: 40 },
    yaxis: { title: { text: "Time(μs)" }, rangemode: "tozero" },
    yaxis2: { title: { text: "Ratio" }, overlaying: "y", side: "right", tickformat: ".0%", range: [0, 1], dtick: 0.2,
      showgrid: false },
    xaxis: { type: "category" },
  }));
  // the file or table each row came from, in its rank's format (a db run: analysis.db StepTraceTime)
  const sources = [...new Set(data.breakdown.map((r) => r.source_name))];
  $("#sum-source").textContent = sources.length ? `from ${sources.join(" and ")}` : "";
}

/** The profiler's step table as this run names it: step_trace_time.csv, or the db export's StepTraceTime. */
function stepTraceName() {
  return data.step_trace_names?.length ? data.step_trace_names.join(", ") : "step_trace_time.csv";
}

function renderFilters() {
  const steps = [...new Set(data.breakdown.map((r) => r.step).filter((s) => s !== null))];
  const opts = [{ value: "all", label: steps.length > 1 ? "All (summed)" : "All" }, ...steps.map((s) => ({ value: String(s), label: `Step ${s}` }))];
  clear($("#sum-filters")).append(
    field("Step", select(opts, state.step, (v) => { state.step = v; renderChart(); }, { id: "sum-step" })),
    field("Source", select([
      { value: "auto", label: `${stepTraceName()}, else Overlap Analysis` },
      { value: "step_trace", label: `${stepTraceName()} only` },
      { value: "overlap", label: "Overlap Analysis lane only" },
    ], state.source, (v) => { state.source = v; load(); }, { id: "sum-source-select" })),
  );
}

function renderAdvice() {
  const host = clear($("#sum-advice"));
  host.append(el("div", { class: "v-advice-head" }, "Advice"));
  if (!data.findings.length) {
    host.append(el("div", { class: "v-note" }, data.breakdown.length ? "Nothing stands out: no step has more than 10% Free time or more than 20% exposed communication." : "No step breakdown: see below which file each rank lacks."));
    return;
  }
  host.append(el("ul", { id: "sum-findings" }, data.findings.map((f) => el("li", { class: f.severity, dataset: { kind: f.kind } }, f.text))));
}

function renderTable() {
  const host = clear($("#sum-table"));
  const head = el("tr", {}, el("th", {}, "Rank"), el("th", {}, "Step"),
    TABLE_COLS.map(([, l]) => el("th", { class: "num" }, l)),
    el("th", { class: "num" }, "Computing Ratio"), el("th", { class: "num" }, "Communication Ratio"),
    el("th", { class: "num" }, "Free Ratio"), el("th", {}, "Source"));
  const body = el("tbody", {}, data.breakdown.map((r) => el("tr", {},
    el("td", {}, String(r.rank)), el("td", {}, r.step ?? "–"),
    TABLE_COLS.map(([k]) => el("td", { class: "num" }, ms(r[k]))),
    el("td", { class: "num" }, pct(r.computing_ratio)), el("td", { class: "num" }, pct(r.communication_ratio)),
    el("td", { class: "num" }, pct(r.free_ratio)),
    el("td", {}, r.source_name))));
  if (!data.breakdown.length) body.append(el("tr", {}, el("td", { colspan: 14, class: "empty" }, "No step breakdown for this run")));
  // ranks without a breakdown, and the file (or lane) each lacks
  const why = sourceNote(data.empty_sources?.breakdown, { id: "sum-breakdown-why" });
  const csv = el("a", { class: "btn v-csv", href: withQuery(`${apiBase}/summary/breakdown.csv`, { source: state.source }), download: "" }, "Export CSV");
  const parquet = el("a", { class: "btn v-parquet", href: withQuery(`${apiBase}/export/steps.parquet`, { source: state.source }),
    download: "", title: "The breakdown as Parquet" }, "Parquet");
  append(host, el("div", { class: "v-table-bar" }, el("span", { class: "v-table-info" }, `${data.breakdown.length} rows`),
    el("span", { class: "v-spacer" }), csv, parquet), el("div", { class: "v-table-wrap" }, el("table", { class: "grid v-table", id: "sum-breakdown" }, el("thead", {}, head), body)), why);
}

function simpleTable(cols, rows, id) {
  return el("div", { class: "v-table-wrap" }, el("table", { class: "grid v-table", id },
    el("thead", {}, el("tr", {}, cols.map((c) => el("th", { class: c.num ? "num" : null }, c.label)))),
    el("tbody", {}, rows.length ? rows.map((r) => el("tr", {}, cols.map((c) => {
      const v = c.render ? c.render(r) : r[c.key];
      return el("td", { class: c.num ? "num" : null }, v instanceof Node ? v : (v ?? "–"));
    }))) : el("tr", {}, el("td", { colspan: cols.length, class: "empty" }, "No data")))));
}

function renderTop() {
  const top = data.top_operators;
  $("#sum-top-note").textContent = top.rank === null ? "no kernels in any rank" : `rank ${top.rank}, by device time`;
  append(clear($("#sum-top")), sourceNote(data.empty_sources?.top_operators, { id: "sum-top-why" }), simpleTable([
    { key: "type", label: "Type" }, { key: "accelerator_core", label: "Accelerator Core" },
    { key: "count", label: "Count", num: true },
    { key: "total_ns", label: "Total Time(μs)", num: true, render: (r) => us(r.total_ns) },
    { key: "share", label: "Share", num: true, render: (r) => pct(r.share, 2) },
  ], top.rows, "sum-top-table"), top.rank === null ? null : el("p", {}, el("a", {
    href: runPage(runId, "operator", { rank: top.rank }) }, "All operators of this rank →")));
  const cores = data.core_split[String(top.rank)] || [];
  const total = cores.reduce((a, c) => a + c.total_ns, 0);
  clear($("#sum-cores")).append(simpleTable([
    { key: "accelerator_core", label: "Accelerator Core" }, { key: "count", label: "Kernels", num: true },
    { key: "total_ns", label: "Time(μs)", num: true, render: (r) => us(r.total_ns) },
    { key: "share", label: "Share", num: true, render: (r) => pct(total ? r.total_ns / total : null, 2) },
  ], cores, "sum-cores-table"));
}

function renderRanks() {
  clear($("#sum-ranks")).append(simpleTable([
    { key: "rank", label: "Rank" }, { key: "device_id", label: "Device" }, { key: "folder", label: "Folder" },
    { key: "profiler_level", label: "Level" }, { key: "torch_npu_version", label: "torch_npu" },
    { key: "cann_version", label: "CANN" },
    { key: "has_trace", label: "Trace", render: (r) => (r.has_trace ? "yes" : "no") },
    { key: "overlap_source", label: "Overlap Analysis", render: (r) => r.overlap_source ?? "–" },
    { key: "rank_source", label: "Rank from" },
  ], data.ranks, "sum-ranks-table"));
}

function flatten(obj, prefix = "") {
  const out = [];
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) out.push(...flatten(v, key));
    else out.push([key, Array.isArray(v) ? v.join(", ") : v === null ? null : String(v)]);
  }
  return out;
}

function kvTable(title, pairs, id) {
  return el("div", {}, el("h3", { class: "v-subtitle" }, title), simpleTable(
    [{ key: 0, label: "Key" }, { key: 1, label: "Value", render: (r) => (r[1] === "" ? el("span", { class: "v-note" }, "(unset)")
      : r[1] === null ? el("span", { class: "v-note", title: "null in the profiler's file" }, "(none)") : r[1]) }],
    pairs, id));
}

function renderConfig() {
  const r = data.ranks.find((x) => x.rank === state.rank) || data.ranks[0];
  const host = clear($("#sum-config"));
  if (!r) return;
  $("#sum-config-note").textContent = `rank ${r.rank} (profiler_info / profiler_metadata)`;
  host.append(
    kvTable("Profiler config", [...flatten(r.common_config), ...flatten(r.experimental_config, "experimental")], "sum-config-table"),
    el("div", {},
      kvTable("Environment variables", Object.entries(r.env || {}).map(([k, v]) => [k, String(v)]), "sum-env-table"),
      Object.keys(r.distributed_args || {}).length ? kvTable("distributed_args", flatten(r.distributed_args), "sum-dist-table") : null,
      Object.keys(r.extra_metadata || {}).length ? kvTable("Other metadata", flatten(r.extra_metadata), "sum-meta-table") : null),
  );
}

function renderGroups() {
  const host = clear($("#sum-groups"));
  if (!data.parallel_groups.length) {
    host.append(el("div", { class: "v-note" }, "No parallel_group_info in profiler_metadata.json."));
    return;
  }
  host.append(el("div", { class: "v-groups" }, data.parallel_groups.map((g) => el("div", { class: "v-group-chip", title: g.hccl_names.join(", ") },
    el("b", {}, g.group_name), `: ranks ${(g.global_ranks || []).join(", ")}`))));
}

async function load() {
  try {
    data = await apiGet(`${apiBase}/summary`, { source: state.source, rank: state.rank ?? undefined });
  } catch (err) {
    clear($("#sum-base")).append(el("div", { class: "v-error" }, `Could not load: ${err.message}`));
    return;
  }
  if (state.rank === null) { state.rank = data.top_operators.rank ?? data.ranks[0]?.rank ?? null; showRank(state.rank); }
  markRanks(data.ranks.map((r) => r.rank));
  renderBase(data.base);
  renderFilters();
  renderChart();
  renderAdvice();
  renderTable();
  renderTop();
  renderRanks();
  renderConfig();
  renderGroups();
}

onRankChange((rank) => { state.rank = rank; load(); });
load();
