// The memory snapshot's allocator state at a time: the totals and fragmentation, a table per pool and stream, and
// the segments drawn as bars (longest first), each block at its address inside its segment: allocated in its
// stack's colour, waiting for a free (active_pending_free) hatched red, free space empty. Hover a block for what it
// is; a click on one opens it like a block of the timeline.

import { clear, el } from "../common/dom.js";
import { formatBytes, formatCount, pct } from "../common/format.js";
import { formatX, stackColor } from "./memsnapchart.js";

const ROW_PX = 16;
const MAX_ROWS = 160;
const LABEL_PX = 190;

function statTable(rows, columns) {
  return el("table", { class: "grid v-table snap-pools" },
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : null }, c.label)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, columns.map((c) => el("td", { class: c.num ? "num" : null },
      c.render ? c.render(r) : r[c.key]))))));
}

const POOL_COLUMNS = [
  { label: "Pool", key: "pool" },
  { label: "Stream", key: "stream", render: (r) => (r.stream === null ? "–" : String(r.stream)) },
  { label: "Segments", num: true, render: (r) => formatCount(r.segments) },
  { label: "Reserved", num: true, render: (r) => formatBytes(r.reserved) },
  { label: "Allocated", num: true, render: (r) => formatBytes(r.allocated) },
  { label: "Active", num: true, render: (r) => formatBytes(r.active) },
  { label: "Free", num: true, render: (r) => formatBytes(r.free) },
  { label: "Largest free block", num: true, render: (r) => formatBytes(r.largest_free) },
];

/** Fill `host` with the state answer `st` (GET …/memory/snapshot/state); `onBlock(block)` opens a block. */
export function renderState(host, st, axis, onBlock) {
  clear(host);
  const t = st.totals;
  host.dataset.idx = String(st.idx);
  host.dataset.reserved = String(t.reserved);
  host.dataset.allocated = String(t.allocated);
  host.dataset.active = String(t.active);
  const when = st.idx < 0 ? "before the first entry" : `after entry #${formatCount(st.idx)}` +
    (axis === "ns" && st.x !== null ? ` (${formatX(st.x, axis)})` : "");
  host.append(el("div", { class: "v-summary-line", id: "snap-state-totals" },
    `State ${when}: reserved `, el("b", {}, formatBytes(t.reserved)), " · allocated ", el("b", {}, formatBytes(t.allocated)),
    " · active ", el("b", {}, formatBytes(t.active)), " · free ", el("b", {}, formatBytes(t.free)),
    " · largest free block ", el("b", {}, formatBytes(t.largest_free)),
    " · fragmentation ", el("b", { title: "1 − largest free block / free" }, t.fragmentation === null ? "–" : pct(t.fragmentation)),
    ` · ${formatCount(t.blocks)} blocks (${formatCount(t.pending_free)} waiting for a free) in ${formatCount(t.segments)} segments`));
  if (t.outside_segments) {
    host.append(el("div", { class: "v-note warn" }, `${t.outside_segments} blocks lie outside every segment (the trace and the dump disagree)`));
  }
  host.append(el("div", { class: "v-note" }, "Sizes are the blocks' own when the dump lists them, else their requested " +
    "bytes (a block freed within the trace records no other size)."));
  host.append(statTable(st.pools, POOL_COLUMNS));
  host.append(segmentMap(st, onBlock));
}

function segmentMap(st, onBlock) {
  const segs = st.segments.map((s, i) => ({ ...s, index: i })).sort((a, b) => b.reserved - a.reserved);
  const shown = segs.slice(0, MAX_ROWS);
  const wrap = el("div", { class: "snap-segmap" });
  const canvas = el("canvas", { class: "snap-segcanvas", id: "snap-segments" });
  const tip = el("div", { class: "snap-tip", hidden: true });
  wrap.append(canvas, tip);
  if (segs.length > shown.length) wrap.append(el("div", { class: "v-note" }, `the ${shown.length} largest of ${segs.length} segments`));
  if (st.truncated) wrap.append(el("div", { class: "v-note" }, "more blocks than are drawn: the totals above count them all"));
  const blocks = new Map();
  for (const b of st.blocks) {
    if (!blocks.has(b.segment)) blocks.set(b.segment, []);
    blocks.get(b.segment).push(b);
  }
  const maxSize = Math.max(1, ...shown.map((s) => s.reserved));
  const draw = () => {
    const w = Math.max(300, wrap.clientWidth || 900);
    const h = shown.length * ROW_PX + 4;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.font = "11px sans-serif";
    const scale = (w - LABEL_PX - 8) / maxSize;
    shown.forEach((s, row) => {
      const y = row * ROW_PX + 2;
      g.fillStyle = "#9aa0ab";
      const kind = s.is_workspace ? "workspace" : s.is_expandable ? "expandable" : s.segment_type || "segment";
      g.fillText(`${kind} ${formatBytes(s.reserved)}`, 2, y + 11);
      g.strokeStyle = "#5a606b";
      g.strokeRect(LABEL_PX + 0.5, y + 0.5, Math.max(2, s.reserved * scale), ROW_PX - 3);
      for (const b of blocks.get(s.index) || []) {
        const x = LABEL_PX + (b.addr - s.address) * scale;
        g.fillStyle = b.state === "active_pending_free" ? "#d9453b" : stackColor(b.stack_id);
        g.fillRect(x, y + 1, Math.max(1, b.bytes * scale), ROW_PX - 4);
      }
    });
    canvas.dataset.rows = String(shown.length);
  };
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    const px = e.clientX - r.left;
    const s = shown[Math.floor((e.clientY - r.top - 2) / ROW_PX)];
    if (!s || px < LABEL_PX) return [s, null];
    const w = Math.max(300, wrap.clientWidth || 900);
    const addr = s.address + (px - LABEL_PX) / ((w - LABEL_PX - 8) / maxSize);
    return [s, (blocks.get(s.index) || []).find((b) => b.addr <= addr && addr < b.addr + b.bytes) || null];
  };
  canvas.addEventListener("mousemove", (e) => {
    const [s, b] = at(e);
    if (!s) { tip.hidden = true; return; }
    tip.textContent = b
      ? `${b.state === "active_pending_free" ? "waiting for a free" : "allocated"} ${formatBytes(b.bytes)} ` +
        `(requested ${formatCount(b.requested_size)} B) at 0x${b.addr.toString(16)}${b.before_trace ? "\nallocated before the trace began" : ""}` +
        `\n${st.stacks[String(b.stack_id)]?.label || "no stack recorded"}`
      : `segment 0x${s.address.toString(16)}: ${formatBytes(s.reserved)} reserved, ${formatBytes(s.active)} active, ` +
        `${formatBytes(s.free)} free (largest ${formatBytes(s.largest_free)}), stream ${s.stream ?? "–"}, ` +
        `${s.pieces} piece(s)`;
    tip.hidden = false;
    const r = canvas.getBoundingClientRect();
    tip.style.left = `${Math.min(e.clientX - r.left + 12, r.width - 260)}px`;
    tip.style.top = `${e.clientY - r.top + 8}px`;
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
  canvas.addEventListener("click", (e) => {
    const [, b] = at(e);
    if (b) onBlock(b);
  });
  requestAnimationFrame(draw);
  return wrap;
}
