// The Cluster view's parallel strategy: the rank grid laid out by the strategy (PP stages as blocks of columns, TP ×
// CP inside a block, DP replicas as rows) coloured by one step metric, the verdicts on which dimension is slow (each
// with a link that opens its ranks on the timeline), the metric's spreads per dimension and the communication per
// group kind. Every answer comes from /api/runs/{id}/strategy/… (the run's cluster tables): 1,024 ranks paint from
// two small requests. DOM is built with textContent only; strings handed to plotly go through plotText.

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { num } from "../common/format.js";
import { ms } from "../common/time.js";
import { runPage } from "../common/urls.js";
import { baseLayout, plot } from "./charts.js";
import { initExperts } from "./experts.js";
import { apiBase as runBase, runId } from "./run.js";

const base = `${runBase}/strategy`;
const METRIC_LABELS = { step: "Step time", computing: "Computing", exposed_comm: "Communication(Not Overlapped)",
  free: "Free", wait_caused: "Wait caused (as the last rank)" };
const SOURCE_WORDS = { metadata: "its own profiler_metadata.json", peers: "other ranks' groups",
  inferred: "the rank order (inferred)" };
const SEVERITY = { warning: "adv-sev-warning", info: "adv-sev-info", ok: "adv-sev-ok" };
const BLUE_RED = [[0, "#3f7fd8"], [0.5, "#e9dcc0"], [1, "#e8533a"]];
const state = { metric: "step", from: "", to: "", order: "", sizes: {} };

/** The timeline of some ranks (a sharded run loads just their shards). */
export function ranksUrl(ranks) {
  const list = ranks.join(",");
  return runPage(runId, "timeline", { ranks: list, rank: ranks.length === 1 ? ranks[0] : undefined });
}

function params(extra = {}) {
  return { metric: state.metric, from_step: state.from || undefined, to_step: state.to || undefined,
    order: state.order || undefined, ...state.sizes, ...extra };
}

// --- the grid ------------------------------------------------------------------------------------------------------

/** Column of a rank: its stage's block (TP fastest, then CP), a blank column between two stages. */
function layout(g) {
  const inner = g.sizes.tp * g.sizes.cp;
  const x = (i) => g.pp[i] * (inner + 1) + g.cp[i] * g.sizes.tp + g.tp[i];
  return { width: g.sizes.pp * (inner + 1) - 1, rows: g.sizes.dp, inner, x };
}

function cellText(g, i) {
  const c = `dp ${g.dp[i]} · pp ${g.pp[i]} · tp ${g.tp[i]}` + (g.sizes.cp > 1 ? ` · cp ${g.cp[i]}` : "") +
    (g.sizes.ep > 1 ? ` · ep ${g.ep[i]}` : "");
  const v = g.value[i] === null ? (g.in_run[i] ? "no step data" : "not in this run") : ms(g.value[i]);
  return `Rank ${g.rank[i]}<br>${c}<br>${plotText(METRIC_LABELS[g.metric])}: ${v}<br>placed by ` +
    `${SOURCE_WORDS[g.source[i]]}`;
}

async function drawGrid(g) {
  const node = $("#st-grid");
  const L = layout(g);
  const z = Array.from({ length: L.rows }, () => new Array(L.width).fill(null));
  const text = Array.from({ length: L.rows }, () => new Array(L.width).fill(""));
  const who = Array.from({ length: L.rows }, () => new Array(L.width).fill(null));
  const inferred = { x: [], y: [] };
  for (let i = 0; i < g.rank.length; i++) {
    const x = L.x(i);
    const y = g.dp[i];
    if (y >= L.rows || x >= L.width) continue;
    z[y][x] = g.value[i] === null ? null : g.value[i] / 1e6;
    text[y][x] = cellText(g, i);
    who[y][x] = g.in_run[i] ? g.rank[i] : null;
    if (g.source[i] === "inferred") { inferred.x.push(x); inferred.y.push(y); }
  }
  const centers = Array.from({ length: g.sizes.pp }, (_, s) => s * (L.inner + 1) + (L.inner - 1) / 2);
  const everyRow = Math.max(1, Math.ceil(L.rows / 32));
  const rowTicks = Array.from({ length: L.rows }, (_, d) => d).filter((d) => d % everyRow === 0);
  node.style.height = `${Math.min(720, Math.max(260, 90 + 22 * L.rows))}px`;
  const label = METRIC_LABELS[g.metric];
  await plot(node, [{
    type: "heatmap", z, text, customdata: who, hoverongaps: false, colorscale: BLUE_RED, xgap: 1, ygap: 1,
    hovertemplate: "%{text}<extra></extra>", colorbar: { title: { text: `${plotText(label)} (ms)` }, thickness: 12 },
  }, {
    type: "scatter", mode: "markers", x: inferred.x, y: inferred.y, hoverinfo: "skip", showlegend: false,
    marker: { symbol: "circle", size: 4, color: "rgba(20, 22, 26, 0.75)" },
  }], baseLayout({ margin: { l: 70, r: 20, t: 10, b: 40 }, showlegend: false,
    xaxis: { tickvals: centers, ticktext: centers.map((_, s) => `PP ${s}`), range: [-0.5, L.width - 0.5],
      showgrid: false, zeroline: false,
      title: { text: `pipeline stages; inside each, ${g.sizes.tp > 1 ? `TP 0–${g.sizes.tp - 1}` : "one rank"}` +
        (g.sizes.cp > 1 ? ` × CP 0–${g.sizes.cp - 1}` : "") } },
    yaxis: { tickvals: rowTicks, ticktext: rowTicks.map((d) => `DP ${d}` + (g.sizes.ep > 1 ? ` · EP ${d % g.sizes.ep}` : "")),
      range: [L.rows - 0.5, -0.5], showgrid: false, zeroline: false } }));
  node.removeAllListeners?.("plotly_click");
  node.on("plotly_click", (ev) => {
    const p = ev.points && ev.points[0];
    if (p && p.customdata !== null && p.customdata !== undefined) window.location.assign(ranksUrl([p.customdata]));
  });
}

function describe(g) {
  const s = g.sizes;
  const dims = [`TP ${s.tp}`, `PP ${s.pp}`, `DP ${s.dp}`].concat(s.cp > 1 ? [`CP ${s.cp}`] : [], s.ep > 1 ? [`EP ${s.ep}`] : []);
  const from = { distributed_args: "distributed_args", groups: "the groups' sizes", user: "picked here",
    none: "nothing states them: every rank is a DP replica until sizes are picked" }[g.sizes_source];
  const order = { default: "the default", groups: "the one the files' groups fit", user: "picked here" }[g.order_source];
  const parts = [`${dims.join(" × ")} = ${g.world} ranks (sizes: ${from})`, `order ${g.order} (${order})`,
    `${g.counts.metadata} placed by their own metadata, ${g.counts.peers} by other ranks' groups, ` +
    `${g.counts.inferred} inferred from the rank order`];
  if (g.microbatches) parts.push(`${g.microbatches} microbatches (${g.pp_schedule || "pp_info"})`);
  $("#st-summary").textContent = parts.join(" · ");
  const warn = clear($("#st-warnings"));
  for (const w of g.warnings.slice(0, 5)) warn.append(el("div", { class: "v-note warn" }, w));
}

function fillSteps(steps) {
  for (const [id, key, label] of [["#st-from", "from", "first"], ["#st-to", "to", "last"]]) {
    const node = clear($(id));
    node.append(el("option", { value: "" }, `${label} step`), ...steps.map((s) => el("option", { value: s }, s)));
    node.value = steps.map(String).includes(state[key]) ? state[key] : "";
  }
}

// --- verdicts, spreads, communication --------------------------------------------------------------------------------

function drawVerdicts(v) {
  const host = clear($("#st-verdicts"));
  host.append(el("div", { class: "v-advice-head", id: "st-summary-line" }, v.summary || ""));
  const list = el("ul", { id: "st-verdict-list" });
  for (const item of v.verdicts || []) {
    const link = item.ranks && item.ranks.length
      ? el("a", { href: ranksUrl(item.ranks), class: "st-open" },
        `open rank${item.ranks.length > 1 ? "s" : ""} ${item.ranks.slice(0, 8).join(", ")}${item.ranks.length > 8 ? ", …" : ""} on the timeline`)
      : null;
    list.append(el("li", { class: item.severity, "data-kind": item.kind },
      el("span", { class: `adv-sev ${SEVERITY[item.severity] || ""}` }, item.severity), " ", item.text,
      link ? " · " : null, link));
  }
  host.append(list);
}

function drawSpreads(v) {
  const host = clear($("#st-spreads"));
  const dims = Object.entries(v.spreads || {});
  if (!dims.length) {
    host.append(el("div", { class: "v-note" }, "Every parallel size is 1: nothing to compare."));
    return;
  }
  const table = el("table", { class: "grid v-table", id: "st-spread-table" });
  table.append(el("thead", {}, el("tr", {}, ...["Dimension", "Size", "Between its slices", "Slowest slice",
    "Within its groups (median)", "Within (worst group)", "Worst group", "Its slowest rank"].map((h) => el("th", {}, h)))));
  const body = el("tbody");
  const pctCell = (x) => el("td", { class: "num" }, x === null || x === undefined ? "—" : `${num(x, 2)} %`);
  for (const [dim, s] of dims) {
    body.append(el("tr", { "data-dim": dim }, el("td", {}, dim.toUpperCase()), el("td", { class: "num" }, s.size),
      pctCell(s.between_pct), el("td", {}, s.worst_slice === null || !s.between_pct ? "—" : `${dim} ${s.worst_slice}`),
      pctCell(s.within_median_pct), pctCell(s.within_max_pct),
      el("td", {}, s.worst_group.length && s.within_max_pct ? el("a", { href: ranksUrl(s.worst_group) },
        `{${s.worst_group.slice(0, 8).join(",")}${s.worst_group.length > 8 ? ",…" : ""}}`) : "—"),
      el("td", {}, s.worst_group_slowest === null || !s.within_max_pct ? "—" : String(s.worst_group_slowest))));
  }
  table.append(body);
  host.append(el("div", { class: "v-note" }, `${METRIC_LABELS[v.metric]}, mean per step: spread = (max − min) ÷ median; ` +
    "a slice is the ranks of one coordinate (a PP stage, a DP replica), a group the ranks that differ only in that " +
    "coordinate (a TP group)."), el("div", { class: "v-table-wrap" }, table));
}

function drawCommunication(c) {
  const host = clear($("#st-comm"));
  if (!c.available || !c.kinds.length) {
    host.append(el("div", { class: "v-note" }, c.reason || "No collectives in these steps."));
    return;
  }
  const table = el("table", { class: "grid v-table", id: "st-comm-table" });
  table.append(el("thead", {}, el("tr", {}, ...["Kind", "Group names", "Groups", "Ops", "Time per rank and step (ms)",
    "Wait share", "Bandwidth (GB/s)"].map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const k of c.kinds) {
    const bw = Object.entries(k.bandwidth).map(([t, b]) => `${t} ${b.gbps === null ? "—" : num(b.gbps, 2)}`).join(", ");
    body.append(el("tr", { "data-kind": k.kind }, el("td", {}, k.kind), el("td", {}, k.group_names.join(", ") || "—"),
      el("td", { class: "num" }, k.groups), el("td", { class: "num" }, k.ops),
      el("td", { class: "num" }, k.mean_per_rank_step_ns === null ? "—" : ms(k.mean_per_rank_step_ns)),
      el("td", { class: "num" }, k.wait_share === null ? "—" : `${num(k.wait_share * 100, 1)} %`),
      el("td", {}, bw || "—")));
  }
  table.append(body);
  host.append(el("div", { class: "v-table-wrap" }, table));
}

// --- loading ---------------------------------------------------------------------------------------------------------

async function load({ first = false, comm = false } = {}) {
  const [g, v, c] = await Promise.all([apiGet(`${base}/grid`, params()), apiGet(`${base}/verdicts`, params()),
    first || comm ? apiGet(`${base}/communication`,
      { from_step: state.from || undefined, to_step: state.to || undefined }) : null]);
  if (!g.available) {
    clear($("#st-body")).append(el("div", { class: "v-note", id: "st-none" }, g.reason));
    $("#st-verdicts").hidden = true;
    $("#st-more").hidden = true;
    return;
  }
  describe(g);
  if (first) fillSteps(g.steps);
  await drawGrid(g);
  drawVerdicts(v);
  drawSpreads(v);
  if (c) drawCommunication(c);
}

function readSizes() {
  const sizes = {};
  for (const d of ["tp", "pp", "cp", "ep"]) {
    const n = Number($(`#st-size-${d}`).value);
    if ($(`#st-size-${d}`).value !== "" && Number.isInteger(n) && n > 0) sizes[d] = n;
  }
  return sizes;
}

export async function initStrategy() {
  const fail = (err) => clear($("#st-verdicts")).append(el("div", { class: "v-error" }, `Could not load the parallel strategy: ${err.message || err}`));
  $("#st-metric").addEventListener("change", (e) => { state.metric = e.target.value; load().catch(fail); });
  $("#st-from").addEventListener("change", (e) => { state.from = e.target.value; load({ comm: true }).catch(fail); });
  $("#st-to").addEventListener("change", (e) => { state.to = e.target.value; load({ comm: true }).catch(fail); });
  $("#st-order").addEventListener("change", (e) => { state.order = e.target.value; load().catch(fail); });
  $("#st-size-apply").addEventListener("click", () => { state.sizes = readSizes(); load().catch(fail); });
  try {
    await load({ first: true });
    document.body.dataset.strategyReady = "1";
    await initExperts({ from: () => state.from, to: () => state.to });
    document.body.dataset.expertsReady = "1";
  } catch (err) {
    fail(err);
  }
}
