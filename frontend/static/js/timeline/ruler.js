// The time ruler above the lanes (render.js installs these methods on the renderer): ticks and their labels, the
// selected range and its length, the time a partially loaded rank has still to come, the hover time, and in its top
// strip the marker flags (a region: a band between two flags).

import { formatDuration, formatTick } from "../common/time.js";
import { niceStep } from "./geometry.js";
import { ACCENT, UI_FONT } from "./palette.js";

export const MARK_STRIP_PX = 15;  // the ruler's top strip: marker flags, region bands, the range's length
const FLAG_W = 9;
const FLAG_H = 8;

export const rulerMethods = {
  /** The time a partially loaded rank has still to come (its slices starting there are not read yet; all of it
   * for a rank shown from its overview): hatched across the ruler, named in its top strip. */
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
      ctx.fillText(span.overview ? `rank ${span.rank}: overview (busy time per lane), still loading`
        : `rank ${span.rank}: still loading`, xa + 4, 1.5);
      ctx.restore();
    }
  },

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
  },

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
  },
};
