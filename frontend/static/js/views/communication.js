// Communication view. Duration analysis: an op thumbnail per rank, per-rank Elapse / Transit / Synchronization /
// Wait with their ratios, slow ranks and links, bandwidth per transport with packet sizes, and the op table
// (linked to the timeline when the rank has a trace). Matrix: a rank × rank heatmap for one matrix key.
// Filters: step, group, op (top bar) and the rank selector ("All ranks" allowed) for the bandwidth and op table.

import { apiGet } from "../common/api.js";
import { colorFor } from "../common/colors.js";
import { $, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { fixed, num } from "../common/format.js";
import { currentRank, onRankChange } from "../common/nav.js";
import { sourceLine, sourceNote } from "../common/sources.js";
import { ms, nsToMs } from "../common/time.js";
import { withQuery } from "../common/urls.js";
import { timelineLink } from "./blocks.js";
import { baseLayout, plot } from "./charts.js";
import { field, select } from "./controls.js";
import { apiBase } from "./run.js";
import { DataTable } from "./table.js";

const TRANSPORTS = ["HCCS", "PCIE", "RDMA", "SDMA", "SIO"];
const METRICS = [
  { value: "bandwidth_gbps", label: "Bandwidth(GB/s)" },
  { value: "transit_size_mb", label: "Transit Size(MB)" },
  { value: "transit_time_ns", label: "Transit Time(ms)" },
  { value: "transport_type", label: "Transport Type" },
];

const state = { step: "", group: "", op: "", mode: "duration", rank: currentRank(), matrixKey: null,
  metric: "bandwidth_gbps", inner: false };
let ov = null;
let opsTable = null;

const filt = () => ({ step: state.step || undefined, group: state.group || undefined });

function opColor(name) {
  // hcom_allReduce__586_3_1 -> one colour per op instance index, shared by the ranks running that op
  return colorFor(String(name).replace(/^hcom_/, ""));
}

function groupLabel(g) {
  const ranks = g.ranks.length > 8 ? `${g.ranks.slice(0, 8).join(",")}…` : g.ranks.join(",");
  return `${g.group_id} · ${g.comm_types.join("/")} · ranks ${ranks}`;
}

function buildFilters() {
  const bar = clear($("#comm-filters"));
  const steps = [{ value: "", label: "All" }, ...ov.steps.map((s) => ({ value: s.step, label: s.step_id ?? s.step }))];
  const groups = [{ value: "", label: "All groups" }, ...ov.groups.map((g) => ({ value: g.group_id, label: groupLabel(g) }))];
  const ops = [{ value: "", label: "Total Op Info (all ops)" }, ...ov.ops.map((o) => ({ value: o.op_name, label: o.op_name }))];
  const mode = (value, label) => {
    const r = el("input", { type: "radio", name: "comm-mode", value, checked: state.mode === value, id: `comm-mode-${value}` });
    r.addEventListener("change", () => { state.mode = value; showMode(); });
    return el("label", { class: "v-radio" }, r, label);
  };
  bar.append(
    field("Step", select(steps, state.step, (v) => { state.step = v; state.op = ""; reload(); }, { id: "comm-step" })),
    field("Communication Group", select(groups, state.group, (v) => { state.group = v; state.op = ""; reload(); }, { id: "comm-group" })),
    field("Operator Name", select(ops, state.op, (v) => { state.op = v; reloadTotals(); loadBandwidth(); }, { id: "comm-op" })),
    el("span", {}, mode("duration", "Communication Duration Analysis"), mode("matrix", "Communication Matrix")),
  );
  const note = clear($("#comm-trace-note"));
  if (!ov.trace_ranks.length) {
    note.append(el("div", { class: "v-note warn", id: "comm-no-trace" },
      "No rank of this run has a trace_view.json: links to the timeline are disabled."));
  }
}

function showMode() {
  $("#comm-duration").hidden = state.mode !== "duration";
  $("#comm-matrix").hidden = state.mode !== "matrix";
  if (state.mode === "matrix") loadMatrix();
  else window.dispatchEvent(new Event("resize"));
}

async function loadGantt() {
  const data = await apiGet(`${apiBase}/communication/gantt`, filt());
  const ops = data.ops;
  $("#comm-gantt-note").textContent = `${num(ops.length, 0)} ops${data.truncated ? " (first ones only)" : ""} · one colour per op`;
  const ranks = [...new Set(ops.map((o) => o.rank))].sort((a, b) => a - b);
  plot($("#comm-gantt"), [{
    type: "bar", orientation: "h", base: ops.map((o) => nsToMs(o.t_ns)), x: ops.map((o) => Math.max(nsToMs(o.elapse_time_ns), 1e-4)),
    y: ops.map((o) => `Rank ${o.rank}`), marker: { color: ops.map((o) => opColor(o.op_name)) },
    customdata: ops.map((o) => [plotText(o.op_name), nsToMs(o.elapse_time_ns)]),
    hovertemplate: "%{customdata[0]}<br>start %{base:,.3f} ms · %{customdata[1]:,.3f} ms<extra>%{y}</extra>",
  }], baseLayout({ margin: { l: 70, r: 20, t: 10, b: 40 }, showlegend: false, bargap: 0.25,
    xaxis: { title: { text: "Time(ms)" } },
    yaxis: { type: "category", categoryorder: "array", categoryarray: ranks.map((r) => `Rank ${r}`).reverse() } }));
}

function renderTotals(t) {
  const rows = t.rows;
  const x = rows.map((r) => `Rank ${r.rank}`);
  const bar = (k, name, color) => ({ type: "bar", name, x, y: rows.map((r) => nsToMs(r[k])), marker: { color },
    hovertemplate: `${name}: %{y:,.3f} ms<extra>%{x}</extra>` });
  plot($("#comm-rank-chart"), [
    bar("elapse_time_ns", "Elapse Time", "#3f7fd8"), bar("transit_time_ns", "Transit Time", "#2f9e6e"),
    bar("synchronization_time_ns", "Synchronization Time", "#35b0b5"), bar("wait_time_ns", "Wait Time", "#7a52d6"),
    { type: "scatter", mode: "lines+markers", name: "Synchronization Time Ratio", x, y: rows.map((r) => r.synchronization_time_ratio), yaxis: "y2",
      line: { color: "#e0643a" }, hovertemplate: "Synchronization Ratio: %{y:.4f}<extra>%{x}</extra>" },
    { type: "scatter", mode: "lines+markers", name: "Wait Time Ratio", x, y: rows.map((r) => r.wait_time_ratio), yaxis: "y2",
      line: { color: "#5aa0ff" }, hovertemplate: "Wait Ratio: %{y:.4f}<extra>%{x}</extra>" },
  ], baseLayout({ barmode: "group", margin: { l: 70, r: 60, t: 50, b: 40 }, xaxis: { type: "category" },
    yaxis: { title: { text: "Time(ms)" }, rangemode: "tozero" },
    yaxis2: { title: { text: "Ratio" }, overlaying: "y", side: "right", range: [0, 1.05], dtick: 0.2, showgrid: false } }));

  const slow = clear($("#comm-slow"));
  if (t.slow_ranks.length) {
    slow.append(el("h3", { class: "v-subtitle" }, "Possible slow ranks"), el("div", { class: "v-table-wrap" }, el("table", { class: "grid v-table", id: "comm-slow-table" },
      el("thead", {}, el("tr", {}, ["Rank", "Time gap(ms)", "Elapse Time(ms)", "Longest Rank Elapse(ms)"].map((h, i) => el("th", { class: i ? "num" : null }, h)))),
      el("tbody", {}, t.slow_ranks.map((s) => el("tr", {}, el("td", {}, String(s.rank)), el("td", { class: "num" }, ms(s.gap_ns)),
        el("td", { class: "num" }, ms(s.elapse_time_ns)), el("td", { class: "num" }, `${ms(s.longest_elapse_time_ns)} (rank ${s.longest_rank})`)))))));
  }
  const used = TRANSPORTS.filter((tr) => rows.some((r) => (r.bandwidth[tr]?.transit_size_mb || 0) > 0));
  const head = ["Rank", "Elapse Time(ms)", "Transit Time(ms)", "Synchronization Time(ms)", "Wait Time(ms)",
    "Synchronization Time Ratio", "Wait Time Ratio", "Idle Time(ms)", ...used.map((u) => `${u} BW(GB/s)`)];
  clear($("#comm-rank-table")).append(el("h3", { class: "v-subtitle" }, "Data Analysis of Communication Time"),
    el("div", { class: "v-table-wrap" }, el("table", { class: "grid v-table", id: "comm-rank-table-grid" },
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { class: i ? "num" : null }, h)))),
      el("tbody", {}, rows.map((r) => el("tr", {}, el("td", {}, String(r.rank)),
        ...[r.elapse_time_ns, r.transit_time_ns, r.synchronization_time_ns, r.wait_time_ns].map((v) => el("td", { class: "num" }, ms(v, 4))),
        el("td", { class: "num" }, fixed(r.synchronization_time_ratio)), el("td", { class: "num" }, fixed(r.wait_time_ratio)),
        el("td", { class: "num" }, ms(r.idle_time_ns, 4)),
        ...used.map((u) => el("td", { class: "num" }, num(r.bandwidth[u]?.bandwidth_gbps, 4)))))))));
  const adv = clear($("#comm-advice"));
  adv.append(el("div", { class: "v-advice-head" }, "Advice"));
  const items = [...t.advice];
  for (const l of ov.slow_links || []) {
    items.push(`Slowest ${l.transport_type} link: ${l.src_rank} → ${l.dst_rank} at ${num(l.bandwidth_gbps, 3)} GB/s ` +
      `(median of ${l.links} links: ${num(l.median_gbps, 3)} GB/s).`);
  }
  adv.append(items.length ? el("ul", { id: "comm-advice-list" }, items.map((a) => el("li", {}, a)))
    : el("div", { class: "v-note" }, "Nothing stands out for this selection."));
}

async function reloadTotals() {
  const t = await apiGet(`${apiBase}/communication/ranks`, { ...filt(), op: state.op || undefined });
  renderTotals(t);
}

async function loadBandwidth() {
  const data = await apiGet(`${apiBase}/communication/bandwidth`, { ...filt(), op: state.op || undefined, rank: state.rank ?? undefined });
  $("#comm-bw-note").textContent = `${state.rank === null ? "all ranks summed" : `rank ${state.rank}`}${state.op ? ` · ${state.op}` : ""}`;
  const rows = data.transports;
  clear($("#comm-bw-table")).append(el("div", { class: "v-table-wrap" }, el("table", { class: "grid v-table", id: "comm-bw-grid" },
    el("thead", {}, el("tr", {}, ["Transport", "Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)", "Large Packet Ratio"].map((h, i) => el("th", { class: i ? "num" : null }, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, el("td", {}, r.transport), el("td", { class: "num" }, num(r.transit_size_mb, 4)),
      el("td", { class: "num" }, ms(r.transit_time_ns, 4)), el("td", { class: "num" }, num(r.bandwidth_gbps, 4)),
      el("td", { class: "num" }, fixed(r.large_packet_ratio))))))));
  const withBw = rows.filter((r) => r.bandwidth_gbps);
  plot($("#comm-bw-chart"), [{ type: "bar", x: withBw.map((r) => plotText(r.transport)), y: withBw.map((r) => r.bandwidth_gbps),
    marker: { color: "#3f7fd8" }, hovertemplate: "%{x}: %{y:,.3f} GB/s<extra></extra>" }],
  baseLayout({ margin: { l: 60, r: 10, t: 10, b: 30 }, showlegend: false, yaxis: { title: { text: "GB/s" } } }));
  const dist = data.size_distribution;
  const transports = [...new Set(dist.map((d) => d.transport))];
  plot($("#comm-size-chart"), transports.map((tr, i) => {
    const ds = dist.filter((d) => d.transport === tr);
    return { type: "bar", name: plotText(tr), x: ds.map((d) => `${num(d.package_size_mb, 4)} MB`), y: ds.map((d) => d.count),
      customdata: ds.map((d) => nsToMs(d.total_duration_ns)), marker: { color: ["#3f7fd8", "#2f9e6e", "#7a52d6", "#e0643a", "#35b0b5"][i % 5] },
      hovertemplate: "%{fullData.name} %{x}: %{y} packets, %{customdata:,.3f} ms<extra></extra>" };
  }), baseLayout({ barmode: "group", margin: { l: 60, r: 10, t: 40, b: 70 }, xaxis: { title: { text: "Packet size" }, type: "category" },
    yaxis: { title: { text: "Count" } } }));
  const links = clear($("#comm-links"));
  if (ov.slow_links?.length) {
    links.append(el("h3", { class: "v-subtitle" }, "Slowest link per transport (from the communication matrix)"),
      el("div", { class: "v-table-wrap" }, el("table", { class: "grid v-table", id: "comm-links-table" },
        el("thead", {}, el("tr", {}, ["Transport", "Link (src → dst)", "Bandwidth(GB/s)", "Median(GB/s)", "Transit Size(MB)", "Links"].map((h, i) => el("th", { class: i > 1 ? "num" : null }, h)))),
        el("tbody", {}, ov.slow_links.map((l) => el("tr", {}, el("td", {}, l.transport_type), el("td", {}, `${l.src_rank} → ${l.dst_rank}`),
          el("td", { class: "num" }, num(l.bandwidth_gbps, 4)), el("td", { class: "num" }, num(l.median_gbps, 4)),
          el("td", { class: "num" }, num(l.transit_size_mb, 3)), el("td", { class: "num" }, String(l.links))))))));
  }
}

const OP_COLUMNS = [
  { key: "rank", label: "Rank", sort: "rank", num: true },
  { key: "op_name", label: "Operator", sort: "name", cellTitle: (r) => `${r.op_name} @ ${r.group_id}` },
  { key: "comm_type", label: "Type" },
  { key: "step", label: "Step" },
  { key: "elapse_time_ns", label: "Elapse Time(ms)", sort: "elapse", num: true, render: (r) => ms(r.elapse_time_ns, 4) },
  { key: "transit_time_ns", label: "Transit Time(ms)", sort: "transit", num: true, render: (r) => ms(r.transit_time_ns, 4) },
  { key: "synchronization_time_ns", label: "Synchronization Time(ms)", sort: "synchronization", num: true, render: (r) => ms(r.synchronization_time_ns, 4) },
  { key: "wait_time_ns", label: "Wait Time(ms)", sort: "wait", num: true, render: (r) => ms(r.wait_time_ns, 4) },
  { key: "idle_time_ns", label: "Idle Time(ms)", sort: "idle", num: true, render: (r) => ms(r.idle_time_ns, 4) },
  { key: "synchronization_time_ratio", label: "Synchronization Ratio", sort: "synchronization_ratio", num: true, render: (r) => fixed(r.synchronization_time_ratio) },
  { key: "wait_time_ratio", label: "Wait Ratio", sort: "wait_ratio", num: true, render: (r) => fixed(r.wait_time_ratio) },
  { key: "timeline_url", label: "Timeline", render: (r) => timelineLink(r.timeline_url, "Find in Timeline") },
];

function buildOps() {
  const host = clear($("#comm-ops"));
  const params = () => ({ ...filt(), rank: state.rank ?? undefined });
  opsTable = new DataTable(host, {
    columns: OP_COLUMNS, pageSize: 20, sort: "start", order: "asc", id: "comm-ops-table", filter: "Filter by operator name…",
    empty: () => {
      const why = ov?.empty_sources?.ops;
      const r = why?.ranks.find((x) => state.rank === null || x.rank === state.rank);
      return r ? `No ${why.label}: ${r.message}` : "No ops for this filter";
    },
    load: (p) => apiGet(`${apiBase}/communication/ops`, { ...params(), ...p }),
    csv: (p) => withQuery(`${apiBase}/communication/ops.csv`, { ...params(), ...p }),
    parquet: (p) => withQuery(`${apiBase}/export/communication_ops.parquet`, { ...params(), ...p }),
    onRows: (d) => { $("#comm-ops-note").textContent = `${state.rank === null ? "all ranks" : `rank ${state.rank}`} · sorted by start time by default`; },
  });
  opsTable.reload();
}

function matrixOptions() {
  return ov.matrix_options.filter((m) => (!state.step || m.step === state.step) && (!state.group || m.group_id === state.group));
}

function keyOf(m) {
  return JSON.stringify([m.comm_type, m.op_type, m.slot, m.group_id]);
}

function buildMatrixFilters() {
  const opts = matrixOptions();
  const uniq = new Map();
  for (const m of opts) uniq.set(keyOf(m), m);
  const list = [...uniq.values()];
  if (!state.matrixKey || !uniq.has(state.matrixKey)) {
    const most = (ms) => ms.reduce((a, b) => (b.links > (a?.links ?? -1) ? b : a), null);
    const pref = list.find((m) => m.op_type === "Total Op Info" && m.comm_type === "collective")
      || most(list.filter((m) => m.slot === "total")) || list[0];
    state.matrixKey = pref ? keyOf(pref) : null;
  }
  const label = (m) => (m.slot ? `${m.op_type}-${m.slot}` : m.op_type) + ` (${m.comm_type})` + (m.group_id && !state.group ? ` @${m.group_id}` : "");
  const inner = el("input", { type: "checkbox", id: "comm-inner", checked: state.inner });
  inner.addEventListener("change", () => { state.inner = inner.checked; loadMatrix(); });
  clear($("#comm-matrix-filters")).append(
    field("Operator", select(list.map((m) => ({ value: keyOf(m), label: label(m) })), state.matrixKey,
      (v) => { state.matrixKey = v; loadMatrix(); }, { id: "comm-matrix-key" })),
    field("Communication Matrix Type", select(METRICS, state.metric, (v) => { state.metric = v; loadMatrix(); }, { id: "comm-metric" })),
    field("Show Inner Communication", inner),
  );
}

async function loadMatrix() {
  buildMatrixFilters();
  const node = $("#comm-heatmap");
  if (!state.matrixKey) {
    $("#comm-matrix-note").textContent = sourceLine(ov.empty_sources?.matrix, "no matrix data for this filter");
    return;
  }
  const [commType, opType, slot, group] = JSON.parse(state.matrixKey);
  const data = await apiGet(`${apiBase}/communication/matrix`, { step: state.step || undefined, group: group ?? undefined,
    op_type: opType, slot: slot ?? undefined, comm_type: commType });
  const cells = data.cells.filter((c) => state.inner || !c.inner);
  const ranks = data.ranks;
  const idx = new Map(ranks.map((r, i) => [r, i]));
  const z = ranks.map(() => ranks.map(() => null));
  const text = ranks.map(() => ranks.map(() => ""));
  const hover = ranks.map(() => ranks.map(() => ""));
  const transportCodes = [...new Set(data.cells.map((c) => c.transport_type))];
  for (const c of cells) {
    const [x, y] = [idx.get(c.src_rank), idx.get(c.dst_rank)];
    let v = c[state.metric];
    if (state.metric === "transit_time_ns") v = nsToMs(v);
    if (state.metric === "transport_type") { text[y][x] = plotText(v); v = transportCodes.indexOf(v); }
    else text[y][x] = num(v, 4);
    z[y][x] = v;
    hover[y][x] = `${c.src_rank} → ${c.dst_rank}<br>${plotText(c.transport_type)}<br>${num(c.bandwidth_gbps, 4)} GB/s<br>` +
      `${num(c.transit_size_mb, 4)} MB in ${num(nsToMs(c.transit_time_ns), 4)} ms` + (c.op_name ? `<br>${plotText(c.op_name)}` : "");
  }
  const categorical = state.metric === "transport_type";
  const metricLabel = METRICS.find((m) => m.value === state.metric).label;
  await plot(node, [{
    type: "heatmap", x: ranks.map(String), y: ranks.map(String), z, text, texttemplate: ranks.length <= 24 ? "%{text}" : "",
    customdata: hover, hovertemplate: "%{customdata}<extra></extra>", xgap: 1, ygap: 1, hoverongaps: false,
    colorscale: categorical ? "Viridis" : [[0, "#e8533a"], [0.5, "#e9dcc0"], [1, "#3f7fd8"]],
    reversescale: state.metric === "transit_time_ns",
    showscale: !categorical, colorbar: { title: { text: metricLabel }, thickness: 12 },
  }], baseLayout({ margin: { l: 70, r: 30, t: 20, b: 50 }, xaxis: { title: { text: "Src Rank Id" }, type: "category", showgrid: false },
    yaxis: { title: { text: "Dst Rank Id" }, type: "category", showgrid: false } }));
  $("#comm-matrix-note").textContent = `${cells.length} links · ${metricLabel}` + (categorical ? ` · ${transportCodes.join(", ")}` : "");
}

async function reload() {
  ov = await apiGet(`${apiBase}/communication`, { ...filt(), op: state.op || undefined });
  buildFilters();
  // ranks without communication data (all of them, or some), and the file or table each lacks
  const why = sourceNote(ov.empty_sources?.ops, { id: "comm-empty" });
  if (why) $("#comm-trace-note").append(why);
  const traced = ov.from_trace_ranks || [];
  if (traced.length) {
    $("#comm-trace-note").append(el("div", { class: "v-note warn", id: "comm-from-trace" },
      `Rank${traced.length > 1 ? "s" : ""} ${traced.join(", ")}: no `
      + `${(ov.from_trace_lacks || ["communication.json"]).join(" or ")} (a Level0 export writes none); `
      + "each operator's elapse comes from the trace's communication lane; transit, wait, synchronization, "
      + "bandwidth and the link matrix are missing (they need a Level1 or Level2 export)."));
  }
  renderTotals(ov.totals);
  await Promise.all([loadGantt(), loadBandwidth()]);
  if (opsTable) opsTable.reset(); else buildOps();
  if (state.mode === "matrix") loadMatrix();
}

onRankChange((rank) => { state.rank = rank; loadBandwidth(); opsTable?.reset(); });
reload();
