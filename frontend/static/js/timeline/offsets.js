// Per-rank time offsets, for ranks whose clocks differ: a rank's lanes are drawn at raw time + its offset (ns).
// Kept in the URL (?offsets=1:-2127370,3:500, so a copied link shows the same alignment) and, per run, in
// localStorage (a later visit without the parameter gets them back).

import { parseDuration } from "../common/time.js";
import { urlParam } from "../common/urls.js";

const URL_PARAM = "offsets";
const MAX_ABS_NS = 1e15;  // ±11.5 days: far beyond any clock skew, and exact as a Number

export class Offsets {
  constructor(runId) {
    this.key = `ascendscope.timeline.offsets.${runId}`;
    this.map = new Map();
  }

  get(rank) {
    return this.map.get(rank) || 0;
  }

  /** Set a rank's offset (0 removes it); returns whether it changed. */
  set(rank, ns) {
    const v = Math.max(-MAX_ABS_NS, Math.min(MAX_ABS_NS, Math.round(ns || 0)));
    if (this.get(rank) === v) return false;
    if (v) this.map.set(rank, v);
    else this.map.delete(rank);
    this.save();
    return true;
  }

  clear() {
    if (!this.map.size) return false;
    this.map.clear();
    this.save();
    return true;
  }

  get size() {
    return this.map.size;
  }

  /** [[rank, ns]] of the ranks drawn shifted. */
  entries() {
    return [...this.map.entries()].sort((a, b) => a[0] - b[0]);
  }

  /** The smallest and largest offset (0 included): how far lanes reach beyond the run's own bounds. */
  extent() {
    const v = [0, ...this.map.values()];
    return [Math.min(...v), Math.max(...v)];
  }

  /** From the page's URL when it names offsets, else from what this browser kept for the run. */
  load() {
    let text = urlParam(URL_PARAM);
    if (text === null) {
      try {
        text = localStorage.getItem(this.key);
      } catch {
        text = null;  // storage off: no offsets
      }
    }
    this.map = parse(text || "");
  }

  save() {
    try {
      if (this.map.size) localStorage.setItem(this.key, this.toString());
      else localStorage.removeItem(this.key);
    } catch {
      // storage off or full: the URL still carries them
    }
  }

  /** The URL parameter, for urls.replaceParams (null removes it). */
  urlParams() {
    return { [URL_PARAM]: this.map.size ? this.toString() : null };
  }

  toString() {
    return this.entries().map(([r, v]) => `${r}:${v}`).join(",");
  }
}

function parse(text) {
  const map = new Map();
  for (const part of text.split(",")) {
    const m = /^\s*(-?\d{1,9})\s*:\s*(-?\d{1,16})\s*$/.exec(part);
    if (!m) continue;  // a hand-edited or stale value: that rank is simply not shifted
    const v = Number(m[2]);
    if (v && Math.abs(v) <= MAX_ABS_NS) map.set(Number(m[1]), v);
  }
  return map;
}

/** An offset typed by the user ("1500", "-2.5 ms": time.parseDuration) → ns, or null when it is none or too large. */
export function parseOffset(text) {
  const v = parseDuration(text);
  return v !== null && Math.abs(v) <= MAX_ABS_NS ? v : null;
}
