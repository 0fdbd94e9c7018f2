// A Gantt chart on one canvas: lanes of coloured ranges on a shared time axis, with lines linking ranges across
// lanes, a tooltip on hover and a callback on click. Drawn in a few passes (grid, ranges grouped by colour, links,
// labels only where a range is wide enough), so tens of thousands of ranges paint in milliseconds where plotly's
// SVG bars take seconds. The legend and tooltip are DOM built with textContent.

import { clear, el } from "../common/dom.js";
import { formatTick } from "../common/time.js";

const LANE_PX = 20;
const BAR_PX = 14;
const LABEL_PX = 150;  // the lane names' column, widened (up to MAX_LABEL_PX) for longer names
const MAX_LABEL_PX = 280;
const FONT = "11px -apple-system, Segoe UI, Noto Sans, Arial, sans-serif";
const AXIS_PX = 28;
const PAD_PX = 12;
const MIN_LABEL_PX = 14;  // a range narrower than this shows no label
const TICK_PX = 110;

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

export class Gantt {
  /** host: an element to fill; onClick(item) when a range is clicked. */
  constructor(host, { onClick } = {}) {
    this.host = host;
    this.onClick = onClick;
    this.legend = el("div", { class: "ph-legend" });
    this.canvas = el("canvas", { class: "ph-canvas" });
    this.labelPx = LABEL_PX;
    this.tip = el("div", { class: "ph-tip", hidden: true });
    clear(host).append(this.legend, el("div", { class: "ph-canvas-wrap" }, this.canvas, this.tip));
    this.canvas.addEventListener("mousemove", (e) => this.hover(e));
    this.canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    this.canvas.addEventListener("click", (e) => {
      const item = this.itemAt(e);
      if (item && this.onClick) this.onClick(item);
    });
    host.gantt = this;  // tests find ranges' positions through it
  }

  /** lanes: names top to bottom; items: {lane, x0, x1, color, label, tip, url, marked (outlined), split (a second
   * colour for the bar's lower half: two things in one range)}; links: {lane0, x0, lane1, x1};
   * legend: [[name, color]]; unit: the x unit's ns (1e6: ms). */
  set({ lanes, items, links = [], legend = [], unit = 1e6 }) {
    this.lanes = lanes;
    this.unit = unit;
    const index = new Map(lanes.map((l, i) => [l, i]));
    this.perLane = lanes.map(() => []);
    for (const it of items) {
      const i = index.get(it.lane);
      if (i !== undefined) this.perLane[i].push(it);
    }
    for (const list of this.perLane) list.sort((a, b) => a.x0 - b.x0);
    this.links = links.map((k) => ({ ...k, i0: index.get(k.lane0), i1: index.get(k.lane1) }))
      .filter((k) => k.i0 !== undefined && k.i1 !== undefined);
    let lo = Infinity;
    let hi = -Infinity;
    for (const it of items) { lo = Math.min(lo, it.x0); hi = Math.max(hi, it.x1); }
    if (!(lo < hi)) { lo = 0; hi = 1; }
    this.lo = lo;
    this.hi = hi;
    this.count = items.length;
    const g = this.canvas.getContext("2d");
    g.font = FONT;
    const longest = Math.max(0, ...lanes.map((l) => g.measureText(l).width));
    this.labelPx = Math.min(MAX_LABEL_PX, Math.max(LABEL_PX, Math.ceil(longest) + 16));
    clear(this.legend).append(...legend.map(([name, color]) => el("span", { class: "ph-legend-item" },
      el("span", { class: "ph-swatch", "data-color": color }), name)));
    for (const sw of this.legend.querySelectorAll(".ph-swatch")) sw.style.background = sw.dataset.color;
    this.draw();
  }

  plotWidth() {
    return Math.max(100, this.width - this.labelPx - PAD_PX);
  }

  xPx(x) {
    return this.labelPx + ((x - this.lo) / (this.hi - this.lo)) * this.plotWidth();
  }

  draw() {
    const dpr = window.devicePixelRatio || 1;
    this.width = this.host.clientWidth || 1000;
    const height = this.lanes.length * LANE_PX + AXIS_PX + PAD_PX;
    this.canvas.width = Math.round(this.width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.canvas.style.width = `${this.width}px`;
    this.canvas.style.height = `${height}px`;
    const g = this.canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, this.width, height);
    g.font = FONT;
    g.textBaseline = "middle";
    // grid and axis
    const step = niceStep(this.hi - this.lo, this.plotWidth() / TICK_PX);
    const bottom = this.lanes.length * LANE_PX + PAD_PX / 2;
    g.strokeStyle = "#343840";
    g.fillStyle = "#8e94a0";
    g.textAlign = "center";
    for (let t = Math.ceil(this.lo / step) * step; t <= this.hi; t += step) {
      const x = Math.round(this.xPx(t)) + 0.5;
      g.beginPath(); g.moveTo(x, 0); g.lineTo(x, bottom); g.stroke();
      g.fillText(formatTick(t * this.unit, step * this.unit, this.hi * this.unit), x, bottom + AXIS_PX / 2);
    }
    g.textAlign = "right";
    this.lanes.forEach((lane, i) => g.fillText(lane, this.labelPx - 8, i * LANE_PX + LANE_PX / 2 + PAD_PX / 2));
    // ranges grouped by colour: one fill style change per colour
    const byColor = new Map();
    this.perLane.forEach((list, i) => {
      for (const it of list) {
        if (!byColor.has(it.color)) byColor.set(it.color, []);
        byColor.get(it.color).push([i, it]);
      }
    });
    const top = (i) => i * LANE_PX + (LANE_PX - BAR_PX) / 2 + PAD_PX / 2;
    for (const [color, list] of byColor) {
      g.fillStyle = color;
      for (const [i, it] of list) {
        const x0 = this.xPx(it.x0);
        g.fillRect(x0, top(i), Math.max(1, this.xPx(it.x1) - x0 - 0.5), BAR_PX);
      }
    }
    this.perLane.forEach((list, i) => {  // the split bars' lower halves (few: one style change each is fine)
      for (const it of list) {
        if (!it.split) continue;
        g.fillStyle = it.split;
        const x0 = this.xPx(it.x0);
        g.fillRect(x0, top(i) + BAR_PX / 2, Math.max(1, this.xPx(it.x1) - x0 - 0.5), BAR_PX / 2);
      }
    });
    g.strokeStyle = "#f1f3f6";  // the marked ranges (the deciding chain) outlined
    g.lineWidth = 1.5;
    this.perLane.forEach((list, i) => {
      for (const it of list) {
        if (it.marked) g.strokeRect(this.xPx(it.x0), top(i), Math.max(1, this.xPx(it.x1) - this.xPx(it.x0) - 0.5), BAR_PX);
      }
    });
    g.lineWidth = 1;
    g.strokeStyle = "rgba(220,220,220,0.45)";
    g.beginPath();
    for (const k of this.links) {  // from the bottom edge downwards, or the top edge upwards
      const down = k.i1 >= k.i0;
      g.moveTo(this.xPx(k.x0), top(k.i0) + (down ? BAR_PX : 0));
      g.lineTo(this.xPx(k.x1), top(k.i1) + (down ? 0 : BAR_PX));
    }
    g.stroke();
    g.fillStyle = "#f1f3f6";
    g.textAlign = "center";
    this.perLane.forEach((list, i) => {
      for (const it of list) {
        const x0 = this.xPx(it.x0);
        const w = this.xPx(it.x1) - x0;
        if (it.label && w >= MIN_LABEL_PX) g.fillText(it.label, x0 + w / 2, top(i) + BAR_PX / 2);
      }
    });
  }

  itemAt(e) {
    const box = this.canvas.getBoundingClientRect();
    const px = e.clientX - box.left;
    const i = Math.floor((e.clientY - box.top - PAD_PX / 2) / LANE_PX);
    const list = this.perLane?.[i];
    if (!list || px < this.labelPx) return null;
    const x = this.lo + ((px - this.labelPx) / this.plotWidth()) * (this.hi - this.lo);
    const slack = (2 / this.plotWidth()) * (this.hi - this.lo);  // 2 px either side
    let a = 0;
    let b = list.length;
    while (a < b) {  // the last range starting at or before x
      const m = (a + b) >> 1;
      if (list[m].x0 <= x + slack) a = m + 1; else b = m;
    }
    for (let k = a - 1; k >= 0 && k >= a - 4; k -= 1) if (list[k].x1 >= x - slack) return list[k];
    return null;
  }

  hover(e) {
    const item = this.itemAt(e);
    this.canvas.style.cursor = item ? "pointer" : "default";
    if (!item) { this.tip.hidden = true; return; }
    this.tip.textContent = item.tip;
    this.tip.hidden = false;
    const box = this.canvas.getBoundingClientRect();
    this.tip.style.left = `${Math.min(e.clientX - box.left + 12, this.width - 320)}px`;
    this.tip.style.top = `${e.clientY - box.top + 14}px`;
  }

  /** The viewport position of the middle of the range whose url is `url` (tests click it). */
  centerOf(url) {
    const box = this.canvas.getBoundingClientRect();
    for (let i = 0; i < this.perLane.length; i += 1) {
      for (const it of this.perLane[i]) {
        if (it.url !== url) continue;
        return [box.left + (this.xPx(it.x0) + this.xPx(it.x1)) / 2, box.top + i * LANE_PX + LANE_PX / 2 + PAD_PX / 2];
      }
    }
    return null;
  }
}
