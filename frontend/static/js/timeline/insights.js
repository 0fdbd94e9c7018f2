// Two analysis overlays on the timeline, each a toolbar toggle (and `overlay=waits,path` in the URL):
// * Wait chains (/late_arrivals/chains): on every collective in view, the part of each rank's op spent waiting for
//   the group's last rank is shaded, a dashed line drops from it to the last rank's op at the moment that rank
//   arrived, and the last rank's op is outlined with its lead;
// * Critical path (/critical_path, the Critical Path page of the panel, critpath.js): the elements on the path of
//   one rank's step outlined and joined in order; the wait for another rank drawn on its collective's row.
// Drawn on the main canvas after the lanes (timeline.js calls draw(state) once per frame), with the lanes' own
// geometry (sliceBox / flowPoint), so pins, folds, scrolling and per-rank offsets apply.

import { apiGet, isAbort } from "../common/api.js";
import { formatDuration } from "../common/time.js";
import { replaceParams, runApi, urlParam } from "../common/urls.js";
import { CritPathPage } from "./critpath.js";
import { LABEL_FONT } from "./geometry.js";
import { lateSection } from "./latedetail.js";

const WAIT_FILL = "rgba(232, 83, 58, 0.35)";
const WAIT_LINE = "#ff9f43";
const LATE_OUTLINE = "#e8533a";
const PATH_FILL = "rgba(255, 214, 10, 0.22)";
const PATH_LINE = "#ffd60a";
const REMOTE_FILL = "rgba(255, 159, 67, 0.28)";
const FETCH_DELAY_MS = 150;

export class Insights {
  constructor(tl) {
    this.tl = tl;
    const asked = (urlParam("overlay") || "").split(",");
    this.waits = asked.includes("waits");
    this.path = asked.includes("path");
    this.chains = null;  // {window: {start, end} relative ns, instances}
    this.pending = null;
    this.timer = 0;
    this.drawn = { waits: 0, late: 0, path: 0, remote: 0 };
    this.page = new CritPathPage(tl.$("tl-critpath"), {
      runId: tl.runId, jump: (id) => tl.select(id, { reveal: true, keepPanel: true }),
      showTime: (startAbs, endAbs) => tl.setView(tl.rel(startAbs), tl.rel(endAbs)),
      ranks: () => this.shownRanks(),
      defaultRank: () => tl.rankFilter, changed: () => tl.requestDraw(),
      onShow: (on) => this.setPath(on), relMs: (abs) => formatDuration(tl.rel(abs) - tl.runStart),
    });
    this.bind(tl.$("tl-waits-btn"), () => this.setWaits(!this.waits));
    this.bind(tl.$("tl-path-btn"), () => this.setPath(!this.path, true));
    this.syncButtons();
    this.page.setShown(this.path);
    if (this.path) this.page.load();
  }

  /** Slice Detail of a collective op: its late arrival across ranks (latedetail.js), put on top of the detail's
   * right column when it answers while the slice is still the one shown. */
  async sliceDetail(d, token) {
    let box = null;
    try {
      box = await lateSection(this.tl.runId, d, this.shownRanks());
    } catch {
      return;  // the detail stands without it
    }
    if (!box || token !== this.tl._detailToken) return;
    const right = this.tl.panel.detail.querySelector(".tl-detail-grid > .tl-detail:last-child");
    if (right) right.prepend(box);
  }

  shownRanks() {
    return [...new Set([...this.tl.tracks.values()].map((t) => t.rank))].sort((a, b) => a - b);
  }

  bind(btn, fn) {
    if (btn) btn.addEventListener("click", fn);
  }

  syncButtons() {
    for (const [id, on] of [["tl-waits-btn", this.waits], ["tl-path-btn", this.path]]) {
      const b = this.tl.$(id);
      if (b) {
        b.classList.toggle("active", on);
        b.setAttribute("aria-pressed", on ? "true" : "false");
      }
    }
    this.tl.root.dataset.overlay = [this.waits ? "waits" : null, this.path ? "path" : null].filter(Boolean).join(",");
    replaceParams({ overlay: this.tl.root.dataset.overlay || null });
  }

  setWaits(on) {
    this.waits = on;
    this.syncButtons();
    this.tl.requestDraw();
  }

  /** Show (or hide) the critical path; `open` also brings its panel page forward. */
  setPath(on, open = false) {
    this.path = on;
    this.page.setShown(on);
    if (on) {
      if (open) this.tl.panel.show("critpath");
      this.page.load();
    }
    this.syncButtons();
    this.tl.requestDraw();
  }

  // ---- wait chains ----------------------------------------------------------------------------------------------
  ensureChains() {
    const v = this.tl.viewport;
    const w = this.chains && this.chains.window;
    const span = v.end - v.start;
    if (w && v.start >= w.start && v.end <= w.end && span * 16 >= w.end - w.start) return;
    const want = { start: v.start - span, end: v.end + span };
    if (this.pending && this.pending.start <= want.start && this.pending.end >= want.end) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.fetchChains(want), FETCH_DELAY_MS);
  }

  async fetchChains(want) {
    this.pending = want;
    const ranks = [...new Set([...this.tl.tracks.values()].map((t) => t.rank))];
    try {
      const answer = await apiGet(runApi(this.tl.runId, "/late_arrivals/chains"), {
        start_ns: this.tl.abs(Math.floor(want.start)), end_ns: this.tl.abs(Math.ceil(want.end)),
        waiters: ranks.join(",") });
      this.chains = { window: want, instances: answer.available ? answer.instances : [],
        note: answer.available ? null : answer.message };
    } catch (err) {
      if (!isAbort(err)) this.chains = { window: want, instances: [], note: String(err.message) };
    } finally {
      this.pending = null;
    }
    this.tl.requestDraw();
  }

  opBox(op, s) {
    if (!op || op.track_id === null) return null;
    const start = this.tl.rel(op.start_ns) + this.tl.offTrack(op.track_id);
    return s.sliceBox(op.track_id, start, this.tl.rel(op.end_ns) - this.tl.rel(op.start_ns), 0);
  }

  drawChains(ctx, s) {
    if (!this.chains) return;
    const k = this.tl.k;
    ctx.font = LABEL_FONT;
    for (const inst of this.chains.instances) {
      if (!inst.attributed) continue;
      const late = this.opBox(inst.late, s);
      const lateAt = inst.late && inst.late.track_id !== null
        ? s.flowPoint(inst.late.track_id, this.tl.rel(inst.late.start_ns), 0, k) : null;
      for (const w of inst.waiters) {
        const box = this.opBox(w, s);
        if (!box || w.wait_ns <= 0) continue;
        const x1 = Math.min(box.x1, box.x0 + w.wait_ns * k);
        hatch(ctx, box.x0, box.y, Math.max(1, x1 - box.x0), box.h);
        this.drawn.waits += 1;
        if (lateAt) {
          const from = { x: x1, y: box.y + box.h / 2 };
          ctx.strokeStyle = WAIT_LINE;
          ctx.lineWidth = 1.5;
          ctx.setLineDash([4, 3]);
          ctx.beginPath();
          ctx.moveTo(from.x, from.y);
          ctx.lineTo(lateAt.x, lateAt.y);
          ctx.stroke();
          ctx.setLineDash([]);
          arrowHead(ctx, from, lateAt, WAIT_LINE);
        }
      }
      if (late) {
        ctx.strokeStyle = LATE_OUTLINE;
        ctx.lineWidth = 2;
        ctx.strokeRect(late.x0, late.y - 1, Math.max(2, late.x1 - late.x0), late.h + 2);
        ctx.fillStyle = LATE_OUTLINE;
        ctx.fillText(`last: rank ${inst.late_rank} (+${formatDuration(inst.lead_ns)})`, late.x0 + 2, late.y - 3);
        this.drawn.late += 1;
      }
    }
  }

  // ---- critical path --------------------------------------------------------------------------------------------
  drawPath(ctx, s) {
    const data = this.page.data;
    if (!data) return;
    let prev = null;
    ctx.font = LABEL_FONT;
    for (const seg of data.path) {
      if (seg.track_id === null || seg.kind === "before") continue;
      const off = this.tl.offTrack(seg.track_id);
      const a = this.tl.rel(seg.start_ns) + off;
      const box = s.sliceBox(seg.track_id, a, this.tl.rel(seg.end_ns) - this.tl.rel(seg.start_ns), seg.depth || 0);
      if (!box) {
        prev = null;
        continue;
      }
      if (seg.kind.startsWith("gap_")) continue;
      if (seg.kind === "remote") {
        ctx.fillStyle = REMOTE_FILL;
        ctx.fillRect(box.x0, box.y, box.x1 - box.x0, box.h);
        ctx.fillStyle = WAIT_LINE;
        ctx.fillText(`waiting for rank ${seg.rank}`, Math.max(box.x0 + 2, 2), box.y + box.h + 11);
        this.drawn.remote += 1;
      } else {
        ctx.fillStyle = PATH_FILL;
        ctx.fillRect(box.x0, box.y, box.x1 - box.x0, box.h);
        ctx.strokeStyle = PATH_LINE;
        ctx.lineWidth = 2;
        ctx.strokeRect(box.x0, box.y, Math.max(2, box.x1 - box.x0), box.h);
        this.drawn.path += 1;
      }
      const here = { x: box.x0, y: box.y + box.h / 2 };
      if (prev) {
        ctx.strokeStyle = PATH_LINE;
        ctx.lineWidth = 1.5;
        ctx.beginPath();
        ctx.moveTo(prev.x, prev.y);
        ctx.lineTo(here.x, here.y);
        ctx.stroke();
      }
      prev = { x: box.x1, y: here.y };
    }
  }

  /** Called by the timeline after the lanes are drawn, with the same state. */
  draw(s) {
    this.drawn = { waits: 0, late: 0, path: 0, remote: 0 };
    if (!this.waits && !this.path) return;
    const ctx = this.tl.renderer.ctx;
    ctx.save();
    if (this.path) this.drawPath(ctx, s);
    if (this.waits) {  // over the path: a waiting op's shading stays visible
      this.ensureChains();
      this.drawChains(ctx, s);
    }
    ctx.restore();
    this.tl.root.dataset.insights = JSON.stringify(this.drawn);
  }

  /** For automation: what the last frame drew and what was loaded. */
  debug() {
    return { waits: this.waits, path: this.path, drawn: { ...this.drawn },
      instances: this.chains ? this.chains.instances.length : null, pathData: this.page.data };
  }
}

/** The waiting part of an op: a red wash with diagonal stripes. */
function hatch(ctx, x, y, w, h) {
  ctx.save();
  ctx.beginPath();
  ctx.rect(x, y, w, h);
  ctx.clip();
  ctx.fillStyle = WAIT_FILL;
  ctx.fillRect(x, y, w, h);
  ctx.strokeStyle = "rgba(255, 235, 230, 0.55)";
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let sx = x - h; sx < x + w; sx += 6) {
    ctx.moveTo(sx, y + h);
    ctx.lineTo(sx + h, y);
  }
  ctx.stroke();
  ctx.restore();
}

function arrowHead(ctx, from, to, color) {
  const ang = Math.atan2(to.y - from.y, to.x - from.x);
  const size = 6;
  ctx.fillStyle = color;
  ctx.beginPath();
  ctx.moveTo(to.x, to.y);
  ctx.lineTo(to.x - size * Math.cos(ang - 0.4), to.y - size * Math.sin(ang - 0.4));
  ctx.lineTo(to.x - size * Math.cos(ang + 0.4), to.y - size * Math.sin(ang + 0.4));
  ctx.closePath();
  ctx.fill();
}
