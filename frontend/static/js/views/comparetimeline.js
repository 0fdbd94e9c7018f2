// The Compare page's step-aligned timeline: side A's device lanes above side B's on one canvas, both on a time
// axis that starts at each side's step start (times are ns relative to it, as /api/compare/timeline answers).
// Zoom (wheel, W/S, buttons) and pan (drag, A/D) move both sides together; the lanes of the visible window are
// fetched again (debounced) at the canvas width, so the server's level of detail and row caps bound what is drawn.
// Hovering shows the slice under the mouse; a click picks it and offers its run's timeline.
//
// new CompareTimeline(host, { load: (params) => Promise<answer>, onPick: (pick) => void })
//   .reset(params)   new sides: fetch the default window (the longer step) and fit it

import { isAbort } from "../common/api.js";
import { colorFor } from "../common/colors.js";
import { el } from "../common/dom.js";
import { STEP_TIMES_NOTE } from "../common/steps.js";
import { formatDuration, formatShift } from "../common/time.js";
import { runPage } from "../common/urls.js";

const LABEL_W = 210;
const RULER_H = 26;
const BAND_H = 22;
const ROW_H = 15;
const LANE_GAP = 4;
const MAX_ROWS = 6; // depth rows drawn per lane; deeper slices are drawn folded into the last one
const MIN_SPAN_NS = 1_000;
const FETCH_DELAY_MS = 120;
const ZOOM_STEP = 1.5;
const SIDES = ["a", "b"];

function niceStep(spanNs, px) {
  const raw = spanNs / Math.max(1, px / 110);
  const pow = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * pow >= raw) return m * pow;
  return 10 * pow;
}

function laneLabel(lane) {
  if (lane.kind === "overlap") return lane.thread_name; // Computing, Free…: the Overlap Analysis rows
  const name = (lane.thread_name || "").trim() || lane.process_name || `track ${lane.track_id}`;
  if (lane.kind === "communication") return `Comm · ${name}`;
  return /\bGPU\b/i.test(lane.label || "") ? `${lane.label} · ${name}` : name;
}

export class CompareTimeline {
  constructor(host, opts) {
    this.opts = opts;
    this.host = host;
    this.data = null;
    this.view = null; // {start, end} in ns relative to each side's align point
    this.fit = null;
    this.seq = 0;
    this.pending = 0;
    this.timer = null;
    this.params = null;
    this.hover = null;
    this.picked = null;
    this.layout = [];
    this.drawn = { a: 0, b: 0 };
    const zoomIn = el("button", { type: "button", class: "btn", id: "cmp-tl-zoom-in", title: "Zoom in (W)" }, "+");
    const zoomOut = el("button", { type: "button", class: "btn", id: "cmp-tl-zoom-out", title: "Zoom out (S)" }, "−");
    const fitBtn = el("button", { type: "button", class: "btn", id: "cmp-tl-fit",
      title: "Fit the steps (double-click)" }, "Fit");
    this.range = el("span", { class: "v-table-info", id: "cmp-tl-range" });
    this.toolbar = el("div", { class: "cmp-tl-bar" }, zoomIn, zoomOut, fitBtn, this.range,
      el("span", { class: "v-spacer" }),
      el("span", { class: "v-note cmp-tl-keys" }, "wheel or W/S zoom · drag or A/D pan · both sides move together"));
    this.canvas = el("canvas", { class: "cmp-tl-canvas", id: "cmp-tl-canvas", tabindex: "0",
      "aria-label": "Step-aligned timeline of side A above side B" });
    this.tip = el("div", { class: "cmp-tl-tip", id: "cmp-tl-tip", hidden: true });
    this.wrap = el("div", { class: "cmp-tl-wrap" }, this.canvas, this.tip);
    this.detail = el("div", { class: "cmp-tl-detail", id: "cmp-tl-detail" });
    host.append(this.toolbar, this.wrap, this.detail);
    zoomIn.addEventListener("click", () => this.zoom(1 / ZOOM_STEP));
    zoomOut.addEventListener("click", () => this.zoom(ZOOM_STEP));
    fitBtn.addEventListener("click", () => this.fitView());
    this.bindInput();
    new ResizeObserver(() => { this.draw(); this.schedule(); }).observe(this.wrap);
    window.__compareTimeline = this;
  }

  get plotWidth() {
    return Math.max(50, this.wrap.clientWidth - LABEL_W);
  }

  /** New sides: the default window comes from the server (the union of both steps). */
  reset(params) {
    this.params = params;
    clearTimeout(this.timer);
    this.timer = null;
    this.view = null;
    this.picked = null;
    this.detail.textContent = "";
    return this.fetch();
  }

  fitView() {
    if (!this.fit) return;
    this.setView(this.fit.start, this.fit.end);
  }

  setView(start, end) {
    if (end - start < MIN_SPAN_NS) {
      const mid = (start + end) / 2;
      start = mid - MIN_SPAN_NS / 2;
      end = mid + MIN_SPAN_NS / 2;
    }
    this.view = { start: Math.round(start), end: Math.round(end) };
    this.draw();
    this.schedule();
  }

  zoom(factor, atX = null) {
    if (!this.view) return;
    const { start, end } = this.view;
    const x = atX === null ? this.plotWidth / 2 : atX;
    const t = start + ((end - start) * x) / this.plotWidth;
    this.setView(t - (t - start) * factor, t + (end - t) * factor);
  }

  pan(fraction) {
    if (!this.view) return;
    const d = (this.view.end - this.view.start) * fraction;
    this.setView(this.view.start + d, this.view.end + d);
  }

  schedule() {
    if (!this.params || !this.view) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => { this.timer = null; this.fetch(); }, FETCH_DELAY_MS);
  }

  /** No fetch running or waiting: what is drawn is the answer for the current window. */
  idle() {
    return this.pending === 0 && this.timer === null;
  }

  async fetch() {
    if (!this.params) return;
    const seq = ++this.seq;
    this.pending += 1;
    const q = { ...this.params, width_px: Math.round(this.plotWidth) };
    if (this.view) Object.assign(q, { start_ns: this.view.start, end_ns: this.view.end });
    try {
      const answer = await this.opts.load(q);
      if (seq !== this.seq) return;
      this.data = answer;
      if (!this.view) {
        const pad = Math.max(1, Math.round((answer.end_ns - answer.start_ns) * 0.01));
        this.fit = { start: answer.start_ns - pad, end: answer.end_ns + pad };
        this.view = { ...this.fit };
        this.schedule(); // the padded window, at its own level of detail
      }
      this.draw();
    } catch (err) {
      if (!isAbort(err) && seq === this.seq) this.opts.onError?.(err);
    } finally {
      this.pending -= 1;
    }
  }

  // ------------------------------------------------------------------ layout and drawing

  computeLayout() {
    const bands = [];
    let y = RULER_H;
    for (const s of SIDES) {
      const side = this.data?.[s];
      const band = { side: s, y, lanes: [] };
      y += BAND_H;
      for (const lane of side?.lanes || []) {
        const rows = Math.min(MAX_ROWS, (lane.max_depth || 0) + 1);
        band.lanes.push({ lane, y, rows });
        y += rows * ROW_H + LANE_GAP;
      }
      if (!band.lanes.length) y += ROW_H + LANE_GAP;
      band.end = y;
      y += 8;
      bands.push(band);
    }
    this.layout = bands;
    return y;
  }

  draw() {
    const height = this.computeLayout();
    const width = this.wrap.clientWidth || 800;
    const dpr = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(width * dpr) || this.canvas.height !== Math.round(height * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(height * dpr);
      this.canvas.style.height = `${height}px`;
    }
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#1b1d22";
    ctx.fillRect(0, 0, width, height);
    if (!this.data || !this.view) return;
    const { start, end } = this.view;
    const pw = this.plotWidth;
    const scale = pw / (end - start);
    const xOf = (t) => LABEL_W + (t - start) * scale;
    this.range.textContent = `${formatShift(start)} … ${formatShift(end)} (${formatDuration(end - start)} shown)`;
    ctx.font = "11px -apple-system, Segoe UI, Noto Sans, Arial, sans-serif";
    ctx.textBaseline = "middle";
    this.titles = [];
    for (const band of this.layout) this.drawBand(ctx, band, xOf, scale, width);
    this.drawRuler(ctx, start, end, scale, width);
    // what the bands say, for screen readers (and the step time's definition on hover)
    this.canvas.setAttribute("aria-label", `Step-aligned timeline: ${this.titles.join("; ")}`);
    this.canvas.title = STEP_TIMES_NOTE;
    this.canvas.dataset.drawnA = String(this.drawn.a);
    this.canvas.dataset.drawnB = String(this.drawn.b);
  }

  drawRuler(ctx, start, end, scale, width) {
    ctx.fillStyle = "#22252b";
    ctx.fillRect(0, 0, width, RULER_H);
    const step = niceStep(end - start, this.plotWidth);
    ctx.fillStyle = "#8e94a0";
    ctx.strokeStyle = "#454a54";
    ctx.beginPath();
    for (let t = Math.ceil(start / step) * step; t <= end; t += step) {
      const x = Math.round(LABEL_W + (t - start) * scale) + 0.5;
      ctx.moveTo(x, RULER_H - 6);
      ctx.lineTo(x, RULER_H);
      ctx.fillText(formatShift(t), x + 3, RULER_H / 2);
    }
    ctx.stroke();
    ctx.fillStyle = "#22252b";
    ctx.fillRect(0, 0, LABEL_W, RULER_H);
    ctx.fillStyle = "#c9ccd3";
    ctx.fillText("time from step start", 8, RULER_H / 2);
  }

  drawBand(ctx, band, xOf, scale, width) {
    const side = this.data[band.side];
    const top = band.y;
    const bottom = band.end;
    // the step's extent, and the alignment line at 0
    if (side.step_start_ns !== null && side.step_end_ns !== null) {
      const x0 = Math.max(LABEL_W, xOf(side.step_start_ns));
      const x1 = Math.min(width, xOf(side.step_end_ns));
      if (x1 > x0) {
        ctx.fillStyle = "rgba(76, 141, 255, 0.06)";
        ctx.fillRect(x0, top, x1 - x0, bottom - top);
      }
    }
    ctx.fillStyle = band.side === "a" ? "#2a3550" : "#3a2f48";
    ctx.fillRect(0, top, width, BAND_H - 2);
    ctx.fillStyle = "#f1f3f6";
    const span = side.step_end_ns !== null && side.step_start_ns !== null
      ? ` (${side.step === null ? "" : "ProfilerStep span: "}${formatDuration(side.step_end_ns - side.step_start_ns)})` : "";
    const from = { device: ", from its first device task",
      trace: ", from the trace start (no ProfilerStep in the trace)" }[side.align_on] || "";
    const where = side.step === null ? `whole rank, from its trace start${span}` : `step ${side.step}${span}${from}`;
    const title = `${band.side.toUpperCase()} · ${side.run_name} · rank ${side.rank} · ${where}`;
    ctx.fillText(title, 8, top + (BAND_H - 2) / 2);
    this.titles.push(title);
    let drawn = 0;
    if (!band.lanes.length) {
      ctx.fillStyle = "#8e94a0";
      const why = side.has_trace ? "no device lanes in this rank's trace"
        : "this rank has no trace: no timeline to draw";
      ctx.fillText(why, 8, top + BAND_H + ROW_H / 2);
    }
    for (const { lane, y, rows } of band.lanes) {
      ctx.fillStyle = "#22252b";
      ctx.fillRect(0, y, LABEL_W - 4, rows * ROW_H);
      ctx.fillStyle = "#c9ccd3";
      const hidden = (lane.max_depth || 0) + 1 - rows;
      const label = laneLabel(lane) + (hidden > 0 ? ` (+${hidden} rows)` : "") + (lane.truncated ? " …" : "");
      ctx.save();
      ctx.beginPath();
      ctx.rect(0, y, LABEL_W - 6, ROW_H);
      ctx.clip();
      ctx.fillText(label, 8, y + ROW_H / 2);
      ctx.restore();
      drawn += this.drawLane(ctx, lane, y, rows, xOf, scale, width, side);
    }
    // the alignment line: where both sides' steps start
    const x0 = xOf(0);
    if (x0 >= LABEL_W && x0 <= width) {
      ctx.strokeStyle = "rgba(242, 184, 75, 0.9)";
      ctx.beginPath();
      ctx.moveTo(Math.round(x0) + 0.5, top);
      ctx.lineTo(Math.round(x0) + 0.5, bottom);
      ctx.stroke();
    }
    const stepEnd = side.step === null ? null : side.step_end_ns;
    if (stepEnd !== null && xOf(stepEnd) >= LABEL_W && xOf(stepEnd) <= width) {
      ctx.strokeStyle = "rgba(201, 204, 211, 0.55)";
      ctx.beginPath();
      ctx.moveTo(Math.round(xOf(stepEnd)) + 0.5, top + BAND_H - 2);
      ctx.lineTo(Math.round(xOf(stepEnd)) + 0.5, bottom);
      ctx.stroke();
    }
    const dev = side.marks?.device_start;
    if (dev !== undefined && dev !== null && dev !== 0) {
      const x = xOf(dev);
      if (x >= LABEL_W && x <= width) {
        ctx.setLineDash([4, 3]);
        ctx.strokeStyle = "rgba(62, 207, 142, 0.8)";
        ctx.beginPath();
        ctx.moveTo(Math.round(x) + 0.5, top + BAND_H - 2);
        ctx.lineTo(Math.round(x) + 0.5, bottom);
        ctx.stroke();
        ctx.setLineDash([]);
      }
    }
    this.drawn[band.side] = drawn;
  }

  drawLane(ctx, lane, y, rows, xOf, scale, width, side) {
    const names = this.data.names;
    const n = lane.count;
    // the neighbouring steps stay visible for context, dimmed: the step itself is what is compared
    const lo = side.step === null ? -Infinity : side.step_start_ns ?? -Infinity;
    const hi = side.step === null ? Infinity : side.step_end_ns ?? Infinity;
    let drawn = 0;
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, y, width - LABEL_W, rows * ROW_H);
    ctx.clip();
    for (let i = 0; i < n; i++) {
      const depth = Math.min(lane.depth[i], rows - 1);
      const x = xOf(lane.ts_ns[i]);
      const w = Math.max(1, lane.dur_ns[i] * scale);
      if (x > width || x + w < LABEL_W) continue;
      const name = names[lane.name_id[i]];
      const picked = this.picked && this.picked.lane === lane && this.picked.i === i;
      ctx.globalAlpha = lane.ts_ns[i] + lane.dur_ns[i] <= lo || lane.ts_ns[i] >= hi ? 0.3 : 1;
      ctx.fillStyle = picked ? "#f2b84b" : colorFor(name);
      const ry = y + depth * ROW_H + 1;
      ctx.fillRect(x, ry, w, ROW_H - 2);
      drawn += 1;
      if (w > 48) {
        ctx.fillStyle = "#fff";
        ctx.save();
        ctx.beginPath();
        ctx.rect(Math.max(x, LABEL_W), ry, w, ROW_H - 2);
        ctx.clip();
        ctx.fillText(String(name ?? ""), Math.max(x, LABEL_W) + 3, ry + (ROW_H - 2) / 2);
        ctx.restore();
      }
    }
    ctx.restore();
    return drawn;
  }

  // ------------------------------------------------------------------ hit testing, hover and pick

  /** {side, lane, i} of the slice at canvas point (x, y), or null. */
  hit(x, y) {
    if (!this.data || !this.view || x < LABEL_W) return null;
    const scale = this.plotWidth / (this.view.end - this.view.start);
    for (const band of this.layout) {
      for (const entry of band.lanes) {
        const { lane, rows } = entry;
        if (y < entry.y || y >= entry.y + rows * ROW_H) continue;
        const row = Math.floor((y - entry.y) / ROW_H);
        let best = null;
        for (let i = 0; i < lane.count; i++) {
          if (Math.min(lane.depth[i], rows - 1) !== row) continue;
          const x0 = LABEL_W + (lane.ts_ns[i] - this.view.start) * scale;
          const x1 = x0 + Math.max(1, lane.dur_ns[i] * scale);
          if (x >= x0 - 1 && x <= x1 + 1 && (best === null || lane.dur_ns[i] < lane.dur_ns[best])) best = i;
        }
        return best === null ? null : { side: band.side, lane, i: best };
      }
    }
    return null;
  }

  /** Client coordinates of the middle of slice i of a side's lane (tests hover it). */
  slicePoint(side, laneIndex, i) {
    const band = this.layout.find((b) => b.side === side);
    const entry = band?.lanes[laneIndex];
    if (!entry || !this.view) return null;
    const { lane, rows } = entry;
    const scale = this.plotWidth / (this.view.end - this.view.start);
    const x0 = Math.max(LABEL_W, LABEL_W + (lane.ts_ns[i] - this.view.start) * scale);
    const x1 = Math.min(this.wrap.clientWidth, LABEL_W + (lane.ts_ns[i] + lane.dur_ns[i] - this.view.start) * scale);
    const rect = this.canvas.getBoundingClientRect();
    return { x: rect.left + (x0 + Math.max(x0 + 1, x1)) / 2,
      y: rect.top + entry.y + Math.min(lane.depth[i], rows - 1) * ROW_H + ROW_H / 2 };
  }

  describe(h) {
    const side = this.data[h.side];
    const { lane, i } = h;
    const name = this.data.names[lane.name_id[i]] ?? "";
    const lines = [
      String(name),
      `${h.side.toUpperCase()} · ${side.run_name} · rank ${side.rank} · ${laneLabel(lane)}`,
      `start ${formatShift(lane.ts_ns[i])} from the ${side.align_on === "trace" ? "trace" : "step"} start`,
      `duration ${formatDuration(lane.dur_ns[i])}`,
    ];
    const end = lane.ts_ns[i] + lane.dur_ns[i];
    if (side.step !== null && (end <= side.step_start_ns || lane.ts_ns[i] >= side.step_end_ns)) {
      lines.push(`outside step ${side.step} (drawn dimmed)`);
    }
    if (lane.lod && lane.slice_count) {
      lines.push(`${lane.slice_count[i]} slices drawn as one block (the longest is named); zoom in to see them`);
    }
    return lines;
  }

  showTip(h, cx, cy) {
    if (!h) { this.tip.hidden = true; return; }
    const lines = this.describe(h).map((line, k) => el("div", { class: k ? "" : "cmp-tl-tip-name" }, line));
    this.tip.replaceChildren(...lines);
    this.tip.hidden = false;
    const box = this.wrap.getBoundingClientRect();
    const left = Math.min(cx - box.left + 14, box.width - this.tip.offsetWidth - 4);
    this.tip.style.left = `${Math.max(0, left)}px`;
    this.tip.style.top = `${cy - box.top + 14}px`;
  }

  pick(h) {
    this.picked = h;
    this.draw();
    this.detail.replaceChildren();
    if (!h) return;
    const side = this.data[h.side];
    const id = h.lane.slice_id[h.i];
    const link = el("a", { href: runPage(side.run_id, "timeline", { slice: id }), class: "tl-link",
      id: "cmp-tl-open" }, `Open in ${h.side.toUpperCase()}'s timeline`);
    this.detail.append(el("span", {}, this.describe(h).join(" · ")), " ", link);
    this.opts.onPick?.(h);
  }

  bindInput() {
    const c = this.canvas;
    let drag = null;
    const local = (ev) => {
      const r = c.getBoundingClientRect();
      return { x: ev.clientX - r.left, y: ev.clientY - r.top };
    };
    c.addEventListener("wheel", (ev) => {
      if (!this.view) return;
      ev.preventDefault();
      const { x } = local(ev);
      if (Math.abs(ev.deltaX) > Math.abs(ev.deltaY) || ev.shiftKey) {
        this.pan((ev.shiftKey ? ev.deltaY : ev.deltaX) / this.plotWidth);
      } else {
        this.zoom(Math.pow(1.2, ev.deltaY / 100), Math.max(0, x - LABEL_W));
      }
    }, { passive: false });
    c.addEventListener("mousedown", (ev) => {
      const p = local(ev);
      drag = { x: p.x, view: this.view && { ...this.view }, moved: false };
      c.focus();
    });
    window.addEventListener("mousemove", (ev) => {
      if (!drag || !drag.view) return;
      const dx = local(ev).x - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (!drag.moved) return;
      const d = (-dx * (drag.view.end - drag.view.start)) / this.plotWidth;
      this.view = { start: Math.round(drag.view.start + d), end: Math.round(drag.view.end + d) };
      this.draw();
      this.schedule();
    });
    window.addEventListener("mouseup", (ev) => {
      if (drag && !drag.moved && ev.target === c) {
        const p = local(ev);
        this.pick(this.hit(p.x, p.y));
      }
      drag = null;
    });
    c.addEventListener("mousemove", (ev) => {
      if (drag?.moved) { this.showTip(null); return; }
      const p = local(ev);
      this.hover = this.hit(p.x, p.y);
      this.showTip(this.hover, ev.clientX, ev.clientY);
    });
    c.addEventListener("mouseleave", () => this.showTip(null));
    c.addEventListener("dblclick", () => this.fitView());
    c.addEventListener("keydown", (ev) => {
      const k = ev.key.toLowerCase();
      if (k === "w") this.zoom(1 / ZOOM_STEP);
      else if (k === "s") this.zoom(ZOOM_STEP);
      else if (k === "a") this.pan(-0.2);
      else if (k === "d") this.pan(0.2);
      else return;
      ev.preventDefault();
    });
  }
}
