// The Memory view's "Memory snapshot" sub-tab: a PyTorch / torch_npu _dump_snapshot pickle's allocator history
// (GET …/memory/snapshot/…). The Active Memory Timeline (memsnapchart.js) drives the rest: a click picks the time
// whose allocator state is shown (memsnapstate.js), a drag picks the range whose potential leaks are listed, a block
// opens its details; the OOMs are listed with their state (memsnapleaks.js). A run without a snapshot shows no
// sub-tabs; a run with only a snapshot opens on it. The sub-tab is kept in the URL (?memory=snapshot).

import { apiGet, isAbort, latest } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { formatBytes, formatCount } from "../common/format.js";
import { currentRank, onRankChange } from "../common/nav.js";
import { absNs, formatDuration } from "../common/time.js";
import { replaceParams, runPage, urlParam } from "../common/urls.js";
import { select } from "./controls.js";
import { formatX, SnapshotChart } from "./memsnapchart.js";
import { frameList, renderLeaks, renderOoms } from "./memsnapleaks.js";
import { renderState } from "./memsnapstate.js";
import { apiBase, markRanks, runId } from "./run.js";

const TAB_PARAM = "memory";
const DRAWN = 500;
const WINDOW_DELAY_MS = 120;
const state = { rank: currentRank(), device: null, ov: null, axis: "index", origin: null, chart: null, timer: null,
  profilerRanks: [] };

/** The ranks that have a memory snapshot (none until the sub-tab has loaded): memory.js marks the others. */
export function snapshotRanks() {
  return state.ov ? state.ov.snapshots.map((s) => s.rank) : [];
}

function snapApi(path = "") {
  return `${apiBase}/memory/snapshot${path}`;
}

/** The API's time parameters for x on this device's axis. */
function timeParams(name, x) {
  if (x === null || x === undefined) return {};
  return state.axis === "ns" ? { [`${name}_ns`]: absNs(x, state.origin) } : { [`${name}_idx`]: Math.floor(x) };
}

function base() {
  return { rank: state.ov?.rank ?? state.rank ?? undefined, device: state.device ?? undefined };
}

// ---------------------------------------------------------------- sub-tabs

function showTab(name) {
  for (const b of document.querySelectorAll("#mem-subtabs button")) b.classList.toggle("active", b.dataset.tab === name);
  $("#mem-profiler").hidden = name !== "profiler";
  $("#mem-snapshot").hidden = name !== "snapshot";
  replaceParams({ [TAB_PARAM]: name === "snapshot" ? "snapshot" : null });
  if (name === "snapshot") state.chart?.draw();
}

async function profilerHasData() {
  try {
    const ov = await apiGet(`${apiBase}/memory`, {});
    state.profilerRanks = ov.ranks.filter((r) => r.records || r.allocations).map((r) => r.rank);
    markRanks([...state.profilerRanks, ...snapshotRanks()]);  // a rank with either has data in this view
    return ov.ranks.some((r) => r.records || r.allocations || r.modules);
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------- loading

async function load() {
  let ov;
  try {
    ov = await apiGet(snapApi(), { rank: state.rank ?? undefined, device: state.device ?? undefined });
  } catch (err) {
    if (err.code === "no_snapshot" && state.rank !== null) {  // another rank has one
      const any = await apiGet(snapApi(), {}).catch(() => null);
      if (any) {
        clear($("#snap-filters")).append(el("span", { class: "v-note warn", id: "snap-no-rank" },
          `Rank ${state.rank} has no memory snapshot; ranks with one: ${any.snapshots.map((s) => s.rank).join(", ")}.`));
        return true;
      }
    }
    return false;
  }
  state.ov = ov;
  state.device = ov.device;
  state.axis = ov.axis;
  state.origin = ov.origin_ns;
  const dev = ov.devices.find((d) => d.device === ov.device);
  filters(ov);
  peakLine(ov, dev);
  state.chart.reset(ov.axis, dev.x_first - 1, dev.x_last + 1);
  state.chart.setMarks({ peak: { x: ov.peak.x, bytes: ov.peak.bytes }, range: null, pick: null });
  await Promise.all([loadWindow(), loadState(null, null), loadLeaks(null, null), loadOoms()]);
  return true;
}

function filters(ov) {
  const snap = ov.snapshots.find((s) => s.rank === ov.rank);
  const devices = ov.devices.map((d) => ({ value: d.device,
    label: `device ${d.device} · ${formatCount(d.entries)} entries · ${formatBytes(d.reserved_at_dump)} reserved` }));
  const reset = el("button", { class: "btn", id: "snap-reset", type: "button" }, "Reset zoom");
  reset.addEventListener("click", () => { if (state.chart.view.reset()) onWindow(...state.chart.window); });
  clear($("#snap-filters")).append(
    el("span", { class: "v-field-label" }, "Snapshot ", el("b", {}, snap.file), ` · rank ${ov.rank}` +
      (snap.flavour ? ` · ${snap.flavour === "npu" ? "torch_npu" : "CUDA"}` : "")),
    select(devices, ov.device, (v) => { state.device = Number(v); load(); }, { id: "snap-device" }),
    el("span", { class: "v-note", id: "snap-clock" }, ov.clock),
    el("span", { class: "v-spacer" }), reset);
  const warn = clear($("#snap-warnings"));
  for (const w of ov.warnings) warn.append(el("div", { class: "v-note warn" }, `${w.file}: ${w.message}`));
}

function peakLine(ov, dev) {
  const host = clear($("#snap-peak"));
  host.append("At the dump: reserved ", el("b", {}, formatBytes(dev.reserved_at_dump)), " · allocated ",
    el("b", {}, formatBytes(dev.allocated_at_dump)), " · active ", el("b", {}, formatBytes(dev.active_at_dump)),
    " · peak active ", el("b", { id: "snap-peak-bytes" }, formatBytes(ov.peak.bytes)),
    ov.peak.idx === null ? " before the first entry" : ` at ${formatX(ov.peak.x, ov.axis)}`,
    ` · ${formatCount(dev.blocks)} blocks (${formatCount(dev.blocks_before_trace)} allocated before the trace began)`);
  if (ov.peak.top.length) {
    const top = ov.peak.top.slice(0, 5);
    const seen = new Map();
    for (const t of top) seen.set(t.label, (seen.get(t.label) || 0) + 1);
    // stacks that end in the same frame are told apart by their id
    const name = (t) => (t.label ? `${t.label}${seen.get(t.label) > 1 ? ` (stack ${t.stack_id})` : ""}` : "(no stack)");
    host.append(el("div", { class: "v-note", id: "snap-peak-top" }, "Live at the peak: ",
      top.map((t, i) => `${i ? " · " : ""}${name(t)} ${formatBytes(t.bytes)}` + (t.blocks > 1 ? ` (${t.blocks} blocks)` : ""))));
  }
  if (dev.workspace_bytes) {
    host.append(el("div", { class: "v-note" }, `torch_npu workspace pools: ${formatBytes(dev.workspace_bytes)} reserved ` +
      "(listed at the head of the trace as they were at the dump)"));
  }
  if (dev.anomalies) host.append(el("div", { class: "v-note warn" }, `The trace and the dump disagree: ${dev.anomalies}`));
}

function onWindow() {
  clearTimeout(state.timer);
  state.timer = setTimeout(loadWindow, WINDOW_DELAY_MS);
}

async function loadWindow() {
  const [lo, hi] = state.chart.window;
  const params = { ...base(), ...timeParams("start", lo), ...timeParams("end", hi) };
  try {
    const [curve, alloc] = await Promise.all([
      latest("snap-curve", snapApi("/curve"), { ...params, buckets: Math.min(8000, state.chart.plotWidth) }),
      latest("snap-alloc", snapApi("/allocations"), { ...params, limit: DRAWN })]);
    state.chart.setData(curve, alloc);
    $("#snap-note").textContent = `${formatCount(curve.entries)} entries in view · the ${alloc.blocks.length} largest ` +
      "live blocks stacked, the smaller ones in grey · reserved in orange" +
      (curve.source === "entries" ? "" : ` · ${curve.source}`);
  } catch (err) {
    if (!isAbort(err)) $("#snap-note").textContent = `Could not load: ${err.message}`;
  }
}

async function loadState(x, idx) {
  const params = { ...base(), ...(idx !== null && idx !== undefined ? { at_idx: idx } : timeParams("at", x)) };
  const st = await apiGet(snapApi("/state"), params);
  renderState($("#snap-state"), st, state.axis, openBlock);
  $("#snap-state-note").textContent = x === null && idx === null ? "at the dump (click the timeline for another time)"
    : "click the timeline for another time";
  const link = clear($("#snap-state-link"));
  const snap = state.ov.snapshots.find((s) => s.rank === state.ov.rank);
  if (state.axis === "ns" && snap.has_trace && st.x !== null) {  // the run's clock: the timeline opens there
    const at = absNs(st.x, state.origin);
    link.append(el("a", { href: runPage(runId, "timeline", { rank: state.ov.rank,
      start_ns: absNs(st.x - 500_000, state.origin), end_ns: absNs(st.x + 500_000, state.origin) }),
    id: "snap-open-timeline", dataset: { atNs: at } }, "Open the timeline at this time"));
  }
}

async function loadLeaks(lo, hi) {
  const params = { ...base(), ...timeParams("start", lo), ...timeParams("end", hi) };
  const out = await apiGet(snapApi("/leaks"), params);
  renderLeaks($("#snap-leaks"), out, state.axis, openBlock);
}

async function loadOoms() {
  const out = await apiGet(snapApi("/ooms"), base());
  state.chart.setMarks({ ooms: out.ooms.map((o) => ({ x: o.x })) });
  renderOoms($("#snap-ooms"), out, (x, idx) => {
    state.chart.setMarks({ pick: x });
    loadState(null, idx);
    $("#snap-state-section").scrollIntoView({ block: "start" });
  });
}

async function openBlock(b) {
  const host = clear($("#snap-block"));
  const d = await apiGet(snapApi("/block"), { ...base(), block_id: b.block_id });
  host.dataset.blockId = String(d.block_id);
  const life = d.before_trace ? "allocated before the trace began" : `allocated at ${formatX(d.x0, state.axis)} (entry #${formatCount(d.alloc_idx)})`;
  const end = d.live_at_dump ? "still live at the dump" + (d.state_at_dump === "active_pending_free" ? ", waiting for a free" : "")
    : `freed at ${formatX(d.x1, state.axis)} (entry #${formatCount(d.free_idx)})`;
  const zoom = el("button", { class: "btn small", type: "button" }, "Zoom to its life");
  zoom.addEventListener("click", () => {
    const [lo, hi] = state.chart.window;
    const a = d.x0 ?? lo;
    const z = d.x1 ?? hi;
    const pad = Math.max(1, (z - a) * 0.1);
    state.chart.zoomTo(a - pad, z + pad);
  });
  host.append(el("div", { class: "snap-block-head" },
    el("b", {}, `Block 0x${d.addr.toString(16)}`), ` · ${formatBytes(d.requested_size)} requested (${formatCount(d.requested_size)} B)`,
    d.size !== null ? ` · ${formatBytes(d.size)} block` : "", ` · stream ${d.stream ?? "–"} · ${life}, ${end}`,
    d.lifetime !== null && d.lifetime !== undefined
      ? ` · lifetime ${state.axis === "ns" ? formatDuration(d.lifetime) : `${formatCount(d.lifetime)} entries`}` : "",
    " ", zoom),
  el("div", { class: "snap-block-stacks" }, el("div", {}, el("h4", {}, "Allocation stack"), frameList(d.frames)),
    d.free_frames.length ? el("div", {}, el("h4", {}, "Free stack"), frameList(d.free_frames)) : null));
}

function blockTip(b) {
  const stack = state.chart.alloc?.stacks?.[String(b.stack_id)]?.label || "no stack recorded";
  const from = b.alloc_idx === null ? "before the trace" : formatX(b.x0, state.axis);
  const to = b.free_idx === null ? "the dump" : formatX(b.x1, state.axis);
  const life = b.alloc_idx !== null && b.free_idx !== null
    ? ` (${state.axis === "ns" ? formatDuration(b.x1 - b.x0) : `${formatCount(b.x1 - b.x0)} entries`})` : "";
  return `${formatBytes(b.requested_size)} (${formatCount(b.requested_size)} B) at 0x${b.addr.toString(16)}\n` +
    `live from ${from} to ${to}${life}\n${stack}\nclick for its stack`;
}

// ---------------------------------------------------------------- page

async function init() {
  const host = $("#mem-snapshot");
  if (!host) return;
  state.chart = new SnapshotChart($("#snap-chart"), {
    onWindow,
    onPick: (x) => { state.chart.setMarks({ pick: x }); loadState(x, null); },
    onRange: (lo, hi) => loadLeaks(lo, hi),
    onBlock: (b) => openBlock(b),
    tip: blockTip,
  });
  if (!(await load())) return;  // no snapshot in this run: the profiler's memory only
  const tabs = $("#mem-subtabs");
  tabs.hidden = false;
  for (const b of tabs.querySelectorAll("button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  const wanted = urlParam(TAB_PARAM);
  showTab(wanted === "snapshot" || !(await profilerHasData()) ? "snapshot" : "profiler");
}

onRankChange((rank) => { state.rank = rank; state.device = null; if (state.ov) load(); });
init();
