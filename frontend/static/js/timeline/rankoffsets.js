// Per-rank time offsets as the timeline applies them (timeline.js installs these methods on the controller): the
// offset of a rank or a track, setting and clearing one (the view's bounds, selection, URL, range statistics and
// System View follow), the inline editor on a rank's chip, and aligning a rank on a slice of another. The values
// themselves live in offsets.js.

import { apiGet } from "../common/api.js";
import { el } from "../common/dom.js";
import { runApi } from "../common/urls.js";
import { parseOffset } from "./offsets.js";

export const offsetMethods = {
  offRank(rank) { return this.offsets.get(rank); },

  offTrack(trackId) {
    const t = this.tracks.get(trackId);
    return t ? this.offsets.get(t.rank) : 0;
  },

  /** The view may pan as far as any shifted rank reaches. */
  updateBounds() {
    const [lo, hi] = this.offsets.extent();
    if (this.viewport) this.viewport.setBounds(this.baseStart + lo, this.baseEnd + hi);
  },

  setOffset(rank, ns) {
    if (!this.offsets.set(rank, ns)) return;
    this.offsetsChanged();
  },

  clearOffsets() {
    if (this.offsets.clear()) this.offsetsChanged();
  },

  offsetsChanged() {
    this.updateBounds();
    if (this.selection && this.selection.raw_ts_ns !== undefined) {
      this.selection = { ...this.selection, ts_ns: this.selection.raw_ts_ns + this.offTrack(this.selection.track_id) };
    }
    this.relayout();
    this.requestDraw();
    this.scheduleUrl();
    this.root.dataset.offsets = this.offsets.toString();
    if (this.range) this.loadRangeStats(false);
    if (this.panel.current === "sysview") this.panel.systemView.refresh();
  },

  /** An inline editor over a rank's offset chip: "1.5ms", "-200us", "1500" (ns); Enter applies, Esc cancels. */
  editOffset(rank, chip) {
    const input = el("input", { class: "tl-offset-input", value: this.offRank(rank) ? String(this.offRank(rank)) : "",
      placeholder: "e.g. -1.5ms", title: "Offset of this rank: ns, or with a unit (us, ms, s); empty for none" });
    chip.replaceWith(input);
    input.focus();
    let done = false;
    const finish = (apply) => {
      if (done) return;
      done = true;
      const ns = input.value.trim() === "" ? 0 : parseOffset(input.value);
      if (apply && ns !== null) this.setOffset(rank, ns);
      this.relayout();
    };
    input.addEventListener("keydown", (e) => {
      e.stopPropagation();
      if (e.key === "Enter") finish(true);
      else if (e.key === "Escape") finish(false);
    });
    input.addEventListener("blur", () => finish(true));
    input.addEventListener("click", (e) => e.stopPropagation());
  },

  /** Shift the slice's rank so that the slice starts where its match on the reference rank starts. */
  async alignOn(hit, refRank) {
    const r = await apiGet(runApi(this.runId, "/timeline/align"), { slice_id: hit.slice_id, rank: refRank });
    const rank = this.tracks.get(hit.track_id).rank;
    this.setOffset(rank, this.offRank(refRank) + r.shift_ns);
    return r;
  },

  get referenceRank() { return this.ranks.length ? this.ranks[0] : null; },

  /** Open the offset editor of a rank's header row (scrolled into view first). */
  editRankOffset(rank) {
    const row = this.layout.scroll.find((r) => r.node.id === `r${rank}`);
    if (row) this.setScroll(row.y);
    const chip = this.root.querySelector(`#tl-labels-inner .tl-lane.lane-rank[data-rank="${rank}"] .offset`);
    if (chip) this.editOffset(rank, chip);
  },
};
