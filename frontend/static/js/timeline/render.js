// Canvas drawing in a few O(N) passes: rows and slices are gathered into per-colour rect batches (one fill per
// colour), then labels where text fits, then counters, flows and the range overlay. The overlay canvas (hover,
// cursor line, rubber band) is redrawn on mouse moves without touching the main canvas.
//
// A folded track draws its hidden levels as one grey strip under the shown ones. An arrow whose other end is off
// to the side is drawn as a short fading stub towards it, with a chevron to click (timeline.followArrow).
// Markers are dashed lines down the lanes (a region also tints its span) and flags in the ruler's top strip.

import { flowColor } from "../common/colors.js";
import { formatValue } from "../common/format.js";
import { formatDuration, formatTick } from "../common/time.js";
import {
  CHAR_PX, DEPTH_PX, FOLDED_ROWS, HEADER_PX, LABEL_FONT, MIN_LABEL_PX, MORE_PX, MORE_STRIP_PX, SLICE_PX, SUMMARY_PX,
  TRACK_PAD_PX, niceStep,
} from "./geometry.js";

const BG = "#1b1d22";
const RANK_BG = "#262a31";
const GROUP_BG = "#202329";
const SEP = "#2b2f36";
const SUMMARY = "#59606c";
const TEXT = "#ffffff";
const MUTED = "#8e94a0";
const ACCENT = "#4c8dff";
const SELECT_OUTLINE = "#ffffff";
const HIDDEN_SERIES = new Set(["acc_id"]);
const MIN_SLICE_PX = 1;
const MERGE_PX = 2;  // slices narrower than this merge with a touching neighbour at the same depth
const STUB_PX = 56;          // length of the stub drawn for an arrow whose other end is off to the side
const STUB_MIN_PX = 12;
const STUB_MAX_SLOPE = 3;    // steepest lean of a stub (dy/dx)
const STUB_FADE = [1, 0.55, 0.22];  // alpha of the stub's pieces, from the end in view outwards
const CHEVRON_PX = 4;
export const MARK_STRIP_PX = 15;  // the ruler's top strip: marker flags, region bands, the range's length
const FLAG_W = 9;
const FLAG_H = 8;
const UI_FONT = "11px -apple-system, 'Segoe UI', 'Noto Sans', Arial, sans-serif";

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

  _counter(s, track, top, h, k) {
    const e = s.data.counterEntry(track.track_id, s.view);
    const { ctx, W } = this;
    const meta = (track.series || []).find((x) => !HIDDEN_SERIES.has(x.series)) || (track.series || [])[0];
    if (!meta) return;
    const color = s.colorFor(track.counter_name || track.thread_name);
    let lo = Math.min(0, meta.min_value ?? 0);
    let hi = meta.max_value ?? 1;
    if (!(hi > lo)) hi = lo + 1;
    const y0 = top + h - 3;
    const yh = h - 16;  // the top 13 px hold the max label
    const yOf = (v) => y0 - ((v - lo) / (hi - lo)) * yh;
    ctx.font = "10px -apple-system, 'Segoe UI', 'Noto Sans', Arial, sans-serif";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillStyle = MUTED;
    ctx.fillText(`max ${formatValue(hi)} ${meta.series}`, 4, top + 1);
    if (!e) return;
    const ser = e.series.find((x) => x.name === meta.series);
    if (!ser || (!ser.ts.length && !ser.before)) return;
    const vs = s.view.start;
    const pts = [];
    if (ser.before) pts.push([(ser.before.ts_ns - vs) * k, ser.before.value]);
    for (let i = 0; i < ser.ts.length; i++) pts.push([(ser.ts[i] - vs) * k, ser.value[i]]);
    const endX = ser.after ? (ser.after.ts_ns - vs) * k : pts.length ? pts[pts.length - 1][0] : 0;
    if (!pts.length) return;
    ctx.beginPath();
    let x = Math.max(-2, pts[0][0]);
    let yPrev = yOf(Number.isFinite(pts[0][1]) ? pts[0][1] : lo);
    ctx.moveTo(x, y0);
    ctx.lineTo(x, yPrev);
    for (let i = 1; i < pts.length; i++) {
      x = Math.min(Math.max(pts[i][0], -2), W + 2);
      ctx.lineTo(x, yPrev);
      yPrev = yOf(Number.isFinite(pts[i][1]) ? pts[i][1] : lo);
      ctx.lineTo(x, yPrev);
    }
    const xEnd = Math.min(Math.max(endX, x), W + 2);
    ctx.lineTo(xEnd, yPrev);
    ctx.lineTo(xEnd, y0);
    ctx.closePath();
    ctx.globalAlpha = 0.28;
    ctx.fillStyle = color;
    ctx.fill();
    ctx.globalAlpha = 1;
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.2;
    ctx.stroke();
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

  /** Arrows for the selected slice's flows and for the ticked categories; returns what was drawn. Curves and
   * stubs are batched per (category, emphasis) into a few paths each, so thousands of flows cost a few strokes. */
  _flows(s) {
    const { ctx, W } = this;
    const drawn = [];
    const groups = new Map();
    const k = W / (s.view.end - s.view.start);
    const add = (f, strong) => {
      const a = s.flowPoint(f.src_track_id, f.src_ts_ns, f.src_depth, k);
      const b = s.flowPoint(f.dst_track_id, f.dst_ts_ns, f.dst_depth, k);
      if (!a || !b) return;
      const aIn = a.x >= 0 && a.x <= W;
      const bIn = b.x >= 0 && b.x <= W;
      if (!aIn && !bIn) return;  // a line across the whole view from nowhere to nowhere tells nothing
      const key = `${f.cat}|${strong ? 1 : 0}`;
      let g = groups.get(key);
      if (!g) {
        g = { cat: f.cat, strong, curves: [], stubs: [] };
        groups.set(key, g);
      }
      const arrow = { flow_id: f.flow_id, cat: f.cat, src_slice_id: f.src_slice_id, dst_slice_id: f.dst_slice_id,
        src_ts_ns: f.src_ts_ns, dst_ts_ns: f.dst_ts_ns, src_track_id: f.src_track_id, dst_track_id: f.dst_track_id,
        x1: a.x, y1: a.y, x2: b.x, y2: b.y, selected: !!strong, clip: null };
      if (aIn && bIn) {
        const dx = Math.max(18, Math.abs(b.x - a.x) / 2);
        arrow.cx1 = a.x + dx;
        arrow.cx2 = b.x - dx;
        g.curves.push(arrow);
      } else {
        // from the end in view (p) a short way towards where the other one (q) would be at the edge of the view:
        // the stub leans towards q's lane; it ends before the edge when there is room
        const [p, q] = aIn ? [a, b] : [b, a];
        const dir = q.x > p.x ? 1 : -1;
        const room = dir > 0 ? W - p.x : p.x;
        const slope = Math.max(-STUB_MAX_SLOPE, Math.min(STUB_MAX_SLOPE, (q.y - p.y) / Math.max(room, 1)));
        const dx = Math.max(STUB_MIN_PX / 2, Math.min(STUB_PX / Math.hypot(1, slope), room - CHEVRON_PX - 2));
        Object.assign(arrow, { clip: aIn ? "dst" : "src", px: p.x, py: p.y, sx: p.x + dir * dx,
          sy: p.y + slope * dx, dir });
        g.stubs.push(arrow);
      }
      drawn.push(arrow);
    };
    const overlay = s.categoryFlows;
    if (overlay) {
      const f = {};
      for (let i = 0; i < overlay.flow_id.length; i++) {
        for (const key of FLOW_KEYS) f[key] = overlay[key][i];
        add(f, false);
      }
    }
    for (const f of s.selectedFlows || []) add(f, true);
    const order = [...groups.values()].sort((p, q) => p.strong - q.strong);
    for (const g of order) {
      const color = flowColor(g.cat);
      const base = g.strong ? 1 : 0.8;
      ctx.strokeStyle = color;
      ctx.fillStyle = color;
      ctx.lineWidth = g.strong ? 1.8 : 1;
      ctx.globalAlpha = base;
      ctx.beginPath();
      for (const a of g.curves) {
        ctx.moveTo(a.x1, a.y1);
        ctx.bezierCurveTo(a.cx1, a.y1, a.cx2, a.y2, a.x2, a.y2);
      }
      ctx.stroke();
      if (g.stubs.length) {
        // the fade: each stub in a few pieces, one path per piece, each piece fainter than the last
        const n = STUB_FADE.length;
        STUB_FADE.forEach((fade, i) => {
          ctx.globalAlpha = base * fade;
          ctx.beginPath();
          for (const a of g.stubs) {
            ctx.moveTo(a.px + ((a.sx - a.px) * i) / n, a.py + ((a.sy - a.py) * i) / n);
            ctx.lineTo(a.px + ((a.sx - a.px) * (i + 1)) / n, a.py + ((a.sy - a.py) * (i + 1)) / n);
          }
          ctx.stroke();
        });
        ctx.globalAlpha = base;
        ctx.beginPath();
        for (const a of g.stubs) {
          ctx.moveTo(a.sx - a.dir * CHEVRON_PX, a.sy - CHEVRON_PX);
          ctx.lineTo(a.sx, a.sy);
          ctx.lineTo(a.sx - a.dir * CHEVRON_PX, a.sy + CHEVRON_PX);
        }
        ctx.stroke();
      }
      ctx.globalAlpha = base;
      ctx.beginPath();
      const r = g.strong ? 2.5 : 1.8;
      for (const a of g.curves) {
        ends(ctx, a.x1, a.y1, true, r);
        ends(ctx, a.x2, a.y2, false, r);
      }
      for (const a of g.stubs) ends(ctx, a.px, a.py, a.clip === "dst", r);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
    return drawn;
  }

  /** The time a partially loaded rank has still to come (its slices starting there are not read yet): hatched
   * across the ruler, named in its top strip. */
  _stillComing(s, k) {
    const { rctx: ctx, RW: W, RH: H } = this;
    for (const span of s.stillComing || []) {
      const xa = Math.max((span.start - s.view.start) * k, 0);
      const xb = Math.min((span.end - s.view.start) * k, W);
      if (xb <= xa) continue;
      ctx.save();
      ctx.beginPath();
      ctx.rect(xa, 0, xb - xa, H);
      ctx.clip();
      ctx.fillStyle = "rgba(214,160,60,0.16)";
      ctx.fillRect(xa, 0, xb - xa, H);
      ctx.strokeStyle = "rgba(214,160,60,0.35)";
      ctx.beginPath();
      for (let x = xa - H; x < xb; x += 8) {
        ctx.moveTo(x, H);
        ctx.lineTo(x + H, 0);
      }
      ctx.stroke();
      ctx.fillStyle = "#e0b060";
      ctx.font = "11px -apple-system, 'Segoe UI', 'Noto Sans', Arial, sans-serif";
      ctx.textBaseline = "top";
      ctx.fillText(`rank ${span.rank}: still loading`, xa + 4, 1.5);
      ctx.restore();
    }
  }

  drawRuler(s, hoverX) {
    const { rctx: ctx, RW: W, RH: H } = this;
    ctx.fillStyle = "#22252b";
    ctx.fillRect(0, 0, W, H);
    const span = s.view.end - s.view.start;
    const k = W / span;
    const step = niceStep(span / W, 110);
    const minor = step / 5;
    ctx.strokeStyle = "#4a4f59";
    ctx.lineWidth = 1;
    ctx.beginPath();
    if (minor * k >= 8) {
      for (let t = Math.ceil(s.view.start / minor) * minor; t <= s.view.end; t += minor) {
        const x = Math.round((t - s.view.start) * k) + 0.5;
        ctx.moveTo(x, H - 5);
        ctx.lineTo(x, H);
      }
    }
    ctx.stroke();
    // the range label is placed first so tick labels under it can be left out
    let rangeBox = null;
    let rangeLabel = "";
    const labelFont = "bold 11px -apple-system, 'Segoe UI', 'Noto Sans', Arial, sans-serif";
    ctx.fillStyle = "#1e2126";
    ctx.fillRect(0, 0, W, MARK_STRIP_PX);
    ctx.fillStyle = "#30343b";
    ctx.fillRect(0, MARK_STRIP_PX, W, 1);
    this._stillComing(s, k);
    if (s.range) {
      const xa = (s.range.start - s.view.start) * k;
      const xb = (s.range.end - s.view.start) * k;
      ctx.fillStyle = "rgba(76,141,255,0.22)";
      ctx.fillRect(xa, 0, xb - xa, H);
      ctx.fillStyle = ACCENT;
      ctx.fillRect(xa, H - 3, xb - xa, 3);
      rangeLabel = `↔ ${formatDuration(s.range.end - s.range.start)}`;
      ctx.font = labelFont;
      const tw = ctx.measureText(rangeLabel).width + 12;
      const cx = Math.min(Math.max((xa + xb) / 2, tw / 2), W - tw / 2);
      rangeBox = [cx - tw / 2, cx + tw / 2];
    }
    this._flags(s, k);
    ctx.strokeStyle = "#6b717c";
    ctx.fillStyle = "#aab0ba";
    ctx.font = "11px -apple-system, 'Segoe UI', 'Noto Sans', Arial, sans-serif";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.beginPath();
    const magnitude = s.view.end - s.runStart;
    for (let t = Math.ceil(s.view.start / step) * step; t <= s.view.end; t += step) {
      const x = Math.round((t - s.view.start) * k) + 0.5;
      ctx.moveTo(x, H - 12);
      ctx.lineTo(x, H);
      const text = formatTick(t - s.runStart, step, magnitude);
      ctx.fillText(text, x + 4, MARK_STRIP_PX + 3);
    }
    ctx.stroke();
    if (rangeBox) {
      ctx.font = labelFont;
      ctx.fillStyle = "#2c4f8f";
      ctx.fillRect(rangeBox[0], 0, rangeBox[1] - rangeBox[0], MARK_STRIP_PX);
      ctx.fillStyle = "#fff";
      ctx.textAlign = "center";
      ctx.fillText(rangeLabel, (rangeBox[0] + rangeBox[1]) / 2, 1.5);
    }
    if (hoverX !== null && hoverX !== undefined && hoverX >= 0 && hoverX <= W) {
      const t = s.view.start + hoverX / k;
      const label = formatTick(t - s.runStart, niceStep(span / W, 1), s.view.end - s.runStart);
      ctx.font = "11px -apple-system, 'Segoe UI', 'Noto Sans', Arial, sans-serif";
      const tw = ctx.measureText(label).width + 10;
      const x = Math.min(Math.max(hoverX - tw / 2, 0), W - tw);
      ctx.fillStyle = ACCENT;
      ctx.fillRect(x, H - 17, tw, 15);
      ctx.fillStyle = "#fff";
      ctx.textAlign = "left";
      ctx.fillText(label, x + 5, H - 15);
    }
  }

  /** Marker flags in the ruler's top strip (a region: a band between two flags), each named where it fits. */
  _flags(s, k) {
    if (!s.markers || !s.markers.length) return;
    const { rctx: ctx, RW: W, RH: H } = this;
    const flags = [];
    for (const m of s.markers) {
      const xa = (m.start - s.view.start) * k;
      const xb = m.end === null ? null : (m.end - s.view.start) * k;
      if ((xb ?? xa) < -FLAG_W || xa > W + FLAG_W) continue;
      if (xb !== null) {
        ctx.globalAlpha = 0.3;
        ctx.fillStyle = m.color;
        ctx.fillRect(Math.max(xa, 0), 1, Math.min(xb, W) - Math.max(xa, 0), MARK_STRIP_PX - 2);
        ctx.globalAlpha = 1;
        flags.push({ x: xb, m, dir: -1 });
      }
      flags.push({ x: xa, m, dir: 1, label: true, end: xb });
    }
    flags.sort((a, b) => a.x - b.x);
    ctx.font = UI_FONT;
    ctx.textBaseline = "top";
    ctx.textAlign = "left";
    flags.forEach((f, i) => {
      const x = Math.round(f.x) + 0.5;
      ctx.strokeStyle = f.m.color;
      ctx.fillStyle = f.m.color;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      ctx.moveTo(x, 1);
      ctx.lineTo(x, H);
      ctx.stroke();
      ctx.beginPath();  // a pennant pointing into the region (or right, for a point marker)
      ctx.moveTo(x, 1);
      ctx.lineTo(x + f.dir * FLAG_W, 1 + FLAG_H / 2);
      ctx.lineTo(x, 1 + FLAG_H);
      ctx.closePath();
      ctx.fill();
      if (!f.label) return;
      const next = flags.slice(i + 1).find((g) => g.x > f.x + 1);
      const room = Math.min(next ? next.x : W, f.end ?? W) - (x + FLAG_W + 3) - 4;
      if (room < 24) return;
      const name = f.m.name;
      let text = name;
      while (text.length > 1 && ctx.measureText(text).width > room) text = `${text.slice(0, -2)}…`;
      ctx.fillStyle = "#e6e8ec";
      ctx.fillText(text, x + FLAG_W + 3, 1.5);
    });
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

const FLOW_KEYS = ["flow_id", "cat", "src_track_id", "src_ts_ns", "src_slice_id", "src_depth", "dst_track_id",
  "dst_ts_ns", "dst_slice_id", "dst_depth"];

/** Adds an arrow end to the current path: a dot for a source, an arrowhead for a destination. */
function ends(ctx, x, y, source, r) {
  if (source) {
    ctx.moveTo(x + r, y);
    ctx.arc(x, y, r, 0, Math.PI * 2);
  } else {
    ctx.moveTo(x, y);
    ctx.lineTo(x - 7, y - 4);
    ctx.lineTo(x - 7, y + 4);
    ctx.closePath();
  }
}

function push(batch, color, x, y, w, h) {
  let r = batch.get(color);
  if (r === undefined) {
    r = [];
    batch.set(color, r);
  }
  r.push(x, y, w, h);
}
