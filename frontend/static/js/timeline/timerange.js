// The selected time range (timeline.js installs these methods on the controller): setting and clearing it, its
// statistics and instances from the server (raw times, with the rank filter and the ranks' offsets), sending it or
// a slice's row to System View, zooming or fitting the view, and the "keep as region marker" button.

import { apiGet, isAbort } from "../common/api.js";
import { pyQuote, runApi } from "../common/urls.js";

const COMM_SUFFIX = /(_\d+)+$/;     // "hcom_allReduce__586_0_1" is an "hcom_allReduce_" (as the server groups)
const SYSTEM_VIEW_PAGE = { overlap: "overall", python: "python", cann: "cann", hardware: "hardware",
  communication: "communication" };

export const rangeMethods = {
  setRange(a, b) {
    const start = Math.min(a, b);
    const end = Math.max(a, b);
    if (end - start < 1) { this.clearRange(); return; }
    this.range = { start, end };
    this.requestDraw();
    this.loadRangeStats();
  },

  clearRange() {
    this.range = null;
    if (this._rangeCtl) this._rangeCtl.abort();
    this.panel.clearRange();
    this.requestDraw();
  },

  /** Parameters of the range queries: the range (drawn time), the rank filter's tracks, the ranks' offsets. */
  rangeParams(range) {
    const trackIds = this.rankFilter === null ? [] : [...this.tracks.values()]
      .filter((t) => t.rank === this.rankFilter && t.kind !== "counter").map((t) => t.track_id);
    const offs = this.offsets.entries();
    return { start_ns: this.abs(range.start), end_ns: this.abs(range.end), track_id: trackIds,
      offset_rank: offs.map(([r]) => r), offset_ns: offs.map(([, v]) => v) };
  },

  async loadRangeStats(showPage = true) {
    if (this._rangeCtl) this._rangeCtl.abort();
    const ctl = new AbortController();
    this._rangeCtl = ctl;
    const range = { ...this.range };
    if (showPage) this.panel.show("range");
    this.panel.showRange(null, range, true);
    try {
      const r = await apiGet(runApi(this.runId, "/timeline/range_stats"), this.rangeParams(range),
        { signal: ctl.signal });
      if (this._rangeCtl === ctl) this.panel.showRange(r, range, false);
    } catch (err) {
      if (!isAbort(err)) this.panel.showError(err.message);
    }
  },

  rangeInstances(name, offset, limit) {
    if (!this.range) return Promise.reject(new Error("no range selected"));
    return apiGet(runApi(this.runId, "/timeline/range_instances"),
      { ...this.rangeParams(this.range), name, offset, limit });
  },

  /** Send the selected range to System View (for `rank`, or the lane's, or the first shown). */
  timeRangeAnalysis(rank = null) {
    if (!this.range) return;
    const sv = this.panel.systemView;
    sv.setScope({ ...this.range });
    sv.setRank(rank ?? this.rankFilter ?? sv.rank);
    this.panel.show("sysview");
  },

  /** System View on the row a slice belongs to (its rank, its lane's page, its name). */
  showInSystemView(hit) {
    const track = this.tracks.get(hit.track_id);
    const page = track && SYSTEM_VIEW_PAGE[track.kind];
    if (!page) return;
    let key = hit.name;
    if (page === "overall") key = `overlap:${pyQuote(hit.name)}`;
    else if (page === "communication") key = hit.name.replace(COMM_SUFFIX, "");
    this.panel.show("sysview");
    this.panel.systemView.showRow(track.rank, page, key, page === "communication" ? key : hit.name);
  },

  canShowInSystemView(hit) {
    const track = hit && this.tracks.get(hit.track_id);
    return !!(track && SYSTEM_VIEW_PAGE[track.kind]);
  },

  zoomToRange() {
    if (this.range) this.setView(this.range.start, this.range.end);
  },

  /** The view on a slice (a little margin each side), on a lane's extent, or on the whole run. */
  fitToScreen(hit, node) {
    if (hit) {
      const pad = Math.max(hit.dur_ns * 0.05, 10);
      this.setView(hit.ts_ns - pad, hit.ts_ns + hit.dur_ns + pad);
      return;
    }
    const tracks = [];
    const collect = (n) => (n.type === "track" ? tracks.push(n.track) : n.children.forEach(collect));
    if (node) collect(node);
    const spans = tracks.filter((t) => t.min_ts_ns !== null && t.max_end_ns !== null)
      .map((t) => [t.min_ts_ns + this.offRank(t.rank), t.max_end_ns + this.offRank(t.rank)]);
    if (!spans.length) { this.resetView(); return; }
    const a = Math.min(...spans.map((x) => x[0]));
    const b = Math.max(...spans.map((x) => x[1]));
    const pad = (b - a) * 0.02;
    this.setView(a - pad, b + pad);
  },

  /** The "keep as region marker" button sits at the selected range's right edge in the ruler. */
  placeRangeButton() {
    const btn = this.$("tl-range-mark");
    const x = this.range ? this.xOf(this.range.end) : -1;
    btn.hidden = !(this.range && x >= 0 && x <= this.W);
    if (!btn.hidden) btn.style.left = `${this.$("tl-labels").offsetWidth + Math.min(x + 3, this.W - 20)}px`;
  },

  rangeFromSelection() {
    const s = this.selection;
    if (!s || s.pending || s.ts_ns === undefined) return;
    const end = s.ts_ns + Math.max(1, s.dur_ns);
    if (this.range && this.range.start === s.ts_ns && this.range.end === end) this.clearRange();
    else this.setRange(s.ts_ns, end);
  },
};
