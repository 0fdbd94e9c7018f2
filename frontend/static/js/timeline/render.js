// Canvas drawing in a few O(N) passes: rows and slices are gathered into per-colour rect batches (one fill per
// colour), then labels where text fits, then counters, flows and the range overlay. The overlay canvas (hover,
// cursor line, rubber band) is redrawn on mouse moves without touching the main canvas.
//
// A folded track draws its hidden levels as one grey strip under the shown ones. Markers are dashed lines down the
// lanes (a region also tints its span). The flow arrows (arrows.js), the ruler with its marker flags (ruler.js) and
// the counter lanes (counters.js) are drawn by methods of a module each, installed on the Renderer below.

import { arrowMethods } from "./arrows.js";
import { counterMethods } from "./counters.js";
import {
  CHAR_PX, DEPTH_PX, FOLDED_ROWS, HEADER_PX, LABEL_FONT, MIN_LABEL_PX, MORE_PX, MORE_STRIP_PX, SLICE_PX, SUMMARY_PX,
  TRACK_PAD_PX,
} from "./geometry.js";
import { ACCENT, BG, GROUP_BG, RANK_BG, SELECT_OUTLINE, SEP, SUMMARY, TEXT } from "./palette.js";
import { rulerMethods } from "./ruler.js";

const MIN_SLICE_PX = 1;
const MERGE_PX = 2;  // slices narrower than this merge with a touching neighbour at the same depth

export class Renderer {
  constructor(canvas, overlay, ruler) {
    this.canvas = canvas;
    this.overlay = overlay;
    this.ruler = ruler;
    this.ctx = canvas.getContext("2d", { alpha: false });
    this.octx = overlay.getContext("2d");
    this.rctx = ruler.getContext("2d", { alpha: false });
    this.W = this.H = this.RW = 0;
    this._grow(64);
    this.stats = { slices: 0, rects: 0, labels: 0, ms: 0 };
  }

  resize(W, H, RW, RH) {
    const dpr = window.devicePixelRatio || 1;
    for (const [c, w, h] of [[this.canvas, W, H], [this.overlay, W, H], [this.ruler, RW, RH]]) {
      c.width = Math.max(1, Math.round(w * dpr));
      c.height = Math.max(1, Math.round(h * dpr));
      c.style.width = `${w}px`;
      c.style.height = `${h}px`;
      c.getContext("2d").setTransform(dpr, 0, 0, dpr, 0, 0);
    }
    this.W = W; this.H = H; this.RW = RW; this.RH = RH;
  }

  /** Full redraw of the lanes. s: the timeline state (see timeline.js: drawState()). Returns drawn arrows. */
  draw(s) {
    const t0 = performance.now();
    const { ctx, W, H } = this;
    const stats = { slices: 0, rects: 0, labels: 0 };
    ctx.fillStyle = BG;
    ctx.fillRect(0, 0, W, H);
    const pinnedH = s.pinnedH;
    // scrolling rows, then pinned rows on top
    this._region(s, s.layout.scroll, pinnedH, H, pinnedH - s.scrollY, stats);
    if (pinnedH > 0) {
      this._region(s, s.layout.pinned, 0, pinnedH, 0, stats);
      ctx.fillStyle = ACCENT;
      ctx.fillRect(0, pinnedH - 2, W, 2);
    }
    this._selection(s);
    this._range(s);
    this._markers(s);
    const arrows = this._flows(s);
    this.stats = { ...stats, ms: performance.now() - t0 };
    return arrows;
  }

  _region(s, rows, top, bottom, dy, stats) {
    const { ctx, W } = this;
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, top, W, bottom - top);
    ctx.clip();
    const batch = new Map();
    const labels = [];
    const counters = [];
    const k = W / (s.view.end - s.view.start);
    for (const row of rows) {
      const y = row.y + dy;
      if (y + row.h < top || y > bottom) continue;
      const n = row.node;
      if (n.type === "rank") {
        push(batch, RANK_BG, 0, y, W, row.h);
      } else if (n.type === "group") {
        push(batch, GROUP_BG, 0, y, W, row.h);
        if (n.collapsed) this._summary(s, n, y, k, batch, stats);
      } else if (n.track.kind === "counter") {
        counters.push([n, y, row.h]);
      } else {
        this._slices(s, n.track, y, k, batch, labels, stats, n.folded ? FOLDED_ROWS : Infinity);
      }
      if (n.id === s.selectedLaneId) push(batch, "rgba(76,141,255,0.10)", 0, y, W, row.h);
      push(batch, SEP, 0, y + row.h - 1, W, 1);
    }
    for (const [color, r] of batch) {
      ctx.fillStyle = color;
      ctx.beginPath();
      for (let i = 0; i < r.length; i += 4) ctx.rect(r[i], r[i + 1], r[i + 2], r[i + 3]);
      ctx.fill();
      stats.rects += r.length / 4;
    }
    this._labels(labels, stats);
    for (const [n, y, h] of counters) this._counter(s, n.track, y, h, k);
    ctx.restore();
  }

  /** Slices of a track whose row starts at `top`; levels from `shown` down go to the hidden-levels strip. */
  _slices(s, track, top, k, batch, labels, stats, shown) {
    const e = s.data.sliceEntry(track.track_id, s.view);
    if (!e) return;
    const { W } = this;
    const vs = s.view.start;
    const stripY = top + TRACK_PAD_PX + shown * DEPTH_PX + (MORE_PX - MORE_STRIP_PX) / 2;
    let stripEnd = -Infinity;
    let strip = null;
    let stripAt = 0;
    const depths = Math.max(0, track.max_depth || 0) + 1;
    if (this.lastEnd.length < depths) this._grow(depths);
    const { lastEnd, lastLabel, lastSmall, lastRect } = this;
    lastEnd.fill(-Infinity, 0, depths);
    lastLabel.fill(-Infinity, 0, depths);
    lastSmall.fill(0, 0, depths);
    const { ts, dur, depth, nameId, colors, names } = e;
    for (let i = 0; i < e.n; i++) {
      let x0 = (ts[i] - vs) * k;
      let x1 = x0 + dur[i] * k;
      if (x1 < 0 || x0 > W) continue;
      if (x1 - x0 < MIN_SLICE_PX) x1 = x0 + MIN_SLICE_PX;
      const d = depth[i];
      stats.slices += 1;
      if (d >= shown) {
        // one grey strip for every hidden level: covered pixels need no second rect, touching ones extend it
        if (x1 <= stripEnd) continue;
        if (strip && x0 <= stripEnd + 0.5) {
          strip[stripAt + 2] = Math.min(x1, W + 2) - strip[stripAt];
        } else {
          const xa = Math.max(x0, -2);
          strip = batch.get(SUMMARY);
          if (strip === undefined) {
            strip = [];
            batch.set(SUMMARY, strip);
          }
          stripAt = strip.length;
          strip.push(xa, stripY, Math.min(x1, W + 2) - xa, MORE_STRIP_PX);
        }
        stripEnd = x1;
        continue;
      }
      const small = x1 - x0 < MERGE_PX;
      if (small && lastSmall[d] && x0 <= lastEnd[d] + 0.5) {
        // runs of sub-pixel slices become one rect (coloured by the first): ≤ 1 rect per pixel column and depth
        if (x1 > lastEnd[d]) {
          const r = lastRect[d];
          r[1][r[0] + 2] = Math.min(x1, W + 2) - r[1][r[0]];
          lastEnd[d] = x1;
        }
        continue;
      }
      if (x0 < -2) x0 = -2;
      if (x1 > W + 2) x1 = W + 2;
      const id = nameId[i];
      const color = colors[id];
      let arr = batch.get(color);
      if (arr === undefined) {
        arr = [];
        batch.set(color, arr);
      }
      lastRect[d] = [arr.length, arr];
      arr.push(x0, top + TRACK_PAD_PX + d * DEPTH_PX, x1 - x0, SLICE_PX);
      lastSmall[d] = small ? 1 : 0;
      if (x1 > lastEnd[d]) lastEnd[d] = x1;
      // improperly nested sources can overlap slices at one depth: never let their labels overprint
      if (x1 - x0 >= MIN_LABEL_PX && x0 >= lastLabel[d]) {
        labels.push(x0, x1, top + TRACK_PAD_PX + d * DEPTH_PX, id, names);
        lastLabel[d] = x1;
      }
    }
  }

  _grow(n) {
    this.lastEnd = new Float64Array(n);
    this.lastLabel = new Float64Array(n);
    this.lastSmall = new Uint8Array(n);
    this.lastRect = new Array(n);
  }

  _summary(s, group, top, k, batch, stats) {
    const { W } = this;
    const y = top + HEADER_PX - SUMMARY_PX - 3;
    const vs = s.view.start;
    for (const child of group.children) {
      if (child.track.kind === "counter") continue;
      const e = s.data.sliceEntry(child.track.track_id, s.view);
      if (!e) continue;
      let lastEnd = -Infinity;
      for (let i = 0; i < e.n; i++) {
        if (e.depth[i] !== 0) continue;
        let x0 = (e.ts[i] - vs) * k;
        let x1 = x0 + e.dur[i] * k;
        if (x1 < 0 || x0 > W) continue;
        if (x1 - x0 < 1) x1 = x0 + 1;
        if (x1 <= lastEnd) continue;  // one grey strip: covered pixels need no second rect
        lastEnd = x1;
        x0 = Math.max(x0, -2);
        x1 = Math.min(x1, W + 2);
        push(batch, SUMMARY, x0, y, x1 - x0, SUMMARY_PX);
        stats.slices += 1;
      }
    }
  }

  _labels(labels, stats) {
    const { ctx } = this;
    ctx.font = LABEL_FONT;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillStyle = TEXT;
    for (let i = 0; i < labels.length; i += 5) {
      const x0 = Math.max(labels[i], 0);
      const x1 = Math.min(labels[i + 1], this.W);
      const avail = x1 - x0 - 6;
      if (avail < MIN_LABEL_PX - 6) continue;
      const name = labels[i + 4][labels[i + 3]];
      const maxChars = Math.floor(avail / CHAR_PX);
      if (maxChars < 2) continue;
      const text = name.length <= maxChars ? name : `${name.slice(0, maxChars - 1)}…`;
      ctx.fillText(text, (x0 + x1) / 2, labels[i + 2] + SLICE_PX / 2 + 0.5, avail);
      stats.labels += 1;
    }
  }

  _selection(s) {
    const sel = s.selection;
    if (!sel) return;
    const p = s.sliceBox(sel.track_id, sel.ts_ns, sel.dur_ns, sel.depth);
    if (!p) return;
    const { ctx } = this;
    ctx.save();
    ctx.strokeStyle = SELECT_OUTLINE;
    ctx.lineWidth = 2;
    ctx.strokeRect(p.x0 - 1, p.y - 1, Math.max(2, p.x1 - p.x0) + 2, p.h + 2);
    ctx.restore();
  }

  _range(s) {
    if (!s.range) return;
    const { ctx, W, H } = this;
    const k = W / (s.view.end - s.view.start);
    const xa = (s.range.start - s.view.start) * k;
    const xb = (s.range.end - s.view.start) * k;
    ctx.fillStyle = "rgba(0,0,0,0.42)";
    if (xa > 0) ctx.fillRect(0, 0, Math.min(xa, W), H);
    if (xb < W) ctx.fillRect(Math.max(xb, 0), 0, W - Math.max(xb, 0), H);
    ctx.save();
    ctx.setLineDash([4, 4]);
    ctx.strokeStyle = ACCENT;
    ctx.lineWidth = 1;
    for (const x of [xa, xb]) {
      if (x < 0 || x > W) continue;
      ctx.beginPath();
      ctx.moveTo(Math.round(x) + 0.5, 0);
      ctx.lineTo(Math.round(x) + 0.5, H);
      ctx.stroke();
    }
    ctx.restore();
  }

  _markers(s) {
    if (!s.markers || !s.markers.length) return;
    const { ctx, W, H } = this;
    const k = W / (s.view.end - s.view.start);
    ctx.save();
    ctx.setLineDash([5, 4]);
    ctx.lineWidth = 1;
    for (const m of s.markers) {
      const xa = (m.start - s.view.start) * k;
      const xb = m.end === null ? xa : (m.end - s.view.start) * k;
      if (xb < -1 || xa > W + 1) continue;
      if (m.end !== null) {
        ctx.globalAlpha = 0.07;
        ctx.fillStyle = m.color;
        ctx.fillRect(Math.max(xa, 0), 0, Math.min(xb, W) - Math.max(xa, 0), H);
      }
      ctx.globalAlpha = 0.9;
      ctx.strokeStyle = m.color;
      ctx.beginPath();
      for (const x of m.end === null ? [xa] : [xa, xb]) {
        if (x < -1 || x > W + 1) continue;
        ctx.moveTo(Math.round(x) + 0.5, 0);
        ctx.lineTo(Math.round(x) + 0.5, H);
      }
      ctx.stroke();
    }
    ctx.restore();
  }

  /** Hover outline, cursor line and the Alt-drag rubber band. */
  drawOverlay(s, hover) {
    const { octx: ctx, W, H } = this;
    ctx.clearRect(0, 0, W, H);
    if (hover && hover.x !== null && hover.x >= 0 && hover.x <= W) {
      ctx.strokeStyle = "rgba(255,255,255,0.28)";
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(Math.round(hover.x) + 0.5, 0);
      ctx.lineTo(Math.round(hover.x) + 0.5, H);
      ctx.stroke();
    }
    if (hover && hover.box) {
      const b = hover.box;
      ctx.strokeStyle = "rgba(255,255,255,0.85)";
      ctx.lineWidth = 1;
      ctx.strokeRect(b.x0 - 0.5, b.y - 0.5, Math.max(1, b.x1 - b.x0) + 1, b.h + 1);
    }
    if (s.rubber) {
      const x0 = Math.min(s.rubber.x0, s.rubber.x1);
      const x1 = Math.max(s.rubber.x0, s.rubber.x1);
      ctx.fillStyle = "rgba(76,141,255,0.18)";
      ctx.fillRect(x0, 0, x1 - x0, H);
      ctx.strokeStyle = ACCENT;
      ctx.strokeRect(x0 + 0.5, 0.5, x1 - x0, H - 1);
    }
  }
}

// The renderer's other parts live in a module each (arrows.js, ruler.js, counters.js) as objects of methods; copying
// their property descriptors keeps `this` in them the renderer.
for (const methods of [arrowMethods, rulerMethods, counterMethods]) {
  Object.defineProperties(Renderer.prototype, Object.getOwnPropertyDescriptors(methods));
}

function push(batch, color, x, y, w, h) {
  let r = batch.get(color);
  if (r === undefined) {
    r = [];
    batch.set(color, r);
  }
  r.push(x, y, w, h);
}
