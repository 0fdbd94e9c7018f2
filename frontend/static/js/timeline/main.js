// Timeline page entry: builds the Timeline on #timeline, wires input, and exposes window.__timeline, a small
// debug/automation surface (lane positions, drawn arrows, view, geometry, markers, offsets, System View state)
// used by the browser tests.

import { attachExport } from "./export.js";
import { DEPTH_PX, FOLDED_ROWS, SLICE_PX, TRACK_PAD_PX } from "./geometry.js";
import { rowTop } from "./hittest.js";
import { attachInput } from "./input.js";
import { Timeline } from "./timeline.js";

const root = document.getElementById("timeline");

if (root) {
  const tl = new Timeline(root);
  attachExport(root, document.getElementById("tl-export"));
  window.__timeline = {
    ready: false,
    error: null,
    geometry: { DEPTH_PX, SLICE_PX, TRACK_PAD_PX, FOLDED_ROWS },
    get view() {
      return { start_ns: root.dataset.viewStartNs, end_ns: root.dataset.viewEndNs };
    },
    /** Rows as drawn: title, kind, track id, top/height in page px, visible; deep tracks: depths, folded; overview:
     * a lane of a rank shown from its overview. */
    lanes() {
      const cRect = tl.canvas.getBoundingClientRect();
      return [...tl.layout.pinned, ...tl.layout.scroll].map((row) => {
        const top = cRect.top + rowTop(tl.scene(), row);
        const visible = top + row.h > cRect.top + (row.pinnedArea ? 0 : tl.pinnedH) && top < cRect.bottom;
        return { id: row.node.id, type: row.node.type, title: row.title, kind: row.node.kind || row.node.type,
          rank: row.node.rank, track_id: row.node.track ? row.node.track.track_id : null,
          collapsed: !!row.node.collapsed, pinned: row.pinnedArea, top, height: row.h, visible,
          depths: row.node.depths ?? null, folded: !!row.node.folded,
          overview: row.node.track ? tl.inOverview(row.node.track.track_id) : false };
      });
    },
    /** Arrows of the last frame, in page px: the ends (x1, y1) → (x2, y2); a clipped one (clip: the end off the
     * side, "src" or "dst") is drawn as a stub from (px, py) to its chevron at (sx, sy). */
    get arrows() {
      const r = tl.canvas.getBoundingClientRect();
      return tl.arrows.map((a) => ({ ...a, x1: a.x1 + r.left, y1: a.y1 + r.top, x2: a.x2 + r.left, y2: a.y2 + r.top,
        ...(a.clip ? { px: a.px + r.left, py: a.py + r.top, sx: a.sx + r.left, sy: a.sy + r.top } : {}) }));
    },
    get canvasRect() {
      const r = tl.canvas.getBoundingClientRect();
      return { left: r.left, top: r.top, width: r.width, height: r.height };
    },
    get selected() {
      return tl.selection ? tl.selection.slice_id : null;
    },
    get stats() {
      return { ...tl.renderer.stats, pending: tl.data ? tl.data.pendingCount() : 0 };
    },
    pending: () => (tl.data ? tl.data.pendingCount() : 0),
    revealTrack: (trackId) => {
      tl.revealTrack(trackId);
      tl.draw();
      return true;
    },
    /** Page x of an absolute epoch-ns time (decimal string) in the current view. */
    xOf: (absNs) => tl.canvas.getBoundingClientRect().left + tl.xOf(tl.rel(absNs)),
    setView: (startAbs, endAbs) => tl.setView(tl.rel(startAbs), tl.rel(endAbs)),
    select: (sliceId) => tl.select(sliceId, { reveal: true }),
    enableFlows: (cat, on = true) => {
      const box = root.querySelector(`#tl-flows-pop input[data-cat="${CSS.escape(cat)}"]`);
      if (box && box.checked !== on) box.click();
    },
    redraw: () => tl.draw(),
    /** Markers as stored: {id, name, color, start_ns, end_ns (null for a point)}, absolute ns strings. */
    get markers() {
      return tl.markers ? tl.markers.list.map((m) => ({ id: m.id, name: m.name, color: m.color,
        start_ns: tl.abs(m.start), end_ns: m.end === null ? null : tl.abs(m.end) })) : [];
    },
    /** {rank: offset ns} of the ranks drawn shifted. */
    get offsets() {
      return Object.fromEntries(tl.offsets.entries());
    },
    get hidden() {
      return [...tl.hidden];
    },
    get range() {
      return tl.range ? { start_ns: tl.abs(tl.range.start), end_ns: tl.abs(tl.range.end) } : null;
    },
    setRange: (startAbs, endAbs) => tl.setRange(tl.rel(startAbs), tl.rel(endAbs)),
    /** The analysis overlays: toggles, what the last frame drew, the loaded wait chains and critical path. */
    get insights() {
      return tl.insights ? tl.insights.debug() : null;
    },
    get systemView() {
      const sv = tl.panel.systemView;
      return { rank: sv.rank, page: sv.page, scope: sv.scope ? { start_ns: tl.abs(sv.scope.start),
        end_ns: tl.abs(sv.scope.end) } : null, selected: sv.selected };
    },
  };
  tl.init()
    .then(() => {
      attachInput(tl);
      window.__timeline.ready = true;
      root.dataset.ready = "true";
    })
    .catch((err) => {
      console.error(err);
      window.__timeline.error = String(err && err.message ? err.message : err);
      const status = root.querySelector("#tl-status");
      if (status) status.textContent = `Could not load the timeline: ${window.__timeline.error}`;
    });
}
