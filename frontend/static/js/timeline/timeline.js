// The timeline controller: owns the state (view, lanes, selection, range, flows, markers, per-rank offsets, pinned
// and hidden lanes), schedules redraws (one per animation frame), and keeps the URL and the #timeline data-*
// attributes current. What lies under the pointer is hittest.js's to say, over scene() (the lanes as drawn).
//
// Times are drawn times: a rank with an offset has its slices, flows and selection drawn at raw time + offset;
// requests to the server carry raw times (the range statistics carry the offsets).

import { apiGet } from "../common/api.js";
import { colorFor } from "../common/colors.js";
import { el } from "../common/dom.js";
import { formatCount } from "../common/format.js";
import { currentRank, onRankChange, page } from "../common/nav.js";
import { rescope } from "../common/scope.js";
import { sourceNote } from "../common/sources.js";
import { absNs, formatDuration, formatExact, relNs } from "../common/time.js";
import { replaceParams, runApi, urlParam } from "../common/urls.js";
import { ContextMenu } from "./contextmenu.js";
import { DataStore } from "./data.js";
import { buildFlowPicker } from "./flowpicker.js";
import { DEPTH_PX, FOLDED_ROWS, MORE_PX, SLICE_PX, TRACK_PAD_PX } from "./geometry.js";
import { rowTop } from "./hittest.js";
import { Insights } from "./insights.js";
import { buildTree, indexTree, layout, renderLabels, shownDepths, stickLabel } from "./lanes.js";
import { laneMethods } from "./lanestate.js";
import { MarkerBar } from "./markerbar.js";
import { Offsets } from "./offsets.js";
import { Panel } from "./panel.js";
import { offsetMethods } from "./rankoffsets.js";
import { Renderer } from "./render.js";
import { Search } from "./search.js";
import { selectionMethods } from "./selection.js";
import { rangeMethods } from "./timerange.js";
import { Viewport } from "./viewport.js";

const MAX_PINNED_FRACTION = 0.5;
const PREFETCH_PX = 200;
const URL_DELAY_MS = 250;
const SCROLLBAR_PX = 12;

export class Timeline {
  constructor(root) {
    this.root = root;
    this.runId = root.dataset.runId;
    this.$ = (id) => root.querySelector(`#${id}`);
    this.main = this.$("tl-main");
    this.canvas = this.$("tl-canvas");
    this.overlay = el("canvas", { class: "tl-canvas tl-overlay" });
    this.overlay.style.pointerEvents = "none";
    this.main.insertBefore(this.overlay, this.$("tl-vscroll"));
    this.scrollY = 0;
    this.selection = null;
    this.selectedFlows = [];
    this.range = null;
    this.rubber = null;
    this.hover = null;
    this.hoverX = null;
    this.selectedLaneId = null;
    this.pinnedOrder = [];
    this.hidden = new Set();
    this.offsets = new Offsets(this.runId);
    this.enabledCats = new Set();
    this.arrows = [];
    this.frame = 0;
    this.ready = false;
    this._detailToken = 0;
    this._rangeCtl = null;
  }

  /** True for a lane of a rank shown from its overview (no slices to select yet). */
  inOverview(trackId) {
    const t = this.tracks.get(trackId);
    return Boolean(t && this.overviewRanks.has(t.rank));
  }

  async init() {
    const tr = await apiGet(runApi(this.runId, "/timeline/tracks"));
    // a big sharded run loaded without the rank picked (?rank=) or the linked slice's (?slice=): the page reloads
    // asking for them, and nothing of this one is drawn meanwhile
    if (rescope(currentRank(), urlParam("slice"), page.ingest?.pending)) return new Promise(() => {});
    this.origin = BigInt(tr.origin_ns);
    this.runStart = relNs(tr.start_ns, this.origin);
    this.baseStart = this.runStart;
    this.baseEnd = relNs(tr.end_ns, this.origin);
    this.viewport = new Viewport(this.baseStart, this.baseEnd);
    this.tracks = new Map(tr.tracks.map((t) => [t.track_id, t]));
    this.ranks = tr.ranks;
    this.overviewRanks = new Set();
    // a big rank still ingesting, shown from its overview (every lane's busy time, coarse): the ruler shades the
    // time still to come (all of it: nothing is loaded exactly), and its lanes can be looked at, not clicked
    this.stillComing = Object.entries(tr.partial_ranks || {}).map(([rank, p]) => (
      { rank: Number(rank), start: p.loaded_end_ns, end: p.end_ns, overview: Boolean(p.overview) }));
    this.overviewRanks = new Set(this.stillComing.filter((c) => c.overview).map((c) => c.rank));
    this.$("tl-ruler").dataset.stillComing = JSON.stringify(this.stillComing);
    this.offsets.load();
    this.updateBounds();
    if (!tr.tracks.length) {  // a run without trace_view.json: say so instead of an empty canvas
      this.$("tl-notrace").hidden = false;
      this.$("tl-notrace").append(sourceNote(tr.empty_sources, { id: "tl-notrace-why" }) || "");
      this.root.dataset.noTrace = "true";
    }
    this.tree = buildTree(tr.tracks);
    ({ byId: this.byId, byTrack: this.byTrack } = indexTree(this.tree));
    this.loadFolds();
    this.loadLanes();
    this.flowCategories = tr.flow_categories;
    this.data = new DataStore(this.runId, this.origin, () => this.requestDraw(), (n) => this.setPending(n),
      (trackId) => this.offTrack(trackId), tr.slices_per_px);
    this.renderer = new Renderer(this.canvas, this.overlay, this.$("tl-ruler"));
    this.panel = new Panel(this.$("tl-panel"), {
      jump: (id) => this.select(id, { reveal: true, keepPanel: true }),
      toggle: () => this.togglePanel(),
      resized: () => this.resize(),
      instances: (name, offset, limit) => this.rangeInstances(name, offset, limit),
      systemView: {
        runId: this.runId,
        jump: (id) => this.select(id, { reveal: true, keepPanel: true }),
        rawWindow: (rank, scope) => (scope ? { start_ns: this.abs(scope.start - this.offRank(rank)),
          end_ns: this.abs(scope.end - this.offRank(rank)) } : {}),
        defaultRank: () => this.rankFilter,
        describeScope: (scope) => `${formatDuration(scope.end - scope.start)} from ${formatExact(scope.start - this.runStart)}`,
      },
    });
    this.search = new Search(this.runId, this.origin, {
      onHit: (hit) => this.select(hit.slice_id, { reveal: true,
        hint: { ...hit, ts_ns: hit.ts_ns + this.offTrack(hit.track_id) } }),
      onChange: () => this.renderSearch(),
    });
    this.markers = new MarkerBar(this);
    this.insights = new Insights(this);  // wait chains and the critical path (insights.js)
    this.markers.bindList(this.$("tl-markers-btn"), this.$("tl-markers-pop"));
    this.menu = new ContextMenu(this.root);
    this.rankFilter = currentRank();
    onRankChange((rank) => { this.rankFilter = rank; this.relayout(); });
    buildFlowPicker(this.$("tl-flows-btn"), this.$("tl-flows-pop"), this.flowCategories, (cats) => {
      this.enabledCats = cats;
      this.requestDraw();
    });
    this.relayout();
    new ResizeObserver(() => this.resize()).observe(this.main);
    this.resize();
    await this.applyUrl();
    this.ready = true;
    this.requestDraw();
  }

  // ---- geometry ---------------------------------------------------------------------------------------------
  get W() { return this.renderer.W; }
  get H() { return this.renderer.H; }
  get k() { return this.W / this.viewport.span; }
  xOf(t) { return (t - this.viewport.start) * this.k; }
  tOf(x) { return this.viewport.start + x / this.k; }
  abs(rel) { return absNs(rel, this.origin); }
  rel(absText) { return relNs(absText, this.origin); }

  /** The lanes as drawn now, for hit testing (hittest.js). */
  scene() {
    return { layout: this.layout, pinnedH: this.pinnedH, scrollY: this.scrollY, view: this.viewport, k: this.k,
      data: this.data };
  }

  resize() {
    const labelW = this.$("tl-labels").offsetWidth;
    const W = Math.max(50, this.main.clientWidth - labelW - SCROLLBAR_PX);
    const H = Math.max(40, this.main.clientHeight);
    this.renderer.resize(W, H, W, this.$("tl-ruler").clientHeight || 30);
    this.relayout();
  }

  relayout() {
    this.layout = layout(this.tree, this.rankFilter, this.pinnedOrder, this.byId, this.hidden);
    this.pinnedH = Math.min(this.layout.pinnedHeight, Math.floor((this.H || 400) * MAX_PINNED_FRACTION));
    const handlers = { toggle: (n) => this.toggleNode(n), fold: (n) => this.toggleFold(n),
      pin: (n) => this.togglePin(n), select: (n) => this.selectLane(n), offsetOf: (rank) => this.offRank(rank),
      editOffset: (n, chip) => this.editOffset(n.rank, chip) };
    const pinnedBox = this.$("tl-labels-pinned");
    pinnedBox.style.height = `${this.pinnedH}px`;
    renderLabels(pinnedBox, this.layout.pinned, handlers, this.selectedLaneId);
    renderLabels(this.$("tl-labels-inner"), this.layout.scroll, handlers, this.selectedLaneId);
    this._stuck = null;
    this.$("tl-labels-inner").style.height = `${this.layout.scrollHeight}px`;
    const scrollBox = this.$("tl-labels-scroll");
    scrollBox.style.height = `${Math.max(0, this.H - this.pinnedH)}px`;
    const vs = this.$("tl-vscroll");
    vs.style.top = `${this.pinnedH}px`;
    this.$("tl-vscroll-spacer").style.height = `${this.layout.scrollHeight}px`;
    if (!this._vsBound) {
      vs.addEventListener("scroll", () => {
        if (Math.abs(vs.scrollTop - this.scrollY) > 0.5) this.setScroll(vs.scrollTop);
      });
      this.$("tl-labels").addEventListener("wheel", (e) => { e.preventDefault(); this.scrollBy(e.deltaY); },
        { passive: false });
      // the label boxes clip (overflow: hidden) but the browser may still scroll them, e.g. to bring a focused
      // or clicked label into view: turn that into a lane scroll so labels and canvas stay aligned
      for (const id of ["tl-labels-scroll", "tl-labels", "tl-labels-pinned"]) {
        const box = this.$(id);
        box.addEventListener("scroll", () => {
          const dy = box.scrollTop;
          if (!dy) return;
          box.scrollTop = 0;
          if (id === "tl-labels-scroll") this.setScroll(this.scrollY + dy);
        });
      }
      this._vsBound = true;
    }
    this.setScroll(this.scrollY);
    this.renderCorner();
  }

  renderCorner() {
    const corner = this.$("tl-corner");
    const text = `${this.tracks.size} tracks · ${this.tree.length} rank${this.tree.length === 1 ? "" : "s"}`;
    if (!this.hidden.size) {
      corner.textContent = text;
      return;
    }
    const show = el("button", { class: "tl-link", id: "tl-show-hidden", title: "Show every hidden lane again",
      onclick: () => this.showHidden() }, `${this.hidden.size} hidden · show`);
    corner.replaceChildren(`${text} · `, show);
  }

  maxScroll() {
    return Math.max(0, this.layout.scrollHeight - (this.H - this.pinnedH));
  }

  setScroll(y) {
    this.scrollY = Math.max(0, Math.min(this.maxScroll(), y));
    this.$("tl-labels-inner").style.transform = `translateY(${-this.scrollY}px)`;
    this._stuck = stickLabel(this.layout.scroll, this.scrollY, this._stuck);
    const vs = this.$("tl-vscroll");
    if (Math.abs(vs.scrollTop - this.scrollY) > 0.5) vs.scrollTop = this.scrollY;
    this.requestDraw();
  }

  scrollBy(dy) { this.setScroll(this.scrollY + dy); }

  // ---- per-rank offsets ----------------------------------------------------------------------------------------

  sliceBox(trackId, ts, dur, depth) {
    const row = this.layout.rowOfTrack.get(trackId);
    if (!row || row.node.type !== "track" || row.node.track.track_id !== trackId) return null;
    if (depth >= shownDepths(row.node)) return null;
    const x0 = this.xOf(ts);
    const x1 = Math.max(x0 + 1, this.xOf(ts + dur));
    return { x0, x1, y: rowTop(this.scene(), row) + TRACK_PAD_PX + depth * DEPTH_PX, h: SLICE_PX };
  }

  flowPoint(trackId, ts, depth, k) {
    const row = this.layout.rowOfTrack.get(trackId);
    if (!row) return null;
    const own = row.node.type === "track" && row.node.track.track_id === trackId && depth !== null && depth !== undefined;
    // an end in a folded track's hidden levels lands on the strip that stands for them
    const hidden = own && depth >= shownDepths(row.node);
    const y = rowTop(this.scene(), row) + (hidden ? TRACK_PAD_PX + FOLDED_ROWS * DEPTH_PX + MORE_PX / 2
      : own ? TRACK_PAD_PX + depth * DEPTH_PX + SLICE_PX / 2 : row.h / 2);
    return { x: (ts + this.offTrack(trackId) - this.viewport.start) * k, y };
  }

  // ---- view -------------------------------------------------------------------------------------------------
  setView(start, end, opts) {
    if (this.viewport.set(start, end, opts)) this.viewChanged();
  }

  zoomBy(factor, anchorX, opts = {}) {
    const anchor = anchorX === null || anchorX === undefined ? (this.viewport.start + this.viewport.end) / 2 : this.tOf(anchorX);
    if (this.viewport.zoomAt(factor, anchor, opts)) this.viewChanged();
  }

  panBy(deltaNs, opts) {
    if (this.viewport.pan(deltaNs, opts)) this.viewChanged();
  }

  undo() {
    if (this.viewport.undo()) this.viewChanged();
  }

  resetView() {
    if (this.viewport.reset()) this.viewChanged();
  }

  viewChanged() {
    // attributes first (automation reads them right after a key press), pixels on the next frame
    this.root.dataset.viewStartNs = this.abs(this.viewport.start);
    this.root.dataset.viewEndNs = this.abs(this.viewport.end);
    this.requestDraw();
    this.scheduleUrl();
  }

  // ---- range -------------------------------------------------------------------------------------------------

  /** A short message in the status line (a failed action, say). */
  flash(text) {
    this._flash = { text, until: performance.now() + 4000 };
    this.updateStatus();
    setTimeout(() => this.updateStatus(), 4100);
  }

  // ---- panel, help, flows, search ------------------------------------------------------------------------------
  togglePanel() {
    this.panel.setCollapsed(!this.panel.collapsed);
    requestAnimationFrame(() => this.resize());
  }

  toggleHelp(force) {
    const help = this.$("tl-help");
    help.hidden = force === undefined ? !help.hidden : !force;
  }

  renderSearch() {
    const s = this.search;
    this.$("tl-search-count").textContent = !s.query ? "" : s.total ? `${s.index + 1} / ${formatCount(s.total)}` : "0 / 0";
    this.panel.showFind(s, (id) => this.laneTitle(id));
  }

  searchStep(dir) {
    const q = this.$("tl-search").value;
    this.search.step(q, dir).catch((err) => console.error("search failed", err));
  }

  // ---- URL ---------------------------------------------------------------------------------------------------
  async applyUrl() {
    const slice = urlParam("slice");
    const start = urlParam("start_ns");
    const end = urlParam("end_ns");
    if (start && end && /^\d+$/.test(start) && /^\d+$/.test(end)) this.viewport.set(this.rel(start), this.rel(end), { record: "none" });
    // a link with a range keeps that range (the slice's lanes are still scrolled into view); a bare slice zooms to it
    if (slice && /^\d+$/.test(slice)) await this.select(Number(slice), { reveal: start && end ? "lanes" : true, zoom: !(start && end) });
    this.viewport.history = [];
  }

  scheduleUrl() {
    clearTimeout(this._urlTimer);
    this._urlTimer = setTimeout(() => replaceParams({
      start_ns: this.abs(this.viewport.start),
      end_ns: this.abs(this.viewport.end),
      slice: this.selection ? this.selection.slice_id : null,
      ...this.offsets.urlParams(),
    }), URL_DELAY_MS);
  }

  // ---- drawing -----------------------------------------------------------------------------------------------
  requestDraw() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  visibleTracks() {
    const slices = [];
    const counters = [];
    const add = (row) => {
      const n = row.node;
      if (n.type === "track") (n.track.kind === "counter" ? counters : slices).push(n.track.track_id);
      else if (n.type === "group" && n.collapsed) for (const c of n.children) if (c.track.kind !== "counter") slices.push(c.track.track_id);
    };
    for (const row of this.layout.pinned) add(row);
    const top = this.scrollY - PREFETCH_PX;
    const bottom = this.scrollY + (this.H - this.pinnedH) + PREFETCH_PX;
    for (const row of this.layout.scroll) if (row.y + row.h >= top && row.y <= bottom) add(row);
    return { slices: [...new Set(slices)], counters: [...new Set(counters)] };
  }

  draw() {
    if (!this.layout || !this.W) return;
    const v = this.viewport;
    const vis = this.visibleTracks();
    this.data.ensure(v, this.W, vis.slices, vis.counters);
    const state = this.drawState();
    this.arrows = this.renderer.draw(state);
    this.insights.draw(state);
    this.renderer.drawRuler(state, this.hoverX);
    this.renderer.drawOverlay(state, this.hover);
    this.root.dataset.viewStartNs = this.abs(v.start);
    this.root.dataset.viewEndNs = this.abs(v.end);
    this.$("tl-span").textContent = formatDuration(v.span);
    this.placeRangeButton();
    this.updateStatus();
    this.refreshHover?.();  // the slices moved under a still mouse (a key pan, a zoom): its tooltip follows
  }

  drawOverlayOnly() {
    const state = this.drawState();
    this.renderer.drawRuler(state, this.hoverX);
    this.renderer.drawOverlay(state, this.hover);
    this.placeRangeButton();
  }

  drawState() {
    return {
      view: this.viewport, runStart: this.runStart, layout: this.layout, scrollY: this.scrollY, pinnedH: this.pinnedH,
      data: this.data, selection: this.selection && this.selection.track_id !== undefined ? this.selection : null,
      selectedFlows: this.selectedFlows, selectedLaneId: this.selectedLaneId, range: this.range, rubber: this.rubber,
      categoryFlows: this.enabledCats.size ? this.data.flows(this.flowWindow(), this.W, [...this.enabledCats]) : null,
      markers: this.markers ? this.markers.list : [], stillComing: this.stillComing,
      sliceBox: (...a) => this.sliceBox(...a), flowPoint: (...a) => this.flowPoint(...a), colorFor,
    };
  }

  /** The raw window whose flows can land in view: the view widened by the ranks' offsets. */
  flowWindow() {
    const [lo, hi] = this.offsets.extent();
    return { start: this.viewport.start - hi, end: this.viewport.end - lo };
  }

  setPending(n) {
    this.pending = n;
    this.updateStatus();
  }

  updateStatus() {
    const st = this.renderer.stats;
    const el = this.$("tl-status");
    const flash = this._flash && this._flash.until > performance.now() ? this._flash.text : null;
    const text = flash || (this.pending ? "loading…" : `${formatCount(st.slices)} slices drawn · ${st.ms.toFixed(1)} ms`);
    if (el.textContent !== text) el.textContent = text;
  }
}

// The controller's other responsibilities live in a module each (lanestate.js, rankoffsets.js, selection.js,
// timerange.js) as objects of methods; copying their property descriptors keeps getters getters, and `this` in them
// is the controller.
for (const methods of [laneMethods, offsetMethods, selectionMethods, rangeMethods]) {
  Object.defineProperties(Timeline.prototype, Object.getOwnPropertyDescriptors(methods));
}
