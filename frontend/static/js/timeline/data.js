// Viewport data: slices and counters per track, and the flows of the ticked categories, fetched for the
// quantised window (geometry.quantize) and cached on that normalised key. Answers come as typed arrays
// (apiGetColumns: the server's compact binary columns), or as JSON lists; both read the same below.
//
// ensure() is called on every draw: tracks whose cached entry serves the view cost nothing; the others are batched
// into one request (several track_id values). Requests for a key the view has left are aborted. Until fresh data
// arrives, the newest entry that overlaps the view is drawn (no flicker while zooming).
//
// A rank drawn with a time offset (offsets.js) is fetched for the view shifted back by it, and its entries hold
// drawn times (raw + offset); an entry made under another offset is never drawn.

import { apiGetColumns, isAbort } from "../common/api.js";
import { colorFor } from "../common/colors.js";
import { absNs } from "../common/time.js";
import { runApi } from "../common/urls.js";
import { quantize } from "./geometry.js";

const MAX_ENTRIES_PER_TRACK = 4;
const MAX_TRACKS_PER_REQUEST = 4;  // small requests answer fast and load in parallel

export class DataStore {
  constructor(runId, originBig, onData, onStatus, offsetOf, slicesPerPx) {
    this.base = runApi(runId, "/timeline");
    this.slicesPerPx = slicesPerPx;  // the server's level-of-detail rule (slices_per_px of /timeline/tracks)
    this.origin = originBig;
    this.onData = onData;
    this.onStatus = onStatus || (() => {});
    this.offsetOf = offsetOf;  // track_id → its rank's offset (ns)
    this.slices = new Map();    // track_id → [entry]
    this.counters = new Map();  // track_id → [entry]
    this.inflight = new Map();  // "kind|key" → {controller, tracks:Set}
    this.flowEntry = null;
    this.flowInflight = null;
    this.errors = 0;
  }

  abs(rel) {
    return absNs(rel, this.origin);
  }

  /** The entry to draw for a slice track now (may be stale), or null. */
  sliceEntry(trackId, view) {
    return pick(this.slices.get(trackId), view, this.offsetOf(trackId));
  }

  counterEntry(trackId, view) {
    return pick(this.counters.get(trackId), view, this.offsetOf(trackId));
  }

  /** Make sure the visible tracks have data for the view; returns the number of requests in flight. */
  ensure(view, widthPx, sliceTracks, counterTracks) {
    const groups = new Map();  // offset → {slices, counters}
    const group = (off) => {
      if (!groups.has(off)) groups.set(off, { slices: [], counters: [] });
      return groups.get(off);
    };
    for (const id of sliceTracks) group(this.offsetOf(id)).slices.push(id);
    for (const id of counterTracks) group(this.offsetOf(id)).counters.push(id);
    const wanted = new Map();
    for (const [off, g] of groups) {
      const raw = { start: view.start - off, end: view.end - off };
      const q = quantize(raw.start, raw.end, widthPx, this.slicesPerPx);
      q.off = off;
      q.key = `${off}@${q.key}`;
      wanted.set(q.key, [q, raw, g]);
    }
    for (const [k, req] of this.inflight) {
      if (!wanted.has(req.qkey)) {
        req.controller.abort();
        this.inflight.delete(k);
      }
    }
    for (const [q, raw, g] of wanted.values()) {
      this._request("slices", q, raw, g.slices, this.slices);
      this._request("counters", q, raw, g.counters, this.counters);
    }
    this.onStatus(this.pendingCount());
    return this.inflight.size;
  }

  pendingCount() {
    return this.inflight.size + (this.flowInflight ? 1 : 0);
  }

  _request(kind, q, view, trackIds, store) {
    const pending = new Set();
    for (const req of this.inflight.values()) {
      if (req.kind === kind && req.qkey === q.key) for (const id of req.tracks) pending.add(id);
    }
    const missing = trackIds.filter((id) => !pending.has(id) && !serves(store.get(id), q, view, q.off));
    for (let i = 0; i < missing.length; i += MAX_TRACKS_PER_REQUEST) {
      const chunk = missing.slice(i, i + MAX_TRACKS_PER_REQUEST);
      const id = `${kind}|${q.key}|${this._seq = (this._seq || 0) + 1}`;
      const req = { kind, qkey: q.key, controller: new AbortController(), tracks: new Set(chunk) };
      this.inflight.set(id, req);
      const params = { track_id: chunk, start_ns: this.abs(q.qs), end_ns: this.abs(q.qe), width_px: q.widthPx };
      apiGetColumns(`${this.base}/${kind}`, params, { signal: req.controller.signal })
        .then((resp) => {
          for (const t of resp.tracks) {
            const entry = kind === "slices" ? sliceEntryFrom(t, resp.names, q) : counterEntryFrom(t, q);
            remember(store, t.track_id, entry);
          }
          this.onData();
        })
        .catch((err) => {
          if (!isAbort(err)) {
            this.errors += 1;
            console.error(`timeline ${kind} request failed`, err);
          }
        })
        .finally(() => {
          this.inflight.delete(id);
          this.onStatus(this.pendingCount());
        });
    }
  }

  /** Flows of the ticked categories in the quantised window; null until loaded. */
  flows(view, widthPx, cats) {
    if (!cats.length) return null;
    const q = quantize(view.start, view.end, widthPx, this.slicesPerPx);
    const key = `${q.qs}:${q.qe}:${[...cats].sort().join(",")}`;
    const fresh = this.flowEntry && this.flowEntry.key === key;
    const covering = this.flowEntry && this.flowEntry.cats === [...cats].sort().join(",")
      && this.flowEntry.qs <= view.start && this.flowEntry.qe >= view.end;
    if (!fresh && !covering && !(this.flowInflight && this.flowInflight.key === key)) {
      if (this.flowInflight) this.flowInflight.controller.abort();
      const controller = new AbortController();
      this.flowInflight = { key, controller };
      apiGetColumns(`${this.base}/flows`, { start_ns: this.abs(q.qs), end_ns: this.abs(q.qe), cat: [...cats] },
        { signal: controller.signal })
        .then((resp) => {
          this.flowEntry = { key, qs: q.qs, qe: q.qe, cats: [...cats].sort().join(","), data: resp };
          this.onData();
        })
        .catch((err) => { if (!isAbort(err)) console.error("flows request failed", err); })
        .finally(() => {
          if (this.flowInflight && this.flowInflight.key === key) this.flowInflight = null;
        });
    }
    return this.flowEntry && this.flowEntry.cats === [...cats].sort().join(",") ? this.flowEntry.data : null;
  }

  clear() {
    for (const req of this.inflight.values()) req.controller.abort();
    this.inflight.clear();
    this.slices.clear();
    this.counters.clear();
    this.flowEntry = null;
  }
}

/** Does entry list `entries` hold one that serves key q for this (raw, unshifted) view? */
function serves(entries, q, view, off) {
  if (!entries) return false;
  for (const e of entries) {
    if (e.off !== off || e.qs - off > view.start || e.qe - off < view.end) continue;
    // same resolution, or every slice of a window that holds the view (valid at any zoom inside it)
    if (e.bucket === q.bucket || e.exact) return true;
  }
  return false;
}

function pick(entries, view, off) {
  if (!entries || !entries.length) return null;
  let best = null;
  for (const e of entries) {
    if (e.off !== off || e.qe <= view.start || e.qs >= view.end) continue;
    if (!best) best = e;
    const covers = e.qs <= view.start && e.qe >= view.end;
    const bestCovers = best.qs <= view.start && best.qe >= view.end;
    if (covers && !bestCovers) best = e;
    else if (covers === bestCovers && e.time > best.time) best = e;
  }
  return best;
}

function remember(store, trackId, entry) {
  const list = store.get(trackId) || [];
  list.push(entry);
  while (list.length > MAX_ENTRIES_PER_TRACK) list.shift();
  store.set(trackId, list);
}

function sliceEntryFrom(t, names, q) {
  const n = t.count;
  const ts = Float64Array.from(t.ts_ns, (v) => v + q.off);
  const dur = Float64Array.from(t.dur_ns);
  const depth = Int32Array.from(t.depth);
  const nameId = Int32Array.from(t.name_id);
  const sliceId = Float64Array.from(t.slice_id);
  const sliceCount = t.slice_count ? Int32Array.from(t.slice_count) : null;
  const colors = names.map((nm) => colorFor(nm));
  return {
    n, ts, dur, depth, nameId, sliceId, sliceCount, names, colors,
    lod: t.lod, bucketNs: t.bucket_ns, truncated: t.truncated,
    // exact & untruncated data is every slice of the window: valid for any zoom inside it
    exact: !t.lod && !t.truncated,
    bucket: q.bucket, qs: q.qs + q.off, qe: q.qe + q.off, off: q.off, time: performance.now(),
  };
}

function counterEntryFrom(t, q) {
  const shift = (p) => (p ? { ...p, ts_ns: p.ts_ns + q.off } : null);
  const series = t.series.map((s) => ({
    name: s.series,
    ts: Float64Array.from(s.ts_ns, (v) => v + q.off),
    value: Float64Array.from(s.value, (v) => (v === null ? NaN : v)),
    before: shift(s.before),
    after: shift(s.after),
  }));
  return { series, lod: t.lod, bucket: q.bucket, qs: q.qs + q.off, qe: q.qe + q.off, off: q.off,
    exact: !t.lod && !t.truncated, time: performance.now() };
}
