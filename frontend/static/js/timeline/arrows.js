// Flow arrows on the lanes (render.js installs these methods on the renderer): the selected slice's flows and
// the ticked categories, batched per (category, emphasis) into a few paths. An arrow whose other end is off to the
// side is drawn as a short fading stub towards it, with a chevron to click (timeline.followArrow).

import { flowColor } from "../common/colors.js";

const STUB_PX = 56;          // length of the stub drawn for an arrow whose other end is off to the side
const STUB_MIN_PX = 12;
const STUB_MAX_SLOPE = 3;    // steepest lean of a stub (dy/dx)
const STUB_FADE = [1, 0.55, 0.22];  // alpha of the stub's pieces, from the end in view outwards
const CHEVRON_PX = 4;

export const arrowMethods = {
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
  },
};

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
