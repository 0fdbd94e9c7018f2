// The memory snapshot's Active Memory Timeline, drawn on a canvas: the largest live blocks stacked as memory_viz
// stacks them (older below; a block slides down when one below it is freed), the rest of active memory as a grey
// band above them, the reserved (segments) curve above that, the peak and the OOMs marked. W/S zoom and A/D pan
// as on the timeline (the mouse anchors the zoom), Backspace undoes, 0 resets; a click on a block shows it, a click
// elsewhere picks that time, a drag selects a range. x is the device's axis: ns from the answers' origin, or the
// entry index.

import { el } from "../common/dom.js";
import { formatBytes } from "../common/format.js";
import { formatTick } from "../common/time.js";
import { Viewport } from "../timeline/viewport.js";

const MARGIN = { left: 72, right: 14, top: 16, bottom: 26 };
const ZOOM_IN = 0.8;
const ZOOM_OUT = 1.25;
const PAN_FRACTION = 0.2;
const DRAG_PX = 4;
const COLORS = ["#4e79a7", "#f28e2c", "#59a14f", "#76b7b2", "#edc949", "#af7aa1", "#ff9da7", "#9c755f", "#6a8fd0",
  "#c9a53a", "#5fae8e", "#b86b9c"];
const SUMMARY_FILL = "rgba(150, 156, 168, 0.35)";
const RESERVED = "#f2a541";
const PEAK = "#f06a6a";
const PICK = "#f2d24b";
const KEY_CODES = new Set(["KeyW", "KeyS", "KeyA", "KeyD", "Backspace", "Digit0"]);

export function stackColor(stackId) {
  if (stackId === null || stackId === undefined) return "#8a8f99";
  return COLORS[Math.abs(Number(stackId) * 2654435761 % 4294967296) % COLORS.length];
}

/** "1.25 ms" on a time axis, "#1,234" on an index axis. */
export function formatX(x, axis) {
  if (x === null || x === undefined) return "–";
  if (axis === "index") return `#${(Math.round(x) || 0).toLocaleString("en-US")}`;
  return formatTick(x, Math.max(1, Math.abs(x) / 1e4), x);
}

export class SnapshotChart {
  /** host: the chart's element; hooks: {onWindow(lo, hi), onPick(x), onRange(x0, x1), onBlock(block), tip(text)} */
  constructor(host, hooks) {
    this.host = host;
    this.hooks = hooks;
    this.canvas = el("canvas", { class: "snap-canvas", tabindex: "0", "aria-label": "Active memory timeline" });
    this.tip = el("div", { class: "snap-tip", hidden: true });
    host.append(this.canvas, this.tip);
    this.axis = "index";
    this.curve = null;
    this.alloc = null;
    this.marks = { peak: null, ooms: [], pick: null, range: null };
    this.drag = null;
    this.hover = null;
    this._bind();
    new ResizeObserver(() => this.draw()).observe(host);
  }

  /** A new device: its axis and full extent [lo, hi]. */
  reset(axis, lo, hi) {
    this.axis = axis;
    this.view = new Viewport(lo, hi);
    this.curve = this.alloc = null;
    this.marks = { peak: null, ooms: [], pick: null, range: null };
  }

  setData(curve, alloc) {
    if (curve) this.curve = curve;
    if (alloc) this.alloc = alloc;
    this.draw();
  }

  setMarks(marks) {
    Object.assign(this.marks, marks);
    this.draw();
  }

  get window() {
    return [this.view.start, this.view.end];
  }

  /** The plot's pixel width (the curve is asked for about one bucket per pixel). */
  get plotWidth() {
    return Math.max(100, Math.round(this.host.clientWidth - MARGIN.left - MARGIN.right));
  }

  zoomTo(lo, hi) {
    if (this.view.set(lo, hi)) this.hooks.onWindow(...this.window);
  }

  // ---------------------------------------------------------------- geometry

  _sizes() {
    const w = this.host.clientWidth;
    const h = this.host.clientHeight;
    return { w, h, pw: w - MARGIN.left - MARGIN.right, ph: h - MARGIN.top - MARGIN.bottom };
  }

  _xpx(x) {
    const { pw } = this._sizes();
    return MARGIN.left + ((x - this.view.start) / (this.view.end - this.view.start)) * pw;
  }

  _xat(px) {
    const { pw } = this._sizes();
    return this.view.start + ((px - MARGIN.left) / pw) * (this.view.end - this.view.start);
  }

  _ymax() {
    const c = this.curve?.columns;
    let top = 1;
    if (c) for (const k of ["reserved_max", "active_max"]) for (const v of c[k]) top = Math.max(top, v);
    if (this.curve?.before) top = Math.max(top, this.curve.before.reserved, this.curve.before.active);
    return top * 1.05;
  }

  _ypx(bytes, ymax) {
    const { ph } = this._sizes();
    return MARGIN.top + ph - (bytes / ymax) * ph;
  }

  // ---------------------------------------------------------------- drawing

  draw() {
    const { w, h, pw, ph } = this._sizes();
    if (w <= 0 || h <= 0 || !this.view) return;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(h * dpr);
    this.canvas.style.width = `${w}px`;
    this.canvas.style.height = `${h}px`;
    const g = this.canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const ymax = this._ymax();
    g.save();
    g.beginPath();
    g.rect(MARGIN.left, MARGIN.top, pw, ph);
    g.clip();
    this._drawSummary(g, ymax);
    this._drawBlocks(g, ymax);
    this._drawReserved(g, ymax);
    this._drawMarks(g, ymax);
    g.restore();
    this._drawAxes(g, ymax, pw, ph);
    this.canvas.dataset.blocks = String(this.alloc?.blocks?.length ?? 0);
    this.canvas.dataset.window = `${this.view.start},${this.view.end}`;
  }

  _drawSummary(g, ymax) {
    const c = this.curve?.columns;
    if (!c || !c.x0.length) return;
    const base = this._ypx(0, ymax);
    g.fillStyle = SUMMARY_FILL;
    g.beginPath();
    g.moveTo(this._xpx(c.x0[0]), base);
    for (let i = 0; i < c.x0.length; i++) {
      g.lineTo(this._xpx(c.x0[i]), this._ypx(c.active_max[i], ymax));
      g.lineTo(this._xpx(Math.max(c.x1[i], c.x0[i])) + 1, this._ypx(c.active_max[i], ymax));
    }
    g.lineTo(this._xpx(c.x1[c.x1.length - 1]) + 1, base);
    g.closePath();
    g.fill();
  }

  _drawBlocks(g, ymax) {
    for (const b of this.alloc?.blocks || []) {
      g.fillStyle = stackColor(b.stack_id);
      g.beginPath();
      const steps = b.steps;
      const ends = steps.map((s, i) => (i + 1 < steps.length ? steps[i + 1][0] : b.x1));
      g.moveTo(this._xpx(steps[0][0]), this._ypx(steps[0][1], ymax));
      for (let i = 0; i < steps.length; i++) {
        g.lineTo(this._xpx(steps[i][0]), this._ypx(steps[i][1], ymax));
        g.lineTo(this._xpx(ends[i]), this._ypx(steps[i][1], ymax));
      }
      for (let i = steps.length - 1; i >= 0; i--) {
        g.lineTo(this._xpx(ends[i]), this._ypx(steps[i][1] + b.requested_size, ymax));
        g.lineTo(this._xpx(steps[i][0]), this._ypx(steps[i][1] + b.requested_size, ymax));
      }
      g.closePath();
      g.fill();
      if (this.hover && this.hover.block_id === b.block_id) {
        g.strokeStyle = "#ffffff";
        g.lineWidth = 1.5;
        g.stroke();
      }
    }
  }

  _drawReserved(g, ymax) {
    const c = this.curve?.columns;
    if (!c || !c.x0.length) return;
    g.strokeStyle = RESERVED;
    g.lineWidth = 1.5;
    g.beginPath();
    let prev = this.curve.before.reserved;
    g.moveTo(this._xpx(this.view.start), this._ypx(prev, ymax));
    for (let i = 0; i < c.x0.length; i++) {
      g.lineTo(this._xpx(c.x0[i]), this._ypx(prev, ymax));
      g.lineTo(this._xpx(c.x0[i]), this._ypx(c.reserved_max[i], ymax));
      g.lineTo(this._xpx(c.x0[i]), this._ypx(c.reserved_min[i], ymax));
      g.lineTo(this._xpx(c.x1[i]), this._ypx(c.reserved_last[i], ymax));
      prev = c.reserved_last[i];
    }
    g.lineTo(this._xpx(this.view.end), this._ypx(prev, ymax));
    g.stroke();
  }

  _vline(g, x, color, dash, label) {
    if (x === null || x === undefined || x < this.view.start || x > this.view.end) return;
    const px = Math.round(this._xpx(x)) + 0.5;
    const { ph } = this._sizes();
    g.strokeStyle = color;
    g.lineWidth = 1;
    g.setLineDash(dash);
    g.beginPath();
    g.moveTo(px, MARGIN.top);
    g.lineTo(px, MARGIN.top + ph);
    g.stroke();
    g.setLineDash([]);
    if (label) {
      g.fillStyle = color;
      g.font = "11px sans-serif";
      g.fillText(label, px + 4, MARGIN.top + 11);
    }
  }

  _drawMarks(g, ymax) {
    const { range, pick, peak, ooms } = this.marks;
    const live = this.drag?.moved ? [Math.min(this.drag.x0, this.drag.x), Math.max(this.drag.x0, this.drag.x)] : null;
    for (const r of [range, live]) {
      if (!r) continue;
      const a = this._xpx(r[0]);
      const b = this._xpx(r[1]);
      g.fillStyle = "rgba(242, 210, 75, 0.14)";
      g.fillRect(a, MARGIN.top, Math.max(1, b - a), this._sizes().ph);
    }
    if (peak) {
      this._vline(g, peak.x, PEAK, [4, 3], `peak ${formatBytes(peak.bytes)}`);
      if (peak.x !== null && peak.x !== undefined) {
        g.fillStyle = PEAK;
        g.beginPath();
        g.arc(this._xpx(peak.x), this._ypx(peak.bytes, ymax), 3.5, 0, 2 * Math.PI);
        g.fill();
      }
    }
    for (const o of ooms) this._vline(g, o.x, "#d9453b", [2, 2], "OOM");
    this._vline(g, pick, PICK, [], null);
  }

  _drawAxes(g, ymax, pw, ph) {
    g.fillStyle = "#9aa0ab";
    g.strokeStyle = "#3a3f48";
    g.font = "11px sans-serif";
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const v = (ymax / 1.05) * (i / 4);
      const y = Math.round(this._ypx(v, ymax)) + 0.5;
      g.beginPath();
      g.moveTo(MARGIN.left, y);
      g.lineTo(MARGIN.left + pw, y);
      g.stroke();
      g.fillText(formatBytes(Math.round(v)), 4, y + 4);
    }
    const span = this.view.end - this.view.start;
    const raw = span / Math.max(2, Math.floor(pw / 110));
    const mag = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
    const step = [1, 2, 5, 10].map((k) => k * mag).find((s) => s >= raw) || 10 * mag;
    for (let t = Math.ceil(this.view.start / step) * step; t <= this.view.end; t += step) {
      const px = this._xpx(t);
      g.fillText(this.axis === "index" ? formatX(t, "index") : formatTick(t, step, this.view.end),
        px - 20, MARGIN.top + ph + 16);
    }
  }

  // ---------------------------------------------------------------- hit test and input

  /** The block under the pixel (px, py), or null. */
  blockAt(px, py) {
    const x = this._xat(px);
    const ymax = this._ymax();
    const { ph } = this._sizes();
    const bytes = ((MARGIN.top + ph - py) / ph) * ymax;
    for (const b of this.alloc?.blocks || []) {
      if (x < b.x0 || x >= b.x1) continue;
      let bottom = b.steps[0][1];
      for (const [sx, sb] of b.steps) if (sx <= x) bottom = sb;
      if (bytes >= bottom && bytes <= bottom + b.requested_size) return b;
    }
    return null;
  }

  _bind() {
    const c = this.canvas;
    const pos = (e) => {
      const r = c.getBoundingClientRect();
      return [e.clientX - r.left, e.clientY - r.top];
    };
    c.addEventListener("mousedown", (e) => {
      const [px] = pos(e);
      this.drag = { px0: px, x0: this._xat(px), x: this._xat(px), moved: false };
      c.focus();
    });
    window.addEventListener("mousemove", (e) => {
      const [px, py] = pos(e);
      if (this.drag) {
        this.drag.x = this._xat(px);
        this.drag.moved = this.drag.moved || Math.abs(px - this.drag.px0) > DRAG_PX;
        this.draw();
        return;
      }
      if (e.target !== c) return;
      const b = this.blockAt(px, py);
      if ((b?.block_id ?? null) !== (this.hover?.block_id ?? null)) {
        this.hover = b;
        this.draw();
      }
      this._showTip(px, py, b);
    });
    window.addEventListener("mouseup", (e) => {
      const d = this.drag;
      if (!d) return;
      this.drag = null;
      const [px, py] = pos(e);
      if (d.moved) {
        const lo = Math.min(d.x0, d.x);
        const hi = Math.max(d.x0, d.x);
        this.marks.range = [lo, hi];
        this.draw();
        this.hooks.onRange(lo, hi);
        return;
      }
      const b = this.blockAt(px, py);
      if (b) this.hooks.onBlock(b);
      else this.hooks.onPick(this._xat(px));
    });
    c.addEventListener("mouseleave", () => { this.tip.hidden = true; this.hover = null; this.draw(); });
    c.addEventListener("keydown", (e) => this._key(e));
  }

  _key(e) {
    if (!KEY_CODES.has(e.code) || e.ctrlKey || e.metaKey || e.altKey) return;
    e.preventDefault();
    const r = this.canvas.getBoundingClientRect();
    const anchorPx = this.mouseX ?? (r.width / 2);
    const anchor = this._xat(anchorPx);
    let moved = false;
    const opts = { record: e.repeat ? "coalesce" : "push", gesture: e.code };
    if (e.code === "KeyW") moved = this.view.zoomAt(ZOOM_IN, anchor, opts);
    else if (e.code === "KeyS") moved = this.view.zoomAt(ZOOM_OUT, anchor, opts);
    else if (e.code === "KeyA") moved = this.view.pan(-PAN_FRACTION * this.view.span, opts);
    else if (e.code === "KeyD") moved = this.view.pan(PAN_FRACTION * this.view.span, opts);
    else if (e.code === "Backspace") moved = this.view.undo();
    else if (e.code === "Digit0") moved = this.view.reset();
    if (moved) {
      this.draw();
      this.hooks.onWindow(...this.window);
    }
  }

  _showTip(px, py, b) {
    this.mouseX = px;
    const x = this._xat(px);
    if (px < MARGIN.left || px > this.host.clientWidth - MARGIN.right) {
      this.tip.hidden = true;
      return;
    }
    const text = b ? this.hooks.tip(b) : this._curveText(x);
    if (!text) {
      this.tip.hidden = true;
      return;
    }
    this.tip.textContent = text;
    this.tip.hidden = false;
    const left = Math.min(px + 14, this.host.clientWidth - 260);
    this.tip.style.left = `${Math.max(0, left)}px`;
    this.tip.style.top = `${Math.max(0, py - 10)}px`;
  }

  _curveText(x) {
    const c = this.curve?.columns;
    if (!c || !c.x0.length) return null;
    let i = c.x0.findIndex((x0, k) => x0 <= x && x <= Math.max(c.x1[k], x0));
    if (i < 0) {
      i = c.x0.findLastIndex((x0) => x0 <= x);
      if (i < 0) return null;
    }
    return `${formatX(x, this.axis)}\nactive ${formatBytes(c.active_last[i])} (max ${formatBytes(c.active_max[i])})` +
      `\nallocated ${formatBytes(c.allocated_last[i])}\nreserved ${formatBytes(c.reserved_last[i])}`;
  }
}
