// Serving view: an LLM service profiled with msServiceProfiler — its requests as a timeline (queue wait, prefill,
// decode), its batches (prefill / decode mix, linked to their requests), the KV-cache blocks left, throughput and
// latency curves, and the slowest requests with why. Dragging across any time chart selects a range: every panel
// is asked again for that range (/api/runs/{id}/serving/…?start_ns=&end_ns=). A batch clicked shows its requests
// and a link to the timeline at that time. Times on the charts are ms from the run's serving origin.
// DOM is built with textContent only; data strings handed to plotly go through plotText.

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { num } from "../common/format.js";
import { page } from "../common/nav.js";
import { absNs, formatDuration } from "../common/time.js";
import { runPage } from "../common/urls.js";
import { baseLayout, plot, plotlyReady } from "./charts.js";
import { apiBase as runBase, runId } from "./run.js";

const apiBase = `${runBase}/serving`;
const TIME_CHARTS = ["sv-requests", "sv-batches", "sv-kv", "sv-throughput", "sv-curves", "sv-forward", "sv-queues",
  "sv-coordinator"];
const COLORS = { queue: "#8e94a0", prefill: "#e07b39", decode: "#3f7fd8", send: "#c9a227", kv: "#2f9e8f",
  waiting: "#8e94a0", running: "#3f7fd8", swapped: "#d0453f", pending: "#8a5cd0" };
const REASONS = { queued: "queued", long_prefill: "long prefill", long_decode: "long decode", preempted: "preempted" };
const WINDOW_PAD_NS = 1e6;

const state = { origin: null, range: null, batches: null, selected: null, seq: 0 };

const msOf = (offNs) => (offNs === null || offNs === undefined ? null : offNs / 1e6);
const dur = (ns) => (ns === null || ns === undefined ? "–" : formatDuration(ns));

function rangeParams() {
  if (!state.range || state.origin === null) return {};
  return { start_ns: absNs(state.range[0], state.origin), end_ns: absNs(state.range[1], state.origin) };
}

function kv(label, value) {
  return el("div", {}, el("div", { class: "k" }, label), el("div", { class: "v", title: value }, value));
}

function pcts(p) {
  return p ? `${dur(p.p50)} / ${dur(p.p90)} / ${dur(p.p99)}` : "–";
}

function renderStats(s) {
  const t = s.throughput;
  clear($("#sv-stats")).append(
    kv("Requests (arrived in range)", `${s.counts.in_range} of ${s.counts.requests}`),
    kv("TTFT p50 / p90 / p99", pcts(s.percentiles.ttft_ns)),
    kv("TPOT p50 / p90 / p99", pcts(s.percentiles.tpot_ns)),
    kv("End-to-end p50 / p90 / p99", pcts(s.percentiles.e2e_ns)),
    kv("Queue wait p50 / p90 / p99", pcts(s.percentiles.queue_ns)),
    kv("Throughput", t.requests_per_s === null ? "–"
      : `${num(t.requests_per_s, 2)} req/s · ${num(t.output_tokens_per_s, 1)} tok/s out`),
    kv("Batches", String(s.counts.batches)),
    kv("KV cache free blocks (min / max)", s.kvcache.samples ? `${s.kvcache.min_free_blocks} / ${s.kvcache.max_free_blocks}` : "no samples"),
    kv("Preempted requests", String(s.counts.preempted)),
  );
  $("#sv-summary").textContent = `${s.counts.requests} requests, ${s.counts.batches} batches, `
    + `${s.counts.kvcache} KV-cache samples`;
}

function timeLayout(extra = {}) {
  const layout = baseLayout({ dragmode: "zoom", ...extra, xaxis: { title: { text: "ms" }, ...(extra.xaxis || {}) } });
  if (state.range) layout.xaxis.range = [state.range[0] / 1e6, state.range[1] / 1e6];
  return layout;
}

function renderRequests(r) {
  const rows = r.rows;
  const n = rows.rid.length;
  const y = rows.rid.map(plotText);
  const arrival = rows.arrival_off_ns.map(msOf);
  const bar = (name, base, x) => ({ type: "bar", orientation: "h", name, y, base, x, marker: { color: COLORS[name] },
    hovertemplate: `%{y}<br>${name}: %{x:.3f} ms<extra></extra>` });
  // a preempted request's queue wait also counts its wait after the preemption: the bars cut it at the first token
  const ttft = rows.ttft_ns.map((v, i) => (v === null ? (rows.queue_ns[i] ?? 0) / 1e6 : v / 1e6));
  const queue = rows.queue_ns.map((v, i) => Math.min(v === null ? 0 : v / 1e6, ttft[i]));
  const prefill = ttft.map((t, i) => t - queue[i]);
  const decode = rows.decode_ns.map((v) => (v === null ? 0 : v / 1e6));
  const traces = [
    bar("queue", arrival, queue),
    bar("prefill", arrival.map((a, i) => a + queue[i]), prefill),
    bar("decode", arrival.map((a, i) => a + queue[i] + prefill[i]), decode),
  ];
  if (state.selected) {
    const held = new Set(state.selected.rids);
    traces.push({ type: "scatter", mode: "markers", name: "in the batch", y: y.filter((_, i) => held.has(rows.rid[i])),
      x: arrival.filter((_, i) => held.has(rows.rid[i])), marker: { symbol: "diamond", size: 9, color: "#f2b84b" } });
  }
  const node = $("#sv-requests");
  node.style.height = `${Math.max(320, Math.min(900, 18 * n + 80))}px`;
  plot(node, traces, timeLayout({ barmode: "overlay", yaxis: { autorange: "reversed", type: "category" },
    margin: { l: 110, r: 20, t: 30, b: 40 } }));
  $("#sv-req-note").textContent = r.truncated ? `the first ${n} of ${r.total} requests in the range` : "";
}

function renderBatches(b) {
  state.batches = b;
  const rows = b.rows;
  const x = rows.start_off_ns.map(msOf);
  const custom = rows.batch_id.map((id, i) => i);
  const trace = (name, y, color) => ({ type: "bar", name, x, y, customdata: custom, marker: { color },
    hovertemplate: `batch %{customdata}: %{y} ${name}<extra></extra>` });
  plot($("#sv-batches"), [trace("prefill", rows.prefill_size.map((v, i) => v ?? (rows.batch_size[i] ?? 0)),
    COLORS.prefill), trace("decode", rows.decode_size.map((v) => v ?? 0), COLORS.decode)],
  timeLayout({ barmode: "stack", yaxis: { title: { text: "requests" } } }));
  $("#sv-batch-note").textContent = b.truncated ? `the first ${rows.batch_id.length} batches of the range` : "";
}

function renderBatchDetail(i) {
  const rows = state.batches.rows;
  const box = clear($("#sv-batch-detail"));
  const start = rows.start_ns[i];
  const end = absNs(rows.end_off_ns[i] ?? rows.start_off_ns[i], state.origin);
  const parts = [el("b", {}, `Batch ${rows.batch_id[i]}`),
    ` (${rows.batch_type[i] || "?"}, ${rows.batch_size[i] ?? "?"} requests, model execution ${dur(rows.exec_ns[i])}): `,
    rows.rids[i].join(", ") + (rows.rids_truncated[i] ? " …" : "")];
  const ranks = page.ranks || [];
  if (ranks.length) {
    // `ranks` loads only that rank's shard of a big sharded run; `rank` selects it
    const href = runPage(runId, "timeline", { rank: ranks[0], ranks: ranks[0], start_ns: absNs(-WINDOW_PAD_NS, start),
      end_ns: absNs(WINDOW_PAD_NS, end) });
    parts.push(" · ", el("a", { href, id: "sv-open-timeline" }, `Open the timeline at this batch (rank ${ranks[0]})`));
  }
  box.append(el("p", { class: "v-note" }, ...parts));
}

function renderKv(k) {
  const rows = k.rows;
  const x = rows.ts_off_ns.map(msOf);
  plot($("#sv-kv"), [{ type: "scatter", mode: "lines", line: { shape: "hv", color: "#2f9e8f" }, name: "free blocks",
    x, y: rows.free_blocks }], timeLayout({ showlegend: false, yaxis: { title: { text: "blocks left" } } }));
}

function renderCurves(c) {
  const x = c.t_ns.map(msOf);
  const line = (key, name, dash, color) => ({ type: "scatter", mode: "lines+markers", name, x,
    y: (c[key] || []).map((v) => (v === null ? null : v / 1e6)), line: { dash, color }, connectgaps: true });
  const traces = [];
  for (const [m, color] of [["ttft", "#e07b39"], ["tpot", "#8a5cd0"], ["e2e", "#3f7fd8"]]) {
    traces.push(line(`${m}_p50`, `${m.toUpperCase()} p50`, "solid", color), line(`${m}_p90`, `${m.toUpperCase()} p90`, "dash", color),
      line(`${m}_p99`, `${m.toUpperCase()} p99`, "dot", color));
  }
  plot($("#sv-curves"), traces, timeLayout({ yaxis: { title: { text: "ms" }, type: "log" } }));
  plot($("#sv-throughput"), [
    { type: "bar", name: "output tokens/s", x, y: c.output_tokens_per_s || [], marker: { color: "#3f7fd8" } },
    { type: "scatter", mode: "lines+markers", name: "requests finished/s", x, y: c.finished_per_s || [], yaxis: "y2",
      line: { color: "#e07b39" } }],
  timeLayout({ yaxis: { title: { text: "tokens/s" } }, yaxis2: { overlaying: "y", side: "right", title: { text: "req/s" } } }));
}

function laneName(rows, i) {
  return [rows.hostname[i], `card ${rows.prof_id[i]}`, rows.dp_rank[i] !== "" ? `dp ${rows.dp_rank[i]}` : ""]
    .filter(Boolean).join(" · ");
}

function renderForward(f) {
  const rows = f.rows;
  const n = (rows.prof_id || []).length;
  $("#sv-forward-box").hidden = !n;
  if (!n) return;
  const y = rows.prof_id.map((_, i) => plotText(laneName(rows, i)));
  const base = rows.start_off_ns.map(msOf);
  const x = rows.dur_ns.map((v, i) => (v ?? (rows.end_off_ns[i] - rows.start_off_ns[i])) / 1e6);
  const color = rows.batch_type.map((t) => (String(t).toLowerCase() === "decode" ? COLORS.decode : COLORS.prefill));
  const text = rows.forward_iter.map((it, i) => plotText(`forward ${it}: ${rows.batch_size[i] ?? "?"} requests, `
    + `${rows.batch_type[i] || "?"}`));
  plot($("#sv-forward"), [{ type: "bar", orientation: "h", y, base, x, marker: { color }, text, textposition: "none",
    hovertemplate: "%{y}<br>%{text}<br>%{x:.3f} ms<extra></extra>" }],
  timeLayout({ showlegend: false, yaxis: { type: "category" }, margin: { l: 150, r: 20, t: 20, b: 40 } }));
  $("#sv-forward-note").textContent = f.lanes.map((l) => `card ${l.prof_id}${l.dp_rank !== "" ? ` (dp ${l.dp_rank})` : ""}: `
    + `${l.forwards} forwards, busy ${dur(l.busy_ns)}, bubbles ${dur(l.bubble_ns)} (longest ${dur(l.max_bubble_ns)})`)
    .join(" · ") + (f.truncated ? " — the first forwards of the range only" : "");
}

function renderQueues(q) {
  const rows = q.rows;
  $("#sv-queues-card").hidden = !(rows.queue || []).length;
  if (!(rows.queue || []).length) return;
  const traces = [...new Set(rows.queue)].map((name) => {
    const idx = rows.queue.map((v, i) => (v === name ? i : -1)).filter((i) => i >= 0);
    return { type: "scatter", mode: "lines", line: { shape: "hv", color: COLORS[name] }, name: plotText(name),
      x: idx.map((i) => msOf(rows.ts_off_ns[i])), y: idx.map((i) => rows.size[i]) };
  });
  plot($("#sv-queues"), traces, timeLayout({ yaxis: { title: { text: "requests" } } }));
}

function renderPd(p, c) {
  const rows = p.rows;
  const n = (rows.rid || []).length;
  $("#sv-pd-section").hidden = !n;
  if (!n) return;
  const y = rows.rid.map(plotText);
  const ms = (v) => (v === null || v === undefined ? 0 : v / 1e6);
  const start = rows.arrival_off_ns.map(msOf);
  const prefill = rows.prefill_ns.map(ms);
  const send = rows.send_ns.map(ms);
  const kv = rows.kv_transfer_ns.map(ms);
  const decode = rows.decode_ns.map((v, i) => Math.max(0, ms(v) - kv[i]));
  const bar = (name, base, x, color) => ({ type: "bar", orientation: "h", name, y, base, x, marker: { color },
    hovertemplate: `%{y}<br>${name}: %{x:.3f} ms<extra></extra>` });
  const afterPrefill = start.map((s, i) => s + prefill[i]);
  const node = $("#sv-pd");
  node.style.height = `${Math.max(280, Math.min(900, 18 * n + 80))}px`;
  plot(node, [bar("arrival to prefill result (P instance)", start, prefill, COLORS.prefill),
    bar("KV transfer", afterPrefill, kv, COLORS.kv),
    bar("decode (D instance)", afterPrefill.map((a, i) => a + kv[i]), decode, COLORS.decode),
    { type: "scatter", mode: "markers", name: "hand-over to D", y, x: start.map((s, i) => s + send[i]),
      marker: { symbol: "line-ns-open", size: 10, color: COLORS.send },
      hovertemplate: "%{y}<br>sent to the decode instance<extra></extra>" }],
  timeLayout({ barmode: "overlay", yaxis: { autorange: "reversed", type: "category" },
    margin: { l: 110, r: 20, t: 20, b: 40 } }));
  const cr = c.rows;
  const keys = [...new Set((cr.address || []).map((a, i) => `${cr.node_type[i]} ${a}`))];
  plot($("#sv-coordinator"), keys.map((key) => {
    const idx = cr.address.map((a, i) => (`${cr.node_type[i]} ${a}` === key ? i : -1)).filter((i) => i >= 0);
    return { type: "bar", name: plotText(key), x: idx.map((i) => msOf(cr.ts_off_ns[i])),
      y: idx.map((i) => cr.add_count[i]) };
  }), timeLayout({ barmode: "group", yaxis: { title: { text: "requests routed" } } }));
}

function evidence(r) {
  const parts = [];
  if (r.waiting_max !== null && r.waiting_max !== undefined) parts.push(`${r.waiting_max} waiting`);
  if (r.swapped_max) parts.push(`${r.swapped_max} swapped out`);
  if (r.kv_transfer_ns !== null && r.kv_transfer_ns !== undefined) parts.push(`KV transfer ${dur(r.kv_transfer_ns)}`);
  return parts.join(", ") || "–";
}

function renderSlowest(list, medians) {
  const box = clear($("#sv-slowest"));
  if (!list.length) {
    box.append(el("p", { class: "v-note" }, "No finished request in the range."));
    return;
  }
  const head = el("tr", {}, ...["request", "why", "end-to-end", "queue", "prefill", "decode", "TPOT", "output tokens",
    "meanwhile"].map((h) => el("th", {}, h)));
  const body = list.map((r) => el("tr", { class: "sv-slow-row" }, el("td", {}, r.rid),
    el("td", { class: `sv-reason ${r.reason}` }, REASONS[r.reason] || r.reason), el("td", {}, dur(r.e2e_ns)),
    el("td", {}, dur(r.queue_ns)), el("td", {}, dur(r.prefill_ns)), el("td", {}, dur(r.decode_ns)),
    el("td", {}, dur(r.tpot_ns)), el("td", {}, r.output_tokens ?? "–"), el("td", { class: "sv-evidence" }, evidence(r))));
  box.append(el("p", { class: "v-note" }, `Medians over the range: queue ${dur(medians.queue_ns)}, prefill `
    + `${dur(medians.prefill_ns)}, decode ${dur(medians.decode_ns)}. "Why" is the phase furthest above its median, `
    + "or preempted (prefilled again after decoding). \"Meanwhile\": the longest waiting queue while it waited and the "
    + "most requests swapped out while it ran (request_status), its KV-cache transfer (PD disaggregation)."),
  el("table", { class: "grid", id: "sv-slowest-table" }, el("thead", {}, head), el("tbody", {}, ...body)));
}

async function load() {
  const seq = ++state.seq;
  const params = rangeParams();
  const [s, r, b, k, f, q, p, c] = await Promise.all(["summary", "requests", "batches", "kvcache", "forward",
    "queues", "pd", "coordinator"].map((part) => apiGet(`${apiBase}/${part}`, params)).concat(plotlyReady()));
  // (plotly.js has run by now: the charts below are drawn at once, so hook() finds them)
  if (seq !== state.seq) return;
  if (!s.has_serving) {
    $("#sv-none").hidden = false;
    $("#sv-summary").textContent = "no serving data";
    return;
  }
  $("#sv-body").hidden = false;
  state.origin = s.origin_ns;
  renderStats(s);
  renderRequests(r);
  renderBatches(b);
  renderKv(k);
  renderForward(f);
  renderQueues(q);
  renderPd(p, c);
  renderCurves(s.curves);
  renderSlowest(s.slowest, s.medians);
  $("#sv-reset").hidden = !state.range;
  $("#sv-range-note").textContent = state.range
    ? `range ${num(state.range[0] / 1e6, 3)} – ${num(state.range[1] / 1e6, 3)} ms` : "";
  document.body.dataset.servingLoaded = String(seq);
  if (seq === 1) hook();
}

function setRange(loMs, hiMs) {
  state.range = loMs === null ? null : [Math.round(loMs * 1e6), Math.round(hiMs * 1e6)];
  state.selected = null;
  clear($("#sv-batch-detail"));
  load();
}

function hook() {
  for (const id of TIME_CHARTS) {
    const node = $(`#${id}`);
    if (typeof node.on !== "function") continue; // a panel this run has no data for was never plotted
    node.on("plotly_relayout", (ev) => {
      if (ev["xaxis.autorange"]) setRange(null, null);
      else if (ev["xaxis.range[0]"] !== undefined) setRange(Number(ev["xaxis.range[0]"]), Number(ev["xaxis.range[1]"]));
    });
  }
  $("#sv-batches").on("plotly_click", (ev) => {
    const i = ev.points?.[0]?.customdata;
    if (i === undefined) return;
    state.selected = { rids: state.batches.rows.rids[i] };
    renderBatchDetail(i);
    apiGet(`${apiBase}/requests`, rangeParams()).then(renderRequests);
  });
  $("#sv-reset").addEventListener("click", () => setRange(null, null));
}


load().catch((err) => {
  $("#sv-summary").textContent = `could not load: ${err.message}`;
});
