// Memory view: memory over time grouped like MindStudio Insight's (Overall: allocator totals per component;
// Stream: operator allocations per stream; Component: reserved per component and CANN module), down-sampled on the
// server (a zoom asks the server for the window at full detail); the timeline's region markers shaded as bands
// (Area Mark); reserved memory per CANN module; and the allocation table. Clicking the chart picks an instant (the
// table lists the allocations live then); zooming limits the table to the allocations made or released in the
// zoomed range (a checkbox, on once zoomed); a double click or Reset clears both. A section without data says
// which file or table would have fed it.

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { num } from "../common/format.js";
import { loadMarkers, onMarkersChange, regions } from "../common/markers.js";
import { currentRank, onRankChange } from "../common/nav.js";
import { sourceLine, sourceNote } from "../common/sources.js";
import { absNs, addNs, ms, msToNs, nsToMs, relMs, relNs } from "../common/time.js";
import { runPage, withQuery } from "../common/urls.js";
import { timelineLink } from "./blocks.js";
import { baseLayout, CHART_COLORS, dataRange, plot } from "./charts.js";
import { field, select } from "./controls.js";
import { apiBase, markRanks, runId, showRank } from "./run.js";
import { DataTable } from "./table.js";

const MEASURE_DASH = { allocated: "solid", reserved: "dash", active: "dot" };
const COMPONENT_COLOR = { "PTA+GE": "#3f7fd8", PTA: "#2f9e8f", GE: "#e07b39", APP: "#8a5cd0", WORKSPACE: "#c2507a" };
const GROUPS = [
  { value: "overall", label: "Overall",
    note: "allocator totals per component (memory_record): PTA+GE is PTA and GE summed" },
  { value: "stream", label: "Stream",
    note: "per stream, the operator allocations not yet released (operator_memory, from the start of profiling: " +
      "blocks allocated before it are not counted)" },
  { value: "component", label: "Component",
    note: "memory reserved per component (memory_record) and per CANN module (npu_module_mem)" },
];
const PICK_HINT = "Click the chart to list the allocations live at that time; drag to zoom (the server re-samples the window).";

const state = { rank: currentRank(), origin: "0", window: null, at: null, onlyWindow: false, hasTrace: false,
  group: "overall", hiddenMarks: new Set(), fullRange: false };
let table = null;
let overview = null;
let curveSeq = 0;  // the latest curves request: an older answer (another group or window) is dropped

function mb(v) {
  return v === null || v === undefined ? "–" : `${num(v, 2)} MB`;
}

function peakLine(ov) {
  const host = clear($("#mem-peak"));
  if (!ov.components.length) {
    const withData = ov.ranks.filter((r) => r.records).map((r) => r.rank);
    host.append(sourceNote(ov.empty_sources?.records, { id: "mem-records-why" }) ||
      el("span", { class: "v-note warn" }, `No memory records for rank ${state.rank}.`));
    if (withData.length) host.append(el("div", { class: "v-note" }, `Ranks with memory data: ${withData.join(", ")}.`));
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

// ---------------------------------------------------------------- Group By and Area Mark

function buildFilters() {
  const groups = overview.groups || {};
  if (groups[state.group] && !groups[state.group].available) {
    state.group = GROUPS.find((g) => groups[g.value]?.available)?.value || "overall";
  }
  const options = GROUPS.map((g) => ({ value: g.value, label: groups[g.value]?.available ? g.label : `${g.label} (no data)` }));
  const groupSelect = select(options, state.group, (v) => { state.group = v; groupNote(); loadCurves(); }, { id: "mem-group-by" });
  for (const o of groupSelect.options) {
    const g = groups[o.value];
    if (g && !g.available) { o.disabled = true; o.title = g.reason || "no data"; }
  }
  clear($("#mem-filters")).append(
    el("span", { class: "v-field-label" }, "Rank ID ", el("b", {}, String(overview.rank ?? "–"))),
    field("Group By", groupSelect),
    el("span", { class: "v-field-label" }, "Components: ",
      overview.components.map((c) => c.component).join(", ") || "none"),
    el("span", { class: "v-note", id: "mem-group-note" }),
    el("span", { class: "v-spacer" }),
    el("button", { class: "btn", id: "mem-reset", onclick: () => { setWindow(null); unpick(); } }, "Reset zoom and pick"),
  );
  groupNote();
}

function groupNote() {
  const g = GROUPS.find((x) => x.value === state.group);
  const host = clear($("#mem-group-note"));
  host.append(g.note);
  const off = GROUPS.filter((x) => overview.groups?.[x.value] && !overview.groups[x.value].available);
  if (off.length === GROUPS.length) return;  // a rank without memory data: its sections say why
  for (const x of off) {
    host.append(el("span", { class: "v-group-off", dataset: { group: x.value } },
      ` · ${x.label}: ${overview.groups[x.value].reason || "no data"}`));
  }
}

function markerList() {
  return regions(loadMarkers(runId));
}

function buildMarks() {
  const host = clear($("#mem-marks"));
  const list = markerList();
  host.append(el("span", { class: "v-field-label" }, "Area Mark"));
  if (!list.length) {
    host.append(el("span", { class: "v-note", id: "mem-marks-none" },
      "No region markers for this run: select a range on the timeline and save it as a region marker to shade it here."));
    return;
  }
  for (const m of list) {
    const box = el("input", { type: "checkbox", checked: !state.hiddenMarks.has(m.id), dataset: { marker: m.id } });
    box.addEventListener("change", () => {
      if (box.checked) state.hiddenMarks.delete(m.id); else state.hiddenMarks.add(m.id);
      loadCurves();
    });
    const zoom = el("button", { class: "v-mark-zoom", title: "Zoom the chart to this region", dataset: { marker: m.id } }, "⤢");
    zoom.addEventListener("click", (e) => { e.preventDefault(); setWindow([m.start_ns, m.end_ns]); });
    const swatch = el("span", { class: "v-mark-swatch" });
    swatch.style.background = m.color;  // a colour the markers store checked (#rgb…)
    host.append(el("label", { class: "v-mark-chip", title: `${relMs(m.start_ns, state.origin)} – ${relMs(m.end_ns, state.origin)} ms` },
      box, swatch, m.name || "region", zoom));
  }
}

// Region markers as bands under the curves, each named at the top; only finite edges (a shape at a non-finite
// position makes plotly draw "MNaN" paths).
function markShapes() {
  const shapes = [];
  const annotations = [];
  for (const m of markerList()) {
    if (state.hiddenMarks.has(m.id)) continue;
    const x0 = nsToMs(relNs(m.start_ns, state.origin));
    const x1 = nsToMs(relNs(m.end_ns, state.origin));
    if (!Number.isFinite(x0) || !Number.isFinite(x1)) continue;
    shapes.push({ type: "rect", xref: "x", yref: "paper", x0, x1, y0: 0, y1: 1, layer: "below",
      fillcolor: m.color, opacity: 0.18, line: { width: 0 } });
    annotations.push({ x: x0, xref: "x", xanchor: "left", y: 1, yref: "paper", yanchor: "top", showarrow: false,
      text: plotText(m.name || "region"), font: { size: 10, color: m.color } });
  }
  return { shapes, annotations };
}

// ---------------------------------------------------------------- curves

/** The x range the chart opens on: the operators' curves (the allocator's records), not the APP samples of the
 * whole process, which start and end tens of ms away and would squeeze them; a button under the chart switches to
 * the full range and back. */
function openingRange(data, traces) {
  const full = dataRange(traces.map((t) => t.x));
  const ops = dataRange(traces.filter((_, i) => data.series[i].component !== "APP"
    && data.series[i].source !== "npu_module_mem").map((t) => t.x));
  const host = clear($("#mem-range"));
  const narrower = ops && full && (ops[0] > full[0] || ops[1] < full[1]);
  if (!narrower) return full;
  const fmt = (r) => `${num(r[0], 1)} … ${num(r[1], 1)} ms`;
  const flip = () => { state.fullRange = !state.fullRange; loadCurves(); };
  host.append(state.fullRange
    ? `Full range: ${fmt(full)} (the APP samples of the whole process). `
    : `Opened on the operators' records, ${fmt(ops)}; the APP samples span ${fmt(full)}. `,
  el("button", { type: "button", class: "btn small", id: "mem-range-toggle", onclick: flip },
    state.fullRange ? "Operators' range" : "Full range"));
  return state.fullRange ? full : ops;
}

// Buckets of about one pixel: the server keeps first, last, min and max per bucket (M4), so the SVG lines look the
// same as the full data while staying small enough to draw as SVG (WebGL traces need eval, which the CSP forbids).
function pointBudget(node, series = 1) {
  const width = Math.max(200, Math.round(node.clientWidth || 1200));
  return Math.min(50_000, Math.max(16, 4 * width * Math.max(1, series)));
}

function traceStyle(s, i, data) {
  if (state.group === "stream") {
    return { color: CHART_COLORS[i % CHART_COLORS.length], dash: MEASURE_DASH[s.measure], visible: s.measure === "allocated" ? true : "legendonly" };
  }
  if (state.group === "component") {
    const module = s.source === "npu_module_mem";
    return { color: (!module && COMPONENT_COLOR[s.component]) || CHART_COLORS[(i + 3) % CHART_COLORS.length],
      dash: module ? "dot" : "solid", visible: true };
  }
  const hasPTAGE = data.series.some((x) => x.component === "PTA+GE");
  const main = s.component === "PTA+GE" || s.component === "APP" || (!hasPTAGE && s.component === "PTA");
  return { color: COMPONENT_COLOR[s.component] || CHART_COLORS[0], dash: MEASURE_DASH[s.measure], visible: main ? true : "legendonly" };
}

async function loadCurves() {
  const node = $("#mem-chart");
  const group = state.group;
  const nSeries = group === "overall" ? overview?.components?.length : (overview?.groups?.stream?.streams?.length || 4);
  const params = { rank: state.rank ?? undefined, group, max_points: pointBudget(node, nSeries) };
  if (state.window) { params.start_ns = state.window[0]; params.end_ns = state.window[1]; }
  const seq = ++curveSeq;
  const data = await apiGet(`${apiBase}/memory/curves`, params);
  if (seq !== curveSeq) return;
  const streamIndex = new Map();
  const traces = data.series.map((s, i) => {
    const key = s.component ?? "";
    if (!streamIndex.has(key)) streamIndex.set(key, streamIndex.size);
    const style = traceStyle(s, group === "stream" ? streamIndex.get(key) : i, data);
    return {
      // few points (tiny or edited files) get markers too, or a lone point would not show
      type: "scatter", mode: s.t_ns.length < 50 ? "lines+markers" : "lines", name: plotText(s.name),
      x: s.t_ns.map(nsToMs), y: s.mb, line: { shape: "hv", width: 1.6, color: style.color, dash: style.dash },
      visible: style.visible,
      hovertemplate: "%{fullData.name}: %{y:,.2f} MB<br>%{x:,.3f} ms<extra></extra>",
    };
  });
  const { shapes, annotations } = markShapes();
  const atX = state.at === null ? null : nsToMs(relNs(state.at, state.origin));
  if (Number.isFinite(atX)) {
    shapes.push({ type: "line", x0: atX, x1: atX, yref: "paper", y0: 0, y1: 1, line: { color: "#f2b84b", width: 1, dash: "dot" } });
  }
  const peak = overview?.peak_allocation;
  if (state.window) clear($("#mem-range"));  // zoomed: the window is the range
  const range = state.window ? state.window.map((a) => nsToMs(relNs(a, state.origin))) : openingRange(data, traces);
  const peakX = peak && peak.allocation_time_ns ? nsToMs(relNs(peak.allocation_time_ns, state.origin)) : null;
  const peakY = peak ? peak.allocation_total_allocated_mb : null;
  // the peak of operator_memory is the allocator's total: it belongs to the Overall curves, and is marked only
  // where they are (clock mismatches happen in edited files)
  if (group === "overall" && Number.isFinite(peakX) && Number.isFinite(peakY) && range && peakX >= range[0] && peakX <= range[1]) {
    annotations.push({ x: peakX, y: peakY,
      text: "peak", showarrow: true, arrowhead: 2, arrowcolor: "#f06a6a", font: { color: "#f06a6a", size: 11 }, ax: 0, ay: -28 });
  }
  await plot(node, traces, baseLayout({
    margin: { l: 70, r: 20, t: 40, b: 45 }, shapes, annotations, hovermode: "x unified", dragmode: "zoom",
    xaxis: { title: { text: "Time (ms)" }, ...(range ? { range, autorange: false } : {}) },
    yaxis: { title: { text: "Memory Usage (MB)" }, rangemode: "tozero" },
  }), { doubleClick: "autosize" }); // the layout range is the zoomed window: a double click must leave it
  node.dataset.downsampled = String(data.downsampled);
  node.dataset.group = group;
  node.dataset.windowStartNs = state.window ? state.window[0] : "";
  node.dataset.windowEndNs = state.window ? state.window[1] : "";
  node.dataset.series = String(data.series.length);
  const noteText = !data.series.length ? sourceLine(groupSource(), "no data for this Group By")
    : data.downsampled
      ? `down-sampled on the server: ${num(data.points, 0)} of ${num(data.source_points, 0)} points (first, last, min and max per bucket)`
      : `${num(data.points, 0)} points, not down-sampled`;
  $("#mem-sample-note").textContent = noteText;
  if (!node.dataset.bound) {
    node.dataset.bound = "1";
    // a click picks an instant, but the clicks of a double click (which resets the zoom) must not: the pick waits
    // a moment and a double click cancels it
    let pending = null;
    node.on("plotly_click", (ev) => {
      const p = ev.points?.[0];
      clearTimeout(pending);
      if (p) pending = setTimeout(() => pick(absNs(msToNs(p.x), state.origin)), 350);
    });
    node.on("plotly_doubleclick", () => { clearTimeout(pending); });
    node.on("plotly_relayout", (ev) => {
      if (ev["xaxis.autorange"]) { setWindow(null); return; }
      const [a, b] = ev["xaxis.range"] || [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
      if (!Number.isFinite(a) || !Number.isFinite(b)) return;
      // records before the run's time zero (APP samples often are) are data too: the window may start below 0
      setWindow([absNs(msToNs(a), state.origin), absNs(msToNs(b), state.origin)]);
    });
  }
}

function groupSource() {
  const why = overview?.empty_sources || {};
  return state.group === "stream" ? why.allocations : why.records;
}

/** Zoom to [startNs, endNs] (absolute strings) or back out (null). Zooming in from the whole run turns the table's
 * window filter on; zooming out turns it off (there is no window to limit the table to). */
function setWindow(win) {
  const was = state.window;
  state.window = win;
  if (win && !was) state.onlyWindow = true;
  if (!win) state.onlyWindow = false;
  if (!win && !was) return;
  syncWindowBox();
  loadCurves();
  refreshTable();
}

// ---------------------------------------------------------------- modules

async function loadModules() {
  const node = $("#mem-modules");
  const data = await apiGet(`${apiBase}/memory/modules`, { rank: state.rank ?? undefined, max_points: pointBudget(node, 4) });
  $("#mem-modules-note").textContent = data.series.length
    ? `${data.source || "npu_module_mem.csv"} · ${data.series.length} of ${data.modules} modules that reserve memory` +
      (data.downsampled ? ` · down-sampled: ${num(data.points, 0)} of ${num(data.source_points, 0)} points` : "")
    : sourceLine(overview?.empty_sources?.modules, "npu_module_mem.csv · no module reserves memory on this rank");
  const why = clear($("#mem-modules-why"));
  if (!data.series.length) why.append(sourceNote(overview?.empty_sources?.modules) || "");
  const traces = data.series.map((s, i) => ({
    type: "scatter", mode: s.t_ns.length < 50 ? "lines+markers" : "lines", name: plotText(s.component),
    x: s.t_ns.map(nsToMs), y: s.mb,
    line: { shape: "hv", width: 1.4, color: CHART_COLORS[i % CHART_COLORS.length] },
    hovertemplate: "%{fullData.name}: %{y:,.2f} MB<br>%{x:,.3f} ms<extra></extra>",
  }));
  const range = dataRange(traces.map((t) => t.x));
  await plot(node, traces, baseLayout({ margin: { l: 70, r: 20, t: 30, b: 40 },
    xaxis: { title: { text: "Time (ms)" }, ...(range ? { range, autorange: false } : {}) },
    yaxis: { title: { text: "Reserved (MB)" }, rangemode: "tozero" } }));
}

// ---------------------------------------------------------------- instant pick

function pick(atNs) {
  state.at = atNs;
  const host = clear($("#mem-pick"));
  host.append("Picked ", el("b", {}, `${relMs(atNs, state.origin)} ms`), ": the table lists the allocations live then. ");
  if (state.hasTrace) {
    const around = { start_ns: addNs(atNs, -500_000), end_ns: addNs(atNs, 500_000) };  // ±0.5 ms
    host.append(el("a", { href: runPage(runId, "timeline", around), id: "mem-pick-timeline" },
      "Open the timeline at this time"), " · ");
  }
  host.append(el("a", { href: "#", onclick: (e) => { e.preventDefault(); unpick(); } }, "clear"));
  loadCurves();
  refreshTable();
}

function unpick() {
  state.at = null;
  clear($("#mem-pick")).append(PICK_HINT);
  loadCurves();
  refreshTable();
}

// ---------------------------------------------------------------- allocation table

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

function syncWindowBox() {
  const box = $("#mem-only-window");
  if (!box) return;
  box.checked = state.onlyWindow && !!state.window;
  box.disabled = !state.window;
  $("#mem-window-label").textContent = state.window
    ? `${relMs(state.window[0], state.origin)} – ${relMs(state.window[1], state.origin)} ms`
    : "(zoom the chart first)";
}

function emptyTable(data) {
  const why = overview?.empty_sources?.allocations;
  if (why?.ranks?.length) return sourceLine(why);
  if (state.onlyWindow && state.window) return "No allocation made or released in the zoomed range";
  return data.total === 0 && state.at !== null ? "No allocation live at the picked time" : "No allocations for this filter";
}

function buildTable() {
  const opts = clear($("#mem-table-opts"));
  const only = el("input", { type: "checkbox", id: "mem-only-window" });
  only.addEventListener("change", () => { state.onlyWindow = only.checked; refreshTable(); });
  opts.append(field("Only allocations in the zoomed range", only),
    el("span", { class: "v-note", id: "mem-window-label" }));
  syncWindowBox();
  const host = clear($("#mem-allocations"));
  table = new DataTable(host, {
    columns: COLUMNS, pageSize: 20, sort: "allocation_time", order: "asc", id: "mem-table",
    filter: "Filter by name…", empty: emptyTable,
    rowClass: (r) => (r.is_peak ? "peak" : null),
    load: (p) => apiGet(`${apiBase}/memory/allocations`, { ...tableParams(), ...p }),
    csv: (p) => withQuery(`${apiBase}/memory/allocations.csv`, { ...tableParams(), ...p }),
    parquet: (p) => withQuery(`${apiBase}/export/memory_allocations.parquet`, { ...tableParams(), ...p }),
    onRows: (data) => {
      host.dataset.windowed = String(!!(state.onlyWindow && state.window));
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

// ---------------------------------------------------------------- page

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
  buildFilters();
  buildMarks();
  peakLine(overview);
  warnings(overview);
  await Promise.all([loadCurves(), loadModules()]);
  if (!table) buildTable(); else { syncWindowBox(); refreshTable(); }
}

onRankChange((rank) => { state.rank = rank; state.window = null; state.at = null; state.onlyWindow = false; refresh(); });
onMarkersChange(runId, () => { buildMarks(); loadCurves(); });
refresh();
