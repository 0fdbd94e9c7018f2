// Operator view: kernel time by type / core (pies), the top-N groups (bar), the group table with each group's
// kernels (linked to the timeline), and the host torch ops. Everything is per rank (the top-bar selector).

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { num, pct } from "../common/format.js";
import { clip, distinct, shortNames } from "../common/names.js";
import { currentRank, onRankChange } from "../common/nav.js";
import { sourceLine, sourceNote } from "../common/sources.js";
import { nsToMs, nsToUs, relNs, us } from "../common/time.js";
import { withQuery } from "../common/urls.js";
import { timelineLink } from "./blocks.js";
import { baseLayout, CHART_COLORS, plot } from "./charts.js";
import { field, select } from "./controls.js";
import { apiBase, markRanks, showRank } from "./run.js";
import { DataTable } from "./table.js";

const GROUPS = [
  { value: "type", label: "Computing Operator Type" },
  { value: "name", label: "Computing Operator" },
  { value: "name_shapes", label: "Name and Input Shape" },
  { value: "core", label: "Accelerator Core" },
];
const KINDS = [
  { value: "all", label: "All kernels" },
  { value: "computing", label: "Computing" },
  { value: "communication", label: "Communication" },
];
// the type pie's slices with a legend entry (the rest join "Other"), and the characters of a legend or bar label
const PIE_SLICES = 12;
const LEGEND_CHARS = 32;
const BAR_CHARS = 48;
const KEY_LABELS = { type: "Type", name: "Name", input_shapes: "Input Shapes", accelerator_core: "Accelerator Core" };

// group_by null: the server's default (by type, or by name when no kernel has a type), until the user picks one
const state = { group_by: null, chosen: false, kind: "computing", step: "", top_n: 15, rank: currentRank() };
let groupsTable = null;
let torchTable = null;
let origin = null;
let torchWhy = null;  // why the selected rank has no torch ops (the overview's empty_sources.torch)
let kernelsWhy = null;  // … and no kernels

function common() {
  return { rank: state.rank ?? undefined, group_by: state.group_by ?? undefined, kind: state.kind,
    step: state.step === "" ? undefined : state.step };
}

function buildFilters(steps) {
  const bar = clear($("#op-filters"));
  const top = el("input", { type: "number", min: 1, max: 100, value: state.top_n, id: "op-topn" });
  top.addEventListener("change", () => { state.top_n = Math.max(1, Math.min(100, Number(top.value) || 15)); refresh(); });
  bar.append(
    field("Group By", select(GROUPS, state.group_by, (v) => { state.group_by = v; state.chosen = true; refresh(true); },
      { id: "op-group-by" })),
    field("Operators", select(KINDS, state.kind, (v) => { state.kind = v; refresh(true); }, { id: "op-kind" })),
    field("Step", select([{ value: "", label: "All" }, ...steps.map((s) => ({ value: s, label: String(s) }))],
      state.step, (v) => { state.step = v; refresh(true); }, { id: "op-step" })),
    field("Top", top),
  );
}

function startLabel(absNs) {
  if (absNs === null || absNs === undefined) return "–";
  if (!origin || origin === "0") return `${absNs.slice(0, -3)}.${absNs.slice(-3)} μs`;
  return `${nsToMs(relNs(absNs, origin)).toFixed(3)} ms`;
}

/** slices: [{label, full, value, other}]; the legend shows the short labels, the hover the full name. */
function pie(node, slices, title) {
  const traces = [{
    type: "pie", labels: slices.map((sl) => plotText(sl.label)), values: slices.map((sl) => sl.value),
    customdata: slices.map((sl) => plotText(sl.full)), hole: 0.35, sort: false, direction: "clockwise",
    marker: { colors: slices.map((sl, i) => (sl.other ? "#5d6673" : CHART_COLORS[i % CHART_COLORS.length])),
      line: { color: "#1b1d22", width: 1 } },
    textinfo: "percent", textposition: "inside", insidetextorientation: "horizontal",
    hovertemplate: "%{customdata}<br>%{value:,.3f} μs<br>%{percent}<extra></extra>",
  }];
  return plot(node, traces, baseLayout({
    margin: { l: 10, r: 10, t: 10, b: 10 },
    legend: { orientation: "v", x: -0.02, y: 0.5, xanchor: "right", font: { size: 11 } },
    showlegend: true, title: title ? { text: title } : undefined,
  }));
}

/** The pie's slices: the first PIE_SLICES groups under short labels (a scoped name's own op name; the full name
 * on hover), the rest and the overview's remainder as one "Other". */
function pieSlices(rows, name, valueNs, otherNs) {
  const shown = rows.slice(0, PIE_SLICES);
  const labels = distinct(shortNames(shown.map(name)).map((l) => clip(l, LEGEND_CHARS)));
  const slices = shown.map((r, i) => ({ label: labels[i], full: String(name(r)), value: nsToUs(valueNs(r)), other: false }));
  const rest = rows.slice(PIE_SLICES).reduce((sum, r) => sum + valueNs(r), 0) + (otherNs || 0);
  if (rest > 0) slices.push({ label: "Other", full: "Other (every group not shown)", value: nsToUs(rest), other: true });
  return slices;
}

function renderCharts(ov) {
  pie($("#op-type-pie"), pieSlices(ov.types.rows, (t) => t.type, (t) => t.total_ns, ov.types.other_ns));
  pie($("#op-core-pie"), pieSlices(ov.cores, (c) => c.accelerator_core, (c) => c.total_ns, 0));
  const rows = [...ov.top.rows].reverse();
  const shown = ov.top.keys.filter((k) => k !== "type" || state.group_by === "type");
  const full = (r) => shown.map((k) => r[k] ?? "N/A").join(" · ");
  // a scoped name reads as its op's own name (full name on hover); shortened before escaping, so that no entity is
  // cut in half, and kept distinct (plotly would stack two equal labels on one bar)
  const short = shortNames(rows.map((r) => String(r[shown[0]] ?? "N/A")));
  const label = (r, i) => [short[i], ...shown.slice(1).map((k) => r[k] ?? "N/A")].join(" · ");
  const names = distinct(rows.map((r, i) => clip(label(r, i), BAR_CHARS))).map(plotText);
  $("#op-top-title").textContent = `Top ${ov.top.rows.length} by total time — ${GROUPS.find((g) => g.value === state.group_by).label}`;
  const node = $("#op-top-bar");
  // (the click is bound once the chart is drawn: before plotly.js has run, the node has no .on)
  plot(node, [{
    type: "bar", orientation: "h", y: names, x: rows.map((r) => nsToUs(r.total_ns)),
    marker: { color: rows.map((r, i) => CHART_COLORS[(rows.length - 1 - i) % CHART_COLORS.length]) },
    customdata: rows.map((r) => [r.count, pct(r.share, 2), plotText(full(r))]),
    hovertemplate: "%{customdata[2]}<br>%{x:,.3f} μs · %{customdata[0]} kernels · %{customdata[1]}<extra></extra>",
  }], baseLayout({ margin: { l: 260, r: 20, t: 10, b: 40 }, showlegend: false,
    xaxis: { title: { text: "Total Time(μs)" } }, yaxis: { automargin: true, tickfont: { size: 11 } } })).then(() => {
    node.removeAllListeners?.("plotly_click");
    node.on("plotly_click", (ev) => {
      const p = ev.points?.[0];
      if (!p) return;
      const r = rows[p.pointIndex];
      groupsTable.filterTo(String(r[ov.top.keys[0]] ?? ""));
    });
  });
}

function groupColumns(keys) {
  const cols = keys.map((k) => ({ key: k, label: KEY_LABELS[k] || k, sort: k,
    render: (r) => r[k] ?? "N/A", cellTitle: (r) => r[k] ?? "" }));
  return cols.concat([
    { key: "count", label: "Count", sort: "count", num: true, render: (r) => num(r.count, 0) },
    { key: "total_ns", label: "Total Time(μs)", sort: "total", num: true, render: (r) => us(r.total_ns) },
    { key: "avg_ns", label: "Avg Time(μs)", sort: "avg", num: true, render: (r) => us(r.avg_ns) },
    { key: "max_ns", label: "Max Time(μs)", sort: "max", num: true, render: (r) => us(r.max_ns) },
    { key: "min_ns", label: "Min Time(μs)", sort: "min", num: true, render: (r) => us(r.min_ns) },
    { key: "wait_ns", label: "Wait Time(μs)", sort: "wait", num: true, render: (r) => us(r.wait_ns) },
    { key: "share", label: "Share", num: true, render: (r) => pct(r.share, 2) },
  ]);
}

const INSTANCE_COLUMNS = [
  { key: "name", label: "Name", sort: "name", cellTitle: (r) => r.name },
  { key: "timeline_url", label: "Timeline", render: (r) => timelineLink(r.timeline_url, r.slice_id !== null ? "Show in Timeline" : "Show time range") },
  { key: "start_ns", label: "Start Time", sort: "start", num: true, render: (r) => startLabel(r.start_ns),
    title: "ms from the start of the run (absolute μs for runs without a trace)" },
  { key: "duration_ns", label: "Duration(μs)", sort: "duration", num: true, render: (r) => us(r.duration_ns) },
  { key: "wait_time_ns", label: "Wait Time(μs)", sort: "wait", num: true, render: (r) => us(r.wait_time_ns) },
  { key: "block_dim", label: "Block Dim", sort: "block_dim", num: true },
  { key: "accelerator_core", label: "Accelerator Core" },
  { key: "input_shapes", label: "Input Shapes", cellTitle: (r) => r.input_shapes },
  { key: "input_data_types", label: "Input Data Types" },
  { key: "input_formats", label: "Input Formats" },
  { key: "output_shapes", label: "Output Shapes", cellTitle: (r) => r.output_shapes },
  { key: "output_data_types", label: "Output Data Types" },
  { key: "output_formats", label: "Output Formats" },
  { key: "step_id", label: "Step", num: true },
];

function instancesFor(group) {
  const box = el("div", { class: "v-instances" });
  const t = new DataTable(box, {
    columns: INSTANCE_COLUMNS, pageSize: 10, sort: "start", order: "asc", id: null,
    load: (p) => apiGet(`${apiBase}/operators/instances`, { ...common(), group_key: group.group_key, ...p }),
    csv: (p) => withQuery(`${apiBase}/operators/instances.csv`, { ...common(), group_key: group.group_key, ...p }),
    parquet: (p) => withQuery(`${apiBase}/export/kernel_instances.parquet`,
      { ...common(), group_key: group.group_key, ...p, q: undefined }),
    onRows: (data) => {
      if (!data.has_trace) box.querySelector(".v-no-trace") || box.prepend(el("div", { class: "v-note warn v-no-trace" },
        "This rank has no trace: the kernels cannot be shown on the timeline."));
    },
  });
  box.classList.add("v-instance-table");
  t.reload();
  return box;
}

function buildGroupsTable() {
  const host = clear($("#op-groups"));
  const keys = { type: ["type", "accelerator_core"], name: ["name", "type", "accelerator_core"],
    name_shapes: ["name", "input_shapes", "type", "accelerator_core"], core: ["accelerator_core"] }[state.group_by];
  groupsTable = new DataTable(host, {
    columns: groupColumns(keys), pageSize: 20, sort: "total", order: "desc", id: "op-groups-table",
    filter: `Filter by ${KEY_LABELS[keys[0]].toLowerCase()}…`,
    empty: () => sourceLine(kernelsWhy, "No kernels for this filter"),
    rowKey: (r) => r.group_key,
    load: (p) => apiGet(`${apiBase}/operators/groups`, { ...common(), ...p }),
    csv: (p) => withQuery(`${apiBase}/operators/groups.csv`, { ...common(), ...p }),
    parquet: (p) => withQuery(`${apiBase}/export/kernels.parquet`, { ...common(), ...p }),
    details: (row) => instancesFor(row),
  });
  groupsTable.filterTo = (text) => {
    const input = host.querySelector(".v-filter");
    if (input) input.value = text;
    groupsTable.state.q = text;
    groupsTable.reset();
    host.scrollIntoView({ behavior: "smooth", block: "start" });
  };
  groupsTable.reload();
}

function buildTorchTable() {
  const host = clear($("#op-torch"));
  let group = "name";
  const cols = () => {
    const base = group === "none"
      ? [{ key: "src_row", label: "Row", sort: "src_row", num: true }, { key: "name", label: "Name", sort: "name" },
        { key: "input_shapes", label: "Input Shapes", cellTitle: (r) => r.input_shapes }]
      : [{ key: "name", label: "Name", sort: "name", cellTitle: (r) => r.name },
        ...(group === "name_shapes" ? [{ key: "input_shapes", label: "Input Shapes", sort: "input_shapes", cellTitle: (r) => r.input_shapes }] : []),
        { key: "count", label: "Count", sort: "count", num: true }];
    return base.concat([
      { key: "host_self_duration_ns", label: "Host Self(μs)", sort: "host_self", num: true, render: (r) => us(r.host_self_duration_ns) },
      { key: "host_total_duration_ns", label: "Host Total(μs)", sort: "host_total", num: true, render: (r) => us(r.host_total_duration_ns) },
      { key: "device_self_duration_ns", label: "Device Self(μs)", sort: "device_self", num: true, render: (r) => us(r.device_self_duration_ns) },
      { key: "device_total_duration_ns", label: "Device Total(μs)", sort: "device_total", num: true, render: (r) => us(r.device_total_duration_ns) },
      { key: "device_self_duration_with_aicore_ns", label: "Device Self AI Core(μs)", sort: "device_self_aicore", num: true, render: (r) => us(r.device_self_duration_with_aicore_ns) },
      { key: "device_total_duration_with_aicore_ns", label: "Device Total AI Core(μs)", sort: "device_total_aicore", num: true, render: (r) => us(r.device_total_duration_with_aicore_ns) },
    ]);
  };
  const bar = el("div", { class: "v-table-bar" }, field("Group By", select(
    [{ value: "name", label: "Name" }, { value: "name_shapes", label: "Name and Input Shapes" }, { value: "none", label: "No grouping (rows)" }],
    group, (v) => { group = v; make(); }, { id: "op-torch-group" })));
  const tableHost = el("div");
  host.append(bar, tableHost);
  const make = () => {
    clear(tableHost);
    torchTable = new DataTable(tableHost, {
      columns: cols(), pageSize: 15, sort: "device_self", order: "desc", id: "op-torch-table",
      filter: "Filter by name…", empty: () => sourceLine(torchWhy, "No torch ops for this filter"),
      load: (p) => apiGet(`${apiBase}/operators/torch`, { rank: state.rank ?? undefined, group_by: group, ...p }),
      csv: (p) => withQuery(`${apiBase}/operators/torch.csv`, { rank: state.rank ?? undefined, group_by: group, ...p }),
      parquet: (p) => withQuery(`${apiBase}/export/operators.parquet`, { rank: state.rank ?? undefined, group_by: group, ...p }),
    });
    torchTable.reload();
  };
  make();
}

async function refresh(rebuildTable = false) {
  let ov;
  try {
    ov = await apiGet(`${apiBase}/operators`, { ...common(), top_n: state.top_n });
  } catch (err) {
    $("#op-summary").textContent = `Could not load: ${err.message}`;
    return;
  }
  markRanks(ov.ranks.filter((r) => r.kernels).map((r) => r.rank));
  if (!state.chosen) state.group_by = ov.group_by || "type";
  if (state.rank === null) { state.rank = ov.rank; showRank(ov.rank); }
  buildFilters(ov.steps || []);
  const summary = clear($("#op-summary"));
  torchWhy = ov.empty_sources?.torch ?? null;
  kernelsWhy = ov.empty_sources?.kernels ?? null;
  if (ov.rank === null || !ov.kernel_count) {
    const withData = ov.ranks.filter((r) => r.kernels).map((r) => r.rank);
    summary.append(sourceNote(ov.empty_sources?.kernels, { id: "op-kernels-why" }) ||
      el("span", { class: "v-note warn" }, `No kernels for rank ${state.rank ?? "–"} with this filter.`));
    if (withData.length) summary.append(el("div", { class: "v-note" }, `Ranks with kernels: ${withData.join(", ")}.`));
  } else {
    summary.append("Rank ", el("b", {}, String(ov.rank)), ": ", el("b", {}, num(ov.kernel_count, 0)), " kernels, ",
      el("b", {}, `${us(ov.total_ns)} μs`), " of device time",
      ov.has_trace ? "" : el("span", { class: "v-badge warn", title: "no trace_view.json for this rank" }, "no trace: timeline links disabled"));
    if (ov.from_trace) summary.append(el("div", { class: "v-note warn", id: "op-from-trace" },
      "This rank's output has no kernel table (kernel_details.csv): these kernels are the trace's Ascend Hardware "
      + "compute tasks and communication operators, named as in the trace, without operator type, shapes or PMU metrics."));
    if (!state.chosen && ov.group_by_note) summary.append(el("div", { class: "v-note", id: "op-group-note" }, ov.group_by_note));
  }
  $("#op-type-title").textContent = ov.types?.by === "name"
    ? "Total Time(μs) Group by Operator Name (no operator types)" : "Total Time(μs) Group by Operator Type";
  renderCharts(ov);
  if (rebuildTable || !groupsTable) buildGroupsTable();
  else groupsTable.reset();
}

async function init() {
  // the run's origin (only the kernels' start times need it) arrives meanwhile: the charts do not wait for it
  apiGet(apiBase).then((run) => { origin = run.origin_ns; }, () => { origin = null; });
  // the torch table waits for the overview: its empty text names the file the new rank lacks
  onRankChange(async (rank) => {
    state.rank = rank;
    if (!state.chosen) state.group_by = null;  // the new rank's default
    await refresh(true);
    if (torchTable) buildTorchTable();
  });
  await refresh(true);
  buildTorchTable();
}

init();
