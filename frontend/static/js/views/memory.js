// Memory view: allocated / reserved / active per component over time (down-sampled on the server; a zoom asks
// the server for the window at full detail), reserved memory per CANN module, and the allocation table.
// Clicking the chart picks an instant: the table then lists the allocations live at that time.

import {
  $, absNs, apiBase, apiGet, baseLayout, CHART_COLORS, clear, csvUrl, currentRank, DataTable, dataRange, el, field,
  markRanks, ms, num, plot, plotText, relMs, relNs, runId, showRank, timelineLink,
} from "./common.js";
import { onRankChange } from "/static/js/common/nav.js";

const MEASURE_LABEL = { allocated: "Allocated", reserved: "Reserved", active: "Active" };
const MEASURE_DASH = { allocated: "solid", reserved: "dash", active: "dot" };
const COMPONENT_COLOR = { "PTA+GE": "#3f7fd8", PTA: "#2f9e8f", GE: "#e07b39", APP: "#8a5cd0", WORKSPACE: "#c2507a" };

const state = { rank: currentRank(), origin: "0", window: null, at: null, onlyWindow: false, hasTrace: false };
let table = null;
let overview = null;

function mb(v) {
  return v === null || v === undefined ? "–" : `${num(v, 2)} MB`;
}

function peakLine(ov) {
  const host = clear($("#mem-peak"));
  if (!ov.components.length) {
    const withData = ov.ranks.filter((r) => r.records).map((r) => r.rank);
    host.append(el("span", { class: "v-note warn" }, `No memory_record.csv for rank ${state.rank}.` +
      (withData.length ? ` Ranks with memory data: ${withData.join(", ")}.` : "")));
    return;
  }
  const by = Object.fromEntries(ov.components.map((c) => [c.component, c]));
  const op = by["PTA+GE"] || by.PTA || by.GE;
  const parts = [];
  if (op) {
    parts.push(["Operators Allocated", op.peak_allocated_mb], ["Operators Reserved", op.peak_reserved_mb]);
    if (op.peak_active_mb !== null) parts.push(["Operators Active", op.peak_active_mb]);
  }
  if (by.APP) parts.push(["APP Reserved", by.APP.peak_reserved_mb]);
  host.append("Peak Memory Usage: ");
  parts.forEach(([k, v], i) => host.append(i ? " | " : "", `${k}: `, el("b", {}, mb(v))));
  if (ov.peak_allocation) {
    host.append(el("span", { class: "v-badge peak", title: "the allocation at which the total allocated memory peaked" },
      `peak at ${relMs(ov.peak_allocation.allocation_time_ns, state.origin)} ms: ${ov.peak_allocation.name}`));
  }
  if (!ov.has_trace) host.append(el("span", { class: "v-badge warn" }, "no trace: timeline links disabled"));
}

function warnings(ov) {
  const host = clear($("#mem-warnings"));
  for (const w of ov.warnings || []) host.append(el("div", { class: "v-note warn" }, `${w.file}: ${w.message}`));
}

// Buckets of about one pixel: the server keeps first, last, min and max per bucket (M4), so the SVG lines look the
// same as the full data while staying small enough to draw as SVG (WebGL traces need eval, which the CSP forbids).
function pointBudget(node, series = 1) {
  const width = Math.max(200, Math.round(node.clientWidth || 1200));
  return Math.min(50_000, Math.max(16, 4 * width * Math.max(1, series)));
}

async function loadCurves() {
  const node = $("#mem-chart");
  const params = { rank: state.rank ?? undefined, max_points: pointBudget(node, overview?.components?.length) };
  if (state.window) { params.start_ns = state.window[0]; params.end_ns = state.window[1]; }
  const data = await apiGet(`${apiBase}/memory/curves`, params);
  const hasPTAGE = data.series.some((s) => s.component === "PTA+GE");
  const traces = data.series.map((s) => {
    const main = s.component === "PTA+GE" || s.component === "APP" || (!hasPTAGE && s.component === "PTA");
    return {
      // few points (tiny or edited files) get markers too, or a lone point would not show
      type: "scatter", mode: s.t_ns.length < 50 ? "lines+markers" : "lines",
      name: plotText(`${s.component} ${MEASURE_LABEL[s.measure]}`),
      x: s.t_ns.map((t) => t / 1e6), y: s.mb, line: { shape: "hv", width: 1.6, color: COMPONENT_COLOR[s.component] || CHART_COLORS[0],
        dash: MEASURE_DASH[s.measure] },
      visible: main ? true : "legendonly",
      hovertemplate: "%{fullData.name}: %{y:,.2f} MB<br>%{x:,.3f} ms<extra></extra>",
    };
  });
  const shapes = [];
  const atX = state.at === null ? null : relNs(state.at, state.origin) / 1e6;
  if (Number.isFinite(atX)) {
    shapes.push({ type: "line", x0: atX, x1: atX, yref: "paper", y0: 0, y1: 1, line: { color: "#f2b84b", width: 1, dash: "dot" } });
  }
  const peak = overview?.peak_allocation;
  const annotations = [];
  const range = state.window ? state.window.map((a) => relNs(a, state.origin) / 1e6) : dataRange(traces.map((t) => t.x));
  const peakX = peak && peak.allocation_time_ns ? relNs(peak.allocation_time_ns, state.origin) / 1e6 : null;
  const peakY = peak ? peak.allocation_total_allocated_mb : null;
  // the peak of operator_memory is marked only where the curves are (clock mismatches happen in edited files); a
  // shape or arrow at a non-finite position makes plotly draw "MNaN" paths
  if (Number.isFinite(peakX) && Number.isFinite(peakY) && range && peakX >= range[0] && peakX <= range[1]) {
    annotations.push({ x: peakX, y: peakY,
      text: "peak", showarrow: true, arrowhead: 2, arrowcolor: "#f06a6a", font: { color: "#f06a6a", size: 11 }, ax: 0, ay: -28 });
  }
  await plot(node, traces, baseLayout({
    margin: { l: 70, r: 20, t: 40, b: 45 }, shapes, annotations, hovermode: "x unified", dragmode: "zoom",
    xaxis: { title: { text: "Time (ms)" }, ...(range ? { range, autorange: false } : {}) },
    yaxis: { title: { text: "Memory Usage (MB)" }, rangemode: "tozero" },
  }), { doubleClick: "autosize" }); // the layout range is the zoomed window: a double click must leave it
  node.dataset.downsampled = String(data.downsampled);
  const noteText = data.downsampled
    ? `down-sampled on the server: ${num(data.points, 0)} of ${num(data.source_points, 0)} points (first, last, min and max per bucket)`
    : `${num(data.points, 0)} points, not down-sampled`;
  $("#mem-sample-note").textContent = noteText;
  if (!node.dataset.bound) {
    node.dataset.bound = "1";
    node.on("plotly_click", (ev) => {
      const p = ev.points?.[0];
      if (p) pick(absNs(p.x * 1e6, state.origin));
    });
    node.on("plotly_relayout", (ev) => {
      if (ev["xaxis.autorange"]) { if (state.window) { state.window = null; loadCurves(); refreshTable(); } return; }
      const [a, b] = ev["xaxis.range"] || [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
      if (!Number.isFinite(a) || !Number.isFinite(b)) return;
      // records before the run's time zero (APP samples often are) are data too: the window may start below 0
      state.window = [absNs(a * 1e6, state.origin), absNs(b * 1e6, state.origin)];
      loadCurves();
      if (state.onlyWindow) refreshTable();
    });
  }
}

async function loadModules() {
  const node = $("#mem-modules");
  const data = await apiGet(`${apiBase}/memory/modules`, { rank: state.rank ?? undefined, max_points: pointBudget(node, 4) });
  $("#mem-modules-note").textContent = data.series.length
    ? `npu_module_mem.csv · ${data.series.length} of ${data.modules} modules that reserve memory` +
      (data.downsampled ? ` · down-sampled: ${num(data.points, 0)} of ${num(data.source_points, 0)} points` : "")
    : "npu_module_mem.csv · no data for this rank";
  const traces = data.series.map((s, i) => ({
    type: "scatter", mode: s.t_ns.length < 50 ? "lines+markers" : "lines", name: plotText(s.component),
    x: s.t_ns.map((t) => t / 1e6), y: s.mb,
    line: { shape: "hv", width: 1.4, color: CHART_COLORS[i % CHART_COLORS.length] },
    hovertemplate: "%{fullData.name}: %{y:,.2f} MB<br>%{x:,.3f} ms<extra></extra>",
  }));
  const range = dataRange(traces.map((t) => t.x));
  await plot(node, traces, baseLayout({ margin: { l: 70, r: 20, t: 30, b: 40 },
    xaxis: { title: { text: "Time (ms)" }, ...(range ? { range, autorange: false } : {}) },
    yaxis: { title: { text: "Reserved (MB)" }, rangemode: "tozero" } }));
}

function pick(atNs) {
  state.at = atNs;
  const host = clear($("#mem-pick"));
  host.append("Picked ", el("b", {}, `${relMs(atNs, state.origin)} ms`), ": the table lists the allocations live then. ");
  if (state.hasTrace) {
    host.append(el("a", { href: `/runs/${encodeURIComponent(runId)}/timeline?start_ns=${BigInt(atNs) - 500000n}&end_ns=${BigInt(atNs) + 500000n}`,
      id: "mem-pick-timeline" }, "Open the timeline at this time"), " · ");
  }
  host.append(el("a", { href: "#", onclick: (e) => { e.preventDefault(); unpick(); } }, "clear"));
  loadCurves();
  refreshTable();
}

function unpick() {
  state.at = null;
  clear($("#mem-pick")).append("Click the chart to list the allocations live at that time; drag to zoom (the server re-samples the window).");
  loadCurves();
  refreshTable();
}

function tableParams() {
  const p = { rank: state.rank ?? undefined };
  if (state.at !== null) p.at_ns = state.at;
  if (state.onlyWindow && state.window) { p.start_ns = state.window[0]; p.end_ns = state.window[1]; }
  return p;
}

function t(absolute) {
  return absolute === null || absolute === undefined ? "–" : relMs(absolute, state.origin);
}

const COLUMNS = [
  { key: "name", label: "Name", sort: "name", cellTitle: (r) => r.name,
    render: (r) => (r.is_peak ? el("span", {}, r.name, el("span", { class: "v-badge peak" }, "peak")) : r.name) },
  { key: "size_kb", label: "Size(KB)", sort: "size", num: true, render: (r) => num(r.size_kb, 3) },
  { key: "allocation_time_ns", label: "Allocation Time(ms)", sort: "allocation_time", num: true, render: (r) => t(r.allocation_time_ns) },
  { key: "release_time_ns", label: "Release Time(ms)", sort: "release_time", num: true, render: (r) => t(r.release_time_ns) },
  { key: "active_release_time_ns", label: "Active Release Time(ms)", sort: "active_release_time", num: true, render: (r) => t(r.active_release_time_ns) },
  { key: "duration_ns", label: "Duration(ms)", sort: "duration", num: true, render: (r) => ms(r.duration_ns) },
  { key: "active_duration_ns", label: "Active Duration(ms)", sort: "active_duration", num: true, render: (r) => ms(r.active_duration_ns) },
  { key: "allocation_total_allocated_mb", label: "Allocation Total Allocated(MB)", sort: "allocation_total_allocated", num: true, render: (r) => num(r.allocation_total_allocated_mb, 3) },
  { key: "allocation_total_reserved_mb", label: "Allocation Total Reserved(MB)", sort: "allocation_total_reserved", num: true, render: (r) => num(r.allocation_total_reserved_mb, 3) },
  { key: "allocation_total_active_mb", label: "Allocation Total Active(MB)", num: true, render: (r) => num(r.allocation_total_active_mb, 3) },
  { key: "release_total_allocated_mb", label: "Release Total Allocated(MB)", sort: "release_total_allocated", num: true, render: (r) => num(r.release_total_allocated_mb, 3) },
  { key: "release_total_reserved_mb", label: "Release Total Reserved(MB)", num: true, render: (r) => num(r.release_total_reserved_mb, 3) },
  { key: "stream_ptr", label: "Stream Ptr" },
  { key: "timeline_url", label: "Operation", render: (r) => timelineLink(r.timeline_url) },
];

function buildTable() {
  const opts = clear($("#mem-table-opts"));
  const only = el("input", { type: "checkbox", id: "mem-only-window", checked: state.onlyWindow });
  only.addEventListener("change", () => { state.onlyWindow = only.checked; refreshTable(); });
  opts.append(field("Only show allocated or released within the zoomed interval", only));
  const host = clear($("#mem-allocations"));
  table = new DataTable(host, {
    columns: COLUMNS, pageSize: 20, sort: "allocation_time", order: "asc", id: "mem-table",
    filter: "Filter by name…", empty: "No allocations (operator_memory.csv) for this rank and filter",
    rowClass: (r) => (r.is_peak ? "peak" : null),
    load: (p) => apiGet(`${apiBase}/memory/allocations`, { ...tableParams(), ...p }),
    csv: (p) => csvUrl(`${apiBase}/memory/allocations.csv`, { ...tableParams(), ...p }),
    onRows: (data) => {
      if (state.at !== null && data.live_kb !== undefined && data.live_kb !== null) {
        const pickNode = $("#mem-pick");
        pickNode.querySelector(".v-live")?.remove();
        pickNode.append(el("span", { class: "v-live" }, ` · ${num(data.total, 0)} live allocations, ${num(data.live_kb / 1024, 2)} MB`));
      }
    },
  });
  table.reload();
}

function refreshTable() {
  table?.reset();
}

async function refresh() {
  try {
    overview = await apiGet(`${apiBase}/memory`, { rank: state.rank ?? undefined });
  } catch (err) {
    $("#mem-peak").textContent = `Could not load: ${err.message}`;
    return;
  }
  state.origin = overview.origin_ns;
  state.hasTrace = overview.has_trace;
  markRanks(overview.ranks.filter((r) => r.records || r.allocations).map((r) => r.rank));
  if (state.rank === null) { state.rank = overview.rank; showRank(overview.rank); }
  clear($("#mem-filters")).append(
    el("span", { class: "v-field-label" }, "Rank ", el("b", {}, String(overview.rank ?? "–"))),
    el("span", { class: "v-field-label" }, "Components: ",
      overview.components.map((c) => c.component).join(", ") || "none"),
    el("button", { class: "btn", id: "mem-reset", onclick: () => { state.window = null; unpick(); } }, "Reset zoom and pick"),
  );
  peakLine(overview);
  warnings(overview);
  await Promise.all([loadCurves(), loadModules()]);
  if (!table) buildTable(); else refreshTable();
}

onRankChange((rank) => { state.rank = rank; state.window = null; state.at = null; refresh(); });
refresh();
