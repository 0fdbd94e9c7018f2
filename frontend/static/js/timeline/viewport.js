// The visible time window, in ns relative to the run origin (plain numbers: exact below 2^53 ns ≈ 104 days),
// with an undo stack. Absolute epoch ns only exist at the edges (URL, DOM attributes, API) as BigInt/strings.

const MIN_SPAN_NS = 20;
const UNDO_DEPTH = 100;
const COALESCE_MS = 450;

export class Viewport {
  constructor(runStart, runEnd) {
    this.runStart = runStart;
    this.runEnd = Math.max(runEnd, runStart + MIN_SPAN_NS);
    this.start = this.runStart;
    this.end = this.runEnd;
    this.history = [];
    this._lastPush = { time: 0, gesture: null };
  }

  get span() {
    return this.end - this.start;
  }

  /** New limits (ranks drawn with an offset reach beyond the run); the view stays where it is. */
  setBounds(runStart, runEnd) {
    this.runStart = runStart;
    this.runEnd = Math.max(runEnd, runStart + MIN_SPAN_NS);
  }

  /**
   * Move to [start, end) clamped to the run. record: "push" adds an undo step, "coalesce" adds one only if the
   * same gesture did not add one in the last moment (wheel, drag, key repeat), "none" adds nothing.
   */
  set(start, end, { record = "push", gesture = null } = {}) {
    // whole ns: the edges leave as exact integers, and a pan keeps the span exactly
    let span = Math.max(MIN_SPAN_NS, Math.round(end - start));
    start = Math.round(start);
    const full = this.runEnd - this.runStart;
    if (span >= full) {
      start = this.runStart;
      span = full;
    } else {
      start = Math.min(Math.max(start, this.runStart), this.runEnd - span);
    }
    const next = [start, start + span];
    if (next[0] === this.start && next[1] === this.end) return false;
    const now = performance.now();
    const coalesced = record === "coalesce" && this._lastPush.gesture === gesture && now - this._lastPush.time < COALESCE_MS;
    if (record === "push" || (record === "coalesce" && !coalesced)) {
      this.history.push([this.start, this.end]);
      if (this.history.length > UNDO_DEPTH) this.history.shift();
    }
    if (record !== "none") this._lastPush = { time: now, gesture: record === "push" ? null : gesture };
    [this.start, this.end] = next;
    return true;
  }

  zoomAt(factor, anchor, opts) {
    const a = Math.min(Math.max(anchor, this.start), this.end);
    return this.set(a - (a - this.start) * factor, a + (this.end - a) * factor, opts);
  }

  pan(deltaNs, opts) {
    return this.set(this.start + deltaNs, this.end + deltaNs, opts);
  }

  reset(opts) {
    return this.set(this.runStart, this.runEnd, opts);
  }

  undo() {
    const prev = this.history.pop();
    if (!prev) return false;
    [this.start, this.end] = prev;
    this._lastPush = { time: 0, gesture: null };
    return true;
  }
}
