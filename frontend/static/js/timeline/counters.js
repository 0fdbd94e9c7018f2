// Counter lanes (render.js installs this method on the renderer): one series of a counter track as a filled step
// line under its maximum's label.

import { formatValue } from "../common/format.js";
import { MUTED } from "./palette.js";

const HIDDEN_SERIES = new Set(["acc_id"]);

export const counterMethods = {
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
  },
};
