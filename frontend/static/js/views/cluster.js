// Cluster view: a ranks × steps heatmap of one metric (step time, computing, exposed communication, free) with the
// slow ranks called out, the per-rank means, the src × dst communication matrix (binned by the server beyond 256
// ranks) with its slowest links, a rank picker that opens one rank's timeline, and the parallel strategy
// (strategy.js: the rank grid, which dimension is slow, communication per group kind, the MoE expert load). Every
// answer comes from the run's cluster tables (/api/runs/{id}/cluster/…, …/strategy/…), so a run of 1,000 ranks paints
// from a few small requests.
// DOM is built with textContent only; data strings handed to plotly go through plotText.

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { num } from "../common/format.js";
import { ms } from "../common/time.js";
import { runPage } from "../common/urls.js";
import { baseLayout, plot } from "./charts.js";
import { initLateArrivals } from "./latearrivals.js";
import { apiBase as runBase, runId } from "./run.js";

const apiBase = `${runBase}/cluster`;
const METRIC_LABELS = { step: "Step time", computing: "Computing", exposed_comm: "Communication(Not Overlapped)",
  free: "Free" };
const MATRIX_LABELS = { bandwidth_gbps: "Bandwidth (GB/s)", min_bandwidth_gbps: "Slowest link (GB/s)",
  transit_time_ns: "Transit Time (ms)", transit_size_mb: "Transit Size (MB)" };
const RED_BLUE = [[0, "#e8533a"], [0.5, "#e9dcc0"], [1, "#3f7fd8"]];
// The heatmap colours a cell by its distance from the median, over at least ± this share of the median: a cluster
// whose ranks stay within it reads as uniform (a 0.05 % spread is not painted deep blue to deep red)
const MIN_SPREAD = 0.02;

/** The heatmap's colour range: the median ± the largest distance from it, and at least ± MIN_SPREAD of it; the
 * share of the median that range spans (for the note). Values in ms. */
function colourRange(z) {
  const vals = z.flat().filter((v) => v !== null && Number.isFinite(v)).sort((a, b) => a - b);
  if (!vals.length) return null;
  const mid = vals.length % 2 ? vals[(vals.length - 1) / 2] : (vals[vals.length / 2 - 1] + vals[vals.length / 2]) / 2;
  const far = Math.max(mid - vals[0], vals[vals.length - 1] - mid);
  if (mid <= 0) return { zmin: mid - (far || 1), zmax: mid + (far || 1), mid, spread: null };
  const half = Math.max(far, Math.abs(mid) * MIN_SPREAD);
  return { zmin: mid - half, zmax: mid + half, mid, spread: far / mid };
}

const state = { source: "ranks", metric: "step", step: "", group: "", op: "", show: "bandwidth_gbps" };
let overview = null;
let matrixData = null;
let knownRanks = new Set();

export function timelineUrl(rank) {
  // `ranks` opens only that rank's data (a sharded run's shard); `rank` selects it in the rank filter
  return runPage(runId, "timeline", { rank, ranks: rank });
}

/** A rank of a link: its timeline when the run has the rank's data; a communication file may name peers whose
 * folders were not part of the input (then plain text saying so, not a timeline of nothing). */
function rankLink(rank) {
  if (knownRanks.has(rank)) return el("a", { href: timelineUrl(rank), class: "cl-rank-link" }, String(rank));
  return el("span", { class: "muted cl-rank-absent", title: "this run has no data of this rank" }, `${rank} (not in the run)`);
}

function openRank(rank) {
  // cluster_analysis_output may name ranks whose folders were not part of the input
  if (!knownRanks.has(rank)) {
    $("#cl-rank-note").textContent = `rank ${rank} is only in cluster_analysis_output: the run has no data of it`;
    return;
  }
  window.location.assign(timelineUrl(rank));
}

// --- rank picker --------------------------------------------------------------------------------------------------

function buildPicker() {
  const ranks = overview.ranks.rank.length ? overview.ranks.rank : overview.per_rank.rank;
  knownRanks = new Set(ranks);
  const list = clear($("#cl-rank-list"));
  list.append(...ranks.map((r) => el("option", { value: r })));
  if (matrixData) renderLinks();  // the matrix may have come first: its rank links wait for the run's ranks
}

function pickFromInput() {
  const text = $("#cl-rank-input").value.trim();
  const rank = Number(text);
  const note = $("#cl-rank-note");
  if (text === "" || !Number.isInteger(rank)) {
    note.textContent = "type a rank number";
    return;
  }
  if (!knownRanks.has(rank)) {
    note.textContent = `no rank ${rank} in this run`;
    return;
  }
  openRank(rank);
}

// --- overview, heatmap and per-rank means --------------------------------------------------------------------------

function renderSummary() {
  const o = overview;
  const ranks = o.rank_count || o.per_rank.rank.length;
  const parts = [`${ranks} rank${ranks === 1 ? "" : "s"}`, `${o.steps.length} step${o.steps.length === 1 ? "" : "s"}`];
  if (o.source === "cluster_analysis") parts.push(`${o.per_rank.rank.length} in cluster_analysis_output`);
  if (o.slow_ranks_total) parts.push(`${o.slow_ranks_total} slow`);
  $("#cl-summary").textContent = parts.join(" · ");
  const opt = $("#cl-source option[value=cluster_analysis]");
  opt.disabled = !o.cluster_analysis.found;
  opt.textContent = o.cluster_analysis.found
    ? `cluster_analysis_output (${o.cluster_analysis.ranks} ranks)` : "cluster_analysis_output (not found)";
}

function renderSlow() {
  const host = clear($("#cl-slow"));
  const o = overview;
  const head = el("div", { class: "v-advice-head" }, "Slow ranks");
  host.append(head);
  if (o.per_rank.rank.length < 3) {
    host.append(el("div", { class: "v-note" }, "Slow ranks are found among three ranks or more."));
    return;
  }
  if (!o.slow_ranks.length) {
    host.append(el("div", { class: "v-note", id: "cl-no-slow" },
      "No rank stands out: every rank's mean step time, computing and free time stay within median + 3 × MAD."));
  } else {
    const table = el("table", { class: "grid v-table", id: "cl-slow-table" });
    table.append(el("thead", {}, el("tr", {}, ...["Rank", "Slow in", "Mean per step (ms)", "Median (ms)",
      "Excess (ms)", "Timeline"].map((h) => el("th", {}, h)))));
    const body = el("tbody");
    for (const s of o.slow_ranks) {
      const worst = s.metrics.find((m) => m.metric === s.reason) || s.metrics[0];
      const link = el("a", { href: timelineUrl(s.rank), class: "cl-open" }, `Open rank ${s.rank}`);
      body.append(el("tr", { "data-rank": s.rank }, el("td", {}, s.rank),
        el("td", {}, s.metrics.map((m) => METRIC_LABELS[m.metric]).join(", ")),
        el("td", {}, ms(worst.value_ns)), el("td", {}, ms(worst.median_ns)), el("td", {}, ms(worst.excess_ns)),
        el("td", {}, link)));
    }
    table.append(body);
    host.append(el("div", { class: "v-table-wrap" }, table));
    if (o.slow_ranks_total > o.slow_ranks.length) {
      host.append(el("div", { class: "v-note" }, `${o.slow_ranks_total - o.slow_ranks.length} more not listed`));
    }
  }
  if (o.waiting_ranks.length) {
    const ranks = o.waiting_ranks.slice(0, 20).map((w) => w.rank).join(", ");
    host.append(el("div", { class: "v-note", id: "cl-waiting" },
      `Waiting in communication (exposed communication above median + 3 × MAD): ranks ${ranks}` +
      (o.waiting_ranks_total > 20 ? ` and ${o.waiting_ranks_total - 20} more` : "") +
      ". They wait for slower ranks; the cause is usually on the slow ranks above."));
  }
}

function fetchHeatmap() {
  return apiGet(`${apiBase}/heatmap`, { metric: state.metric, source: state.source });
}

async function loadHeatmap(answer = null) {
  const node = $("#cl-heatmap");
  const h = await (answer || fetchHeatmap());
  // a row per rank stays visible up to a few hundred ranks; beyond, plotly's zoom shows them
  node.style.height = `${Math.min(900, Math.max(320, 60 + 3 * h.ranks.length))}px`;
  const label = METRIC_LABELS[state.metric];
  if (!h.ranks.length) {
    $("#cl-heat-note").textContent = "no step breakdown in this run";
    await plot(node, [], baseLayout());
    await plot($("#cl-ranks-chart"), [], baseLayout());
    return;
  }
  const slow = new Set(overview.slow_ranks.map((s) => s.rank));
  const z = h.z.map((row) => row.map((v) => (v === null ? null : v / 1e6)));
  // rows on a numeric axis (a category axis of 1,000 names draws slower), labelled with their ranks
  const y = h.ranks.map((_, i) => i);
  const every = Math.max(1, Math.ceil(h.ranks.length / 40));
  const ticks = y.filter((i) => i % every === 0);
  const x = h.steps.map((s) => (s === null ? "all" : String(s)));
  const slowRows = y.filter((i) => slow.has(h.ranks[i]));
  const range = colourRange(z);
  await plot(node, [{
    type: "heatmap", x, y, z, colorscale: [[0, "#3f7fd8"], [0.5, "#e9dcc0"], [1, "#e8533a"]], hoverongaps: false,
    ...(range ? { zmin: range.zmin, zmax: range.zmax, zauto: false } : {}),
    customdata: h.ranks.map((r) => h.steps.map(() => r)),
    hovertemplate: `Rank %{customdata}, step %{x}<br>${plotText(label)}: %{z:,.3f} ms<br>click: open the timeline<extra></extra>`,
    colorbar: { title: { text: `${plotText(label)} (ms)` }, thickness: 12 },
  }, {
    // the slow ranks called out at the left edge of their rows
    type: "scatter", mode: "markers", x: slowRows.map(() => x[0]), y: slowRows, cliponaxis: false,
    customdata: slowRows.map((i) => h.ranks[i]), marker: { symbol: "triangle-right", size: 11, color: "#f2b84b" },
    hovertemplate: "Rank %{customdata}: slow (see the list below)<extra></extra>", showlegend: false, xaxis: "x",
  }], baseLayout({ margin: { l: 70, r: 20, t: 10, b: 40 }, showlegend: false,
    // fixed ranges: the markers' own padding would otherwise widen both axes
    xaxis: { title: { text: "Step" }, type: "category", range: [-0.5, x.length - 0.5] },
    yaxis: { title: { text: "Rank" }, range: [y.length - 0.5, -0.5], tickvals: ticks,
      ticktext: ticks.map((i) => String(h.ranks[i])), zeroline: false, showgrid: false } }));
  node.removeAllListeners?.("plotly_click");
  node.on("plotly_click", (ev) => {
    const p = ev.points && ev.points[0];
    if (p && p.customdata !== undefined) openRank(p.customdata);
  });
  const spreadNote = !range || range.spread === null ? ""
    : range.spread < MIN_SPREAD
      ? ` · every cell within ${(range.spread * 100).toFixed(2)} % of the median (${num(range.mid, 3)} ms): under ${MIN_SPREAD * 100} %, coloured as uniform`
      : ` · colour: distance from the median (${num(range.mid, 3)} ms), up to ±${(range.spread * 100).toFixed(1)} %`;
  $("#cl-heat-note").textContent = `${h.ranks.length} rank${h.ranks.length === 1 ? "" : "s"} × ${h.steps.length} step${h.steps.length === 1 ? "" : "s"}` + spreadNote +
    (h.truncated ? " (the latest steps are left out: too many cells)" : "") +
    (state.source === "cluster_analysis" ? " · from cluster_step_trace_time.csv" : "");
  const colors = h.ranks.map((r) => (slow.has(r) ? "#e8533a" : "#3f7fd8"));
  const ranksNode = $("#cl-ranks-chart");
  await plot(ranksNode, [{
    type: "bar", x: h.ranks, y: h.rank_mean_ns.map((v) => (v === null ? null : v / 1e6)),
    marker: { color: colors }, customdata: h.ranks,
    hovertemplate: `Rank %{customdata}<br>mean ${plotText(label)}: %{y:,.3f} ms<extra></extra>`,
  }], baseLayout({ margin: { l: 70, r: 20, t: 10, b: 40 }, bargap: 0.1, showlegend: false,
    xaxis: { title: { text: "Rank" }, type: h.ranks.length > 64 ? "linear" : "category", zeroline: false },
    yaxis: { title: { text: `mean ${plotText(label)} per step (ms)` } } }));
  ranksNode.removeAllListeners?.("plotly_click");
  ranksNode.on("plotly_click", (ev) => {
    const p = ev.points && ev.points[0];
    if (p && p.customdata !== undefined) openRank(p.customdata);
  });
}

// --- communication matrix -------------------------------------------------------------------------------------------

function fillSelect(node, values, current, allLabel) {
  clear(node).append(el("option", { value: "" }, allLabel), ...values.map((v) => el("option", { value: v }, v)));
  node.value = values.includes(current) ? current : "";
  return node.value;
}

function buildMatrixFilters(options) {
  const keys = options.keys;
  state.step = fillSelect($("#cl-m-step"), [...new Set(keys.map((k) => k.step))], state.step, "all steps");
  const inStep = keys.filter((k) => !state.step || k.step === state.step);
  state.group = fillSelect($("#cl-m-group"), [...new Set(inStep.map((k) => k.group_id).filter((g) => g !== null))],
    state.group, "all groups");
  const inGroup = inStep.filter((k) => !state.group || k.group_id === state.group);
  state.op = fillSelect($("#cl-m-op"), [...new Set(inGroup.flatMap((k) => k.op_types))].sort(), state.op, "all op types");
}

async function loadMatrix() {
  matrixData = await apiGet(`${apiBase}/matrix`, { step: state.step || undefined, group: state.group || undefined,
    op_type: state.op || undefined });
  buildMatrixFilters(matrixData.options);
  renderMatrix();
  renderLinks();
}

function renderMatrix() {
  const m = matrixData;
  const node = $("#cl-matrix");
  if (!m.links) {
    $("#cl-matrix-note").textContent = "no links between ranks for this filter";
    $("#cl-matrix-extra").textContent = "";
    return plot(node, [], baseLayout());
  }
  const key = state.show;
  const scale = key === "transit_time_ns" ? 1e-6 : 1;
  // the server sends the cells that have links (i = src, j = dst); plotly's rows are y: dst on y, as in
  // MindStudio Insight
  const n = m.labels.length;
  const z = Array.from({ length: n }, () => new Array(n).fill(null));
  const { i: src, j: dst } = m.cells;
  const values = m.cells[key];
  for (let k = 0; k < src.length; k++) if (values[k] !== null) z[dst[k]][src[k]] = values[k] * scale;
  const binned = m.bin_size > 1;
  const label = MATRIX_LABELS[key];
  plot(node, [{
    type: "heatmap", x: m.labels, y: m.labels, z, hoverongaps: false, xgap: n <= 64 ? 1 : 0, ygap: n <= 64 ? 1 : 0,
    colorscale: RED_BLUE, reversescale: key === "transit_time_ns",
    hovertemplate: `${binned ? "ranks " : ""}%{x} → %{y}<br>${plotText(label)}: %{z:,.4f}<extra></extra>`,
    colorbar: { title: { text: plotText(label) }, thickness: 12 },
  }], baseLayout({ margin: { l: 80, r: 20, t: 10, b: 50 },
    xaxis: { title: { text: binned ? `Src ranks (blocks of ${m.bin_size})` : "Src Rank Id" }, type: "category", showgrid: false },
    yaxis: { title: { text: binned ? `Dst ranks (blocks of ${m.bin_size})` : "Dst Rank Id" }, type: "category", showgrid: false } }));
  const transports = Object.entries(m.transports).map(([t, c]) => `${t} ${c}`).join(", ");
  $("#cl-matrix-note").textContent = `${m.links} links (${transports}) over ${m.ranks.length} ranks` +
    (binned ? ` · each cell sums the links between two blocks of ${m.bin_size} ranks` : "");
  $("#cl-matrix-extra").textContent = "LOCAL (same-rank) copies left out; the source rank's file wins for a link";
}

function renderLinks() {
  const host = clear($("#cl-links"));
  const links = matrixData.slow_links;
  if (!links.length) {
    host.append(el("div", { class: "v-note" }, "No links between ranks."));
    return;
  }
  const table = el("table", { class: "grid v-table", id: "cl-links-table" });
  const heads = ["Src", "Dst", "Transport", "Bandwidth (GB/s)", "Median of its transport (GB/s)", "Size (MB)",
    "Time (ms)"];
  table.append(el("thead", {}, el("tr", {}, ...heads.map((h, i) => el("th", i > 2 ? { class: "num" } : {}, h)))));
  const body = el("tbody");
  const num4 = (v, d) => el("td", { class: "num" }, num(v, d));
  for (const l of links) {
    body.append(el("tr", {}, el("td", {}, rankLink(l.src_rank)), el("td", {}, rankLink(l.dst_rank)),
      el("td", {}, l.transport_type), num4(l.bandwidth_gbps, 4), num4(l.median_gbps, 4), num4(l.transit_size_mb, 3),
      el("td", { class: "num" }, ms(l.transit_time_ns, 4))));
  }
  table.append(body);
  host.append(el("div", { class: "v-table-wrap" }, table));
}

// --- cluster_analysis_output --------------------------------------------------------------------------------------

function renderAnalysis() {
  const host = clear($("#cl-analysis"));
  const a = overview.cluster_analysis;
  if (!a.found) {
    host.append(el("div", { class: "v-note", id: "cl-analysis-none" },
      "No cluster_analysis_output folder (msprof-analyze cluster output) was found beside the rank folders."));
    return;
  }
  host.append(el("div", { class: "v-note" }, `msprof-analyze's cluster output: ${a.ranks} ranks in ` +
    "cluster_step_trace_time.csv (pick it under Step data to draw them)."));
  const table = el("table", { class: "grid v-table", id: "cl-analysis-files" });
  table.append(el("thead", {}, el("tr", {}, ...["File", "Kind", "Rows", "Status"].map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const f of a.files) body.append(el("tr", {}, el("td", {}, f.file), el("td", {}, f.kind), el("td", {}, f.rows), el("td", {}, f.status)));
  table.append(body);
  host.append(el("div", { class: "v-table-wrap" }, table));
}

async function loadOverview(answer = null) {
  overview = await (answer || apiGet(`${apiBase}/overview`, { source: state.source }));
  renderSummary();
  buildPicker();
  renderSlow();
  renderAnalysis();
}

function showError(err) {
  const box = el("div", { class: "v-error", id: "cl-error" }, `Could not load the cluster view: ${err.message || err}`);
  $("#cluster-view").prepend(box);
}

async function start() {
  $("#cl-metric").addEventListener("change", (e) => { state.metric = e.target.value; loadHeatmap().catch(showError); });
  $("#cl-source").addEventListener("change", async (e) => {
    state.source = e.target.value;
    try {
      await loadOverview();
      await loadHeatmap();
    } catch (err) {
      showError(err);
    }
  });
  for (const [id, key] of [["#cl-m-step", "step"], ["#cl-m-group", "group"], ["#cl-m-op", "op"]]) {
    $(id).addEventListener("change", (e) => { state[key] = e.target.value; loadMatrix().catch(showError); });
  }
  $("#cl-m-metric").addEventListener("change", (e) => { state.show = e.target.value; renderMatrix(); });
  $("#cl-rank-open").addEventListener("click", pickFromInput);
  $("#cl-rank-input").addEventListener("keydown", (e) => { if (e.key === "Enter") pickFromInput(); });
  try {
    // the three requests leave together; the heatmap waits for the overview's slow ranks to mark them
    const heat = fetchHeatmap();
    const matrix = loadMatrix();
    await loadOverview();
    await loadHeatmap(heat);
    document.body.dataset.clusterPaintMs = String(Math.round(performance.now()));
    await matrix;
    await initLateArrivals();
    // the parallel strategy after the view's own answers, its modules loaded then (off the page's first module
    // graph, which the load event waits for); it shows its own errors in its section
    const { initStrategy } = await import("./strategy.js");
    await initStrategy();
    document.body.dataset.clusterReady = "1";
  } catch (err) {
    showError(err);
  }
}

start();
