// Hit testing: what lies under a point of the lanes canvas — the row, the slice, a counter's values, a folded
// track's hidden-levels strip, a drawn flow arrow. Pure functions of the scene as drawn and the point (canvas px);
// the controller (timeline.js scene()) builds the scene, input.js asks.
//
// scene: {layout (lanes.js layout(): scroll and pinned rows), pinnedH (px of the pinned area), scrollY, view
// ({start, end}: drawn ns), k (px per ns), data ({sliceEntry, counterEntry}(trackId, view), as data.js)}

import { DEPTH_PX, FOLDED_ROWS, MORE_PX, TRACK_PAD_PX } from "./geometry.js";
import { shownDepths } from "./lanes.js";

const SLICE_TOLERANCE_PX = 2;  // a slice narrower than the pointer is still hit this close to it
const ARROW_HIT_PX = 5;

/** Canvas y of a row's top: pinned rows stay put, the others scroll under the pinned area. */
export function rowTop(scene, row) {
  return row.pinnedArea ? row.y : row.y + scene.pinnedH - scene.scrollY;
}

/** The row at canvas y (in either area): {row, top}, or null. */
export function rowAt(scene, y) {
  const { layout, pinnedH } = scene;
  if (y < pinnedH) {
    for (const row of layout.pinned) if (y >= row.y && y < row.y + row.h) return { row, top: row.y };
    return null;
  }
  const yy = y - pinnedH + scene.scrollY;
  const rows = layout.scroll;
  let lo = 0, hi = rows.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const r = rows[mid];
    if (yy < r.y) hi = mid - 1;
    else if (yy >= r.y + r.h) lo = mid + 1;
    else return { row: r, top: rowTop(scene, r) };
  }
  return null;
}

/** The slice at (x, y): {track_id, slice_id, ts_ns, dur_ns, depth, name, lod, count}, or null. Of the slices in
 * reach at the depth under y, the nearest wins, and between equally near ones the shortest. */
export function sliceAt(scene, x, y) {
  const hit = rowAt(scene, y);
  if (!hit || hit.row.node.type !== "track") return null;
  const track = hit.row.node.track;
  if (track.kind === "counter") return null;
  const d = Math.floor((y - hit.top - TRACK_PAD_PX) / DEPTH_PX);
  if (d < 0 || d > (track.max_depth || 0) || d >= shownDepths(hit.row.node)) return null;
  const e = scene.data.sliceEntry(track.track_id, scene.view);
  if (!e) return null;
  const { k } = scene;
  const t = scene.view.start + x / k;
  const tol = SLICE_TOLERANCE_PX / k;
  let best = -1;
  let bestDist = Infinity;
  for (let i = 0; i < e.n; i++) {
    if (e.depth[i] !== d) continue;
    const a = e.ts[i];
    const b = a + Math.max(e.dur[i], 1 / k);
    if (t < a - tol || t > b + tol) continue;
    const dist = t < a ? a - t : t > b ? t - b : 0;
    if (dist < bestDist || (dist === bestDist && e.dur[i] < e.dur[best])) { best = i; bestDist = dist; }
  }
  if (best < 0) return null;
  return { track_id: track.track_id, slice_id: e.sliceId[best], ts_ns: e.ts[best], dur_ns: e.dur[best], depth: d,
    name: e.names[e.nameId[best]], lod: e.lod, count: e.sliceCount ? e.sliceCount[best] : 1 };
}

/** A counter track's values at (x, y): {track_id, name, t, values: [[series, value]]}, or null. A series without a
 * point at or before t gives the value it had before the window (or null). */
export function counterAt(scene, x, y) {
  const hit = rowAt(scene, y);
  if (!hit || hit.row.node.type !== "track" || hit.row.node.track.kind !== "counter") return null;
  const track = hit.row.node.track;
  const e = scene.data.counterEntry(track.track_id, scene.view);
  if (!e) return null;
  const t = scene.view.start + x / scene.k;
  const values = e.series.map((ser) => {
    let lo = 0;
    let hi = ser.ts.length - 1;
    let at = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (ser.ts[mid] <= t) { at = mid; lo = mid + 1; } else hi = mid - 1;
    }
    return [ser.name, at >= 0 ? ser.value[at] : ser.before ? ser.before.value : null];
  });
  return { track_id: track.track_id, name: track.counter_name, t, values };
}

/** The folded track whose hidden-levels strip is at (x, y), or null. */
export function foldedAt(scene, x, y) {
  const hit = rowAt(scene, y);
  if (!hit || hit.row.node.type !== "track" || !hit.row.node.folded) return null;
  const stripTop = hit.top + TRACK_PAD_PX + FOLDED_ROWS * DEPTH_PX;
  return y >= stripTop - 1 && y < stripTop + MORE_PX + TRACK_PAD_PX ? hit.row.node : null;
}

/** The drawn arrow (render.js draw() returns them) nearest to (x, y) within reach, or null. */
export function arrowAt(arrows, x, y) {
  let best = null;
  let bestD = ARROW_HIT_PX;
  for (const a of arrows) {
    const d = arrowDistance(a, x, y);
    if (d < bestD) { best = a; bestD = d; }
  }
  return best;
}

/** Distance from (px, py) to a drawn arrow: its stub, or its Bézier sampled into segments. */
export function arrowDistance(a, px, py) {
  if (a.clip) return segDist(px, py, a.px, a.py, a.sx, a.sy);
  let best = Infinity;
  let prevX = a.x1;
  let prevY = a.y1;
  for (let i = 1; i <= 24; i++) {
    const t = i / 24;
    const u = 1 - t;
    const x = u * u * u * a.x1 + 3 * u * u * t * a.cx1 + 3 * u * t * t * a.cx2 + t * t * t * a.x2;
    const y = u * u * u * a.y1 + 3 * u * u * t * a.y1 + 3 * u * t * t * a.y2 + t * t * t * a.y2;
    best = Math.min(best, segDist(px, py, prevX, prevY, x, y));
    prevX = x;
    prevY = y;
  }
  return best;
}

function segDist(px, py, ax, ay, bx, by) {
  const dx = bx - ax;
  const dy = by - ay;
  const len2 = dx * dx + dy * dy;
  const t = len2 ? Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / len2)) : 0;
  return Math.hypot(px - (ax + t * dx), py - (ay + t * dy));
}
