// The selected slice (timeline.js installs these methods on the controller): selecting one (its details and flows
// from the server, shown in the panel), clearing it, bringing a slice into view (expanding, unfolding, scrolling
// and panning or zooming to it), and following a flow arrow to its other end.

import { apiGet } from "../common/api.js";
import { runApi } from "../common/urls.js";
import { DEPTH_PX, HEADER_PX, TRACK_PAD_PX } from "./geometry.js";
import { shownDepths } from "./lanes.js";

const MIN_REVEAL_PX = 40;          // a slice we jump to is zoomed to at least this width
const MIN_REVEAL_SPAN_NS = 2000;

export const selectionMethods = {
  /** Select a slice (details in Slice Detail, unless keepPanel: a list in the panel jumped here, keep showing it). */
  async select(sliceId, { reveal = false, zoom = false, hint = null, keepPanel = false } = {}) {
    const token = ++this._detailToken;
    if (hint) this.selection = { slice_id: sliceId, track_id: hint.track_id, ts_ns: hint.ts_ns, dur_ns: hint.dur_ns, depth: hint.depth };
    else if (!this.selection || this.selection.slice_id !== sliceId) this.selection = { slice_id: sliceId, pending: true };
    this.selectedFlows = [];
    this.root.dataset.selectedSliceId = String(sliceId);
    if (!keepPanel) this.panel.show("detail");
    this.panel.showLoading(sliceId);
    if (hint && reveal) this.reveal(this.selection, zoom, reveal === "lanes");
    this.requestDraw();
    this.scheduleUrl();
    let d;
    try {
      d = await apiGet(runApi(this.runId, `/timeline/slices/${sliceId}`));
    } catch (err) {
      if (token === this._detailToken) this.panel.showError(`Could not load slice ${sliceId}: ${err.message}`);
      return;
    }
    if (token !== this._detailToken) return;
    const shown = { ...d, raw_ts_ns: d.ts_ns, ts_ns: d.ts_ns + this.offTrack(d.track_id) };
    this.selection = shown;
    this.selectedFlows = d.flows.map((f) => ({
      flow_id: f.flow_id, cat: f.cat, src_track_id: f.src_track_id, src_ts_ns: f.src_ts_ns, src_slice_id: f.src_slice_id,
      src_depth: f.direction === "out" ? d.depth : f.other.depth ?? null,
      dst_track_id: f.dst_track_id, dst_ts_ns: f.dst_ts_ns, dst_slice_id: f.dst_slice_id,
      dst_depth: f.direction === "in" ? d.depth : f.other.depth ?? null,
    }));
    if (d.name_truncated) d.full_name_url = runApi(this.runId, `/timeline/slices/${d.slice_id}/name`);
    this.panel.showDetail(d, this.laneTitle(d.track_id));
    this.insights.sliceDetail(d, token);  // a collective's late arrival, when it has one
    if (reveal && (!hint || zoom)) this.reveal(shown, zoom, reveal === "lanes");
    this.requestDraw();
  },

  clearSelection() {
    this._detailToken++;
    this.selection = null;
    this.selectedFlows = [];
    this.root.dataset.selectedSliceId = "";
    this.panel.clearDetail();
    this.requestDraw();
    this.scheduleUrl();
  },

  laneTitle(trackId) {
    const t = this.tracks.get(trackId);
    if (!t) return "";
    return `Rank ${t.rank} / ${t.process_name} / ${t.kind === "counter" ? t.counter_name : t.thread_name}`;
  },

  /** Bring a slice into view: expand its lanes, scroll to its row, and pan (or zoom) to it (unless lanesOnly). */
  reveal(s, zoom, lanesOnly = false) {
    const node = this.byTrack.get(s.track_id);
    if (!node) return;
    if (this.rankFilter !== null && node.rank !== this.rankFilter) {
      const sel = document.getElementById("rank-select");
      if (sel) { sel.value = ""; sel.dispatchEvent(new Event("change")); }
      this.rankFilter = null;
    }
    let changed = false;
    for (let p = node.parent; p; p = p.parent) if (p.collapsed) { p.collapsed = false; changed = true; }
    if (node.folded && (s.depth || 0) >= shownDepths(node)) {
      node.folded = false;
      this.saveFolds();
      changed = true;
    }
    if (changed) this.relayout();
    const row = this.layout.rowOfTrack.get(s.track_id);
    if (row && !row.pinnedArea) {
      const y = row.y + TRACK_PAD_PX + (s.depth || 0) * DEPTH_PX;
      const viewH = this.H - this.pinnedH;
      if (y < this.scrollY + 10 || y + DEPTH_PX > this.scrollY + viewH - 10) {
        // the lane's top just below the top edge when the slice then shows, else the slice a third down
        const top = row.y - HEADER_PX;
        this.setScroll(y + DEPTH_PX < top + viewH * 0.6 ? top : y - viewH / 3);
      }
    }
    if (lanesOnly) return;
    const v = this.viewport;
    const dur = Math.max(s.dur_ns, 1);
    const mid = s.ts_ns + dur / 2;
    if (zoom) {
      const span = Math.max(dur * 3, MIN_REVEAL_SPAN_NS);
      this.setView(mid - span / 2, mid + span / 2);
    } else if (dur * this.k < MIN_REVEAL_PX) {
      const span = Math.max(dur * 5, MIN_REVEAL_SPAN_NS);
      this.setView(mid - span / 2, mid + span / 2);
    } else if (s.ts_ns < v.start || s.ts_ns + dur > v.end) {
      const span = Math.max(v.span, dur * 1.2);
      this.setView(mid - span / 2, mid + span / 2);
    }
  },

  revealTrack(trackId) {
    const node = this.byTrack.get(trackId);
    if (!node) return null;
    this.reveal({ track_id: trackId, ts_ns: this.viewport.start, dur_ns: this.viewport.span - 1, depth: 0 }, false);
    return this.layout.rowOfTrack.get(trackId) || null;
  },

  /** Follow an arrow to its other end: the end off the side for a clipped one, else the end away from the
   * selected slice (or from the click point). An end without a slice is centred in the view instead. */
  followArrow(a, x, y) {
    let end;
    if (a.clip) end = a.clip;
    else if (this.selection && a.src_slice_id === this.selection.slice_id) end = "dst";
    else if (this.selection && a.dst_slice_id === this.selection.slice_id) end = "src";
    else end = Math.hypot(x - a.x1, y - a.y1) > Math.hypot(x - a.x2, y - a.y2) ? "src" : "dst";
    const target = end === "src" ? a.src_slice_id : a.dst_slice_id;
    if (target !== null && target !== undefined) {
      this.select(target, { reveal: true });
      return;
    }
    const raw = end === "src" ? a.src_ts_ns : a.dst_ts_ns;
    const t = raw === null || raw === undefined ? null : raw + this.offTrack(end === "src" ? a.src_track_id : a.dst_track_id);
    if (t !== null) this.setView(t - this.viewport.span / 2, t + this.viewport.span / 2);
  },
};
