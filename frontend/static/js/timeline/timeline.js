// The timeline controller: owns the state (view, lanes, selection, range, flows, markers, per-rank offsets, pinned
// and hidden lanes), schedules redraws (one per animation frame), and keeps the URL and the #timeline data-*
// attributes current. What lies under the pointer is hittest.js's to say, over scene() (the lanes as drawn).
//
// Times are drawn times: a rank with an offset has its slices, flows and selection drawn at raw time + offset;
// requests to the server carry raw times (the range statistics carry the offsets).

import { apiGet, isAbort } from "../common/api.js";
import { colorFor } from "../common/colors.js";
import { el } from "../common/dom.js";
import { formatCount } from "../common/format.js";
import { currentRank, onRankChange, page } from "../common/nav.js";
import { rescope } from "../common/scope.js";
import { sourceNote } from "../common/sources.js";
import { absNs, formatDuration, formatExact, relNs } from "../common/time.js";
import { pyQuote, replaceParams, runApi, urlParam } from "../common/urls.js";
import { ContextMenu } from "./contextmenu.js";
import { DataStore } from "./data.js";
import { buildFlowPicker } from "./flowpicker.js";
import { DEPTH_PX, FOLDED_ROWS, HEADER_PX, MORE_PX, SLICE_PX, TRACK_PAD_PX } from "./geometry.js";
import { rowTop } from "./hittest.js";
import { Insights } from "./insights.js";
import { buildTree, indexTree, layout, renderLabels, shownDepths, stickLabel } from "./lanes.js";
import { MarkerBar } from "./markerbar.js";
import { Offsets, parseOffset } from "./offsets.js";
import { Panel } from "./panel.js";
import { Renderer } from "./render.js";
import { Search } from "./search.js";
import { Viewport } from "./viewport.js";

const MAX_PINNED_FRACTION = 0.5;
const PREFETCH_PX = 200;
const URL_DELAY_MS = 250;
const SCROLLBAR_PX = 12;
const MIN_REVEAL_PX = 40;          // a slice we jump to is zoomed to at least this width
const MIN_REVEAL_SPAN_NS = 2000;
const MAX_SAVED_UNFOLDS = 2000;    // bounds what one run keeps in localStorage
const MAX_SAVED_LANES = 500;       // pinned or hidden lanes kept per run
const COMM_SUFFIX = /(_\d+)+$/;     // "hcom_allReduce__586_0_1" is an "hcom_allReduce_" (as the server groups)
const SYSTEM_VIEW_PAGE = { overlap: "overall", python: "python", cann: "cann", hardware: "hardware",
  communication: "communication" };

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
    // a big rank still ingesting, shown from its first time window: the ruler shades the time still to come
    this.stillComing = Object.entries(tr.partial_ranks || {}).map(([rank, p]) => (
      { rank: Number(rank), start: p.loaded_end_ns, end: p.end_ns }));
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

  // ---- lanes ------------------------------------------------------------------------------------------------
  toggleNode(node) {
    node.collapsed = !node.collapsed;
    this.relayout();
  }

  /** Fold a deep track to its first levels, or show them all; remembered per run. */
  toggleFold(node) {
    if (!node.deep) return;
    node.folded = !node.folded;
    this.saveFolds();
    this.relayout();
  }

  /** Fold (true) or unfold (false) every deep track. */
  foldAll(folded) {
    for (const node of this.byTrack.values()) if (node.deep) node.folded = folded;
    this.saveFolds();
    this.relayout();
  }

  get foldKey() { return `ascendscope.timeline.unfolded.${this.runId}`; }

  loadFolds() {
    let ids = [];
    try {
      ids = JSON.parse(localStorage.getItem(this.foldKey) || "[]");
    } catch {
      ids = [];  // storage off or a stale value: every deep track starts folded
    }
    if (!Array.isArray(ids)) return;
    for (const id of ids) {
      const node = this.byTrack.get(id);
      if (node && node.deep) node.folded = false;
    }
  }

  saveFolds() {
    const ids = [...this.byTrack.values()].filter((n) => n.deep && !n.folded).map((n) => n.track.track_id);
    try {
      if (ids.length) localStorage.setItem(this.foldKey, JSON.stringify(ids.slice(0, MAX_SAVED_UNFOLDS)));
      else localStorage.removeItem(this.foldKey);
    } catch {
      // storage off or full: the fold state just lasts for this page
    }
  }

  togglePin(node, on = !node.pinned) {
    if (node.pinned === on) return;
    node.pinned = on;
    this.pinnedOrder = on ? [...this.pinnedOrder, node.id] : this.pinnedOrder.filter((id) => id !== node.id);
    this.saveLanes();
    this.relayout();
  }

  /** The lanes of every rank that match `node` (same kind of process, same lane name): for side-by-side compare. */
  sameLaneOnEveryRank(node) {
    const out = [];
    const match = (n) => n.type === node.type && n.title === node.title && n.kind === node.kind
      && (node.type !== "track" || (n.parent.title === node.parent.title && n.parent.kind === node.parent.kind));
    for (const r of this.tree) {
      for (const g of r.children) {
        if (match(g)) out.push(g);
        for (const t of g.children) if (match(t)) out.push(t);
      }
    }
    return out;
  }

  pinOnEveryRank(node) {
    const all = this.sameLaneOnEveryRank(node);
    const on = !all.every((n) => n.pinned);
    for (const n of all) {
      if (n.pinned === on) continue;
      n.pinned = on;
      this.pinnedOrder = on ? [...this.pinnedOrder, n.id] : this.pinnedOrder.filter((id) => id !== n.id);
    }
    this.saveLanes();
    this.relayout();
  }

  hideLane(node) {
    if (node.pinned) this.togglePin(node, false);
    this.hidden.add(node.id);
    if (this.selectedLaneId === node.id) this.selectedLaneId = null;
    this.saveLanes();
    this.relayout();
  }

  showHidden() {
    this.hidden.clear();
    this.saveLanes();
    this.relayout();
  }

  get lanesKey() { return `ascendscope.timeline.lanes.${this.runId}`; }

  loadLanes() {
    let saved = null;
    try {
      saved = JSON.parse(localStorage.getItem(this.lanesKey) || "null");
    } catch {
      saved = null;  // storage off or a stale value: nothing pinned or hidden
    }
    if (!saved || typeof saved !== "object") return;
    const known = (ids) => (Array.isArray(ids) ? ids.filter((id) => this.byId.has(id)) : []);
    this.pinnedOrder = [...new Set(known(saved.pinned))];
    for (const id of this.pinnedOrder) this.byId.get(id).pinned = true;
    this.hidden = new Set(known(saved.hidden));
  }

  saveLanes() {
    const value = { pinned: this.pinnedOrder.slice(0, MAX_SAVED_LANES), hidden: [...this.hidden].slice(0, MAX_SAVED_LANES) };
    try {
      if (value.pinned.length || value.hidden.length) localStorage.setItem(this.lanesKey, JSON.stringify(value));
      else localStorage.removeItem(this.lanesKey);
    } catch {
      // storage off or full: pins and hidden lanes last for this page
    }
  }

  // ---- per-rank offsets ----------------------------------------------------------------------------------------
  offRank(rank) { return this.offsets.get(rank); }

  offTrack(trackId) {
    const t = this.tracks.get(trackId);
    return t ? this.offsets.get(t.rank) : 0;
  }

  /** The view may pan as far as any shifted rank reaches. */
  updateBounds() {
    const [lo, hi] = this.offsets.extent();
    if (this.viewport) this.viewport.setBounds(this.baseStart + lo, this.baseEnd + hi);
  }

  setOffset(rank, ns) {
    if (!this.offsets.set(rank, ns)) return;
    this.offsetsChanged();
  }

  clearOffsets() {
    if (this.offsets.clear()) this.offsetsChanged();
  }

  offsetsChanged() {
    this.updateBounds();
    if (this.selection && this.selection.raw_ts_ns !== undefined) {
      this.selection = { ...this.selection, ts_ns: this.selection.raw_ts_ns + this.offTrack(this.selection.track_id) };
    }
    this.relayout();
    this.requestDraw();
    this.scheduleUrl();
    this.root.dataset.offsets = this.offsets.toString();
    if (this.range) this.loadRangeStats(false);
    if (this.panel.current === "sysview") this.panel.systemView.refresh();
  }

  /** An inline editor over a rank's offset chip: "1.5ms", "-200us", "1500" (ns); Enter applies, Esc cancels. */
  editOffset(rank, chip) {
    const input = el("input", { class: "tl-offset-input", value: this.offRank(rank) ? String(this.offRank(rank)) : "",
      placeholder: "e.g. -1.5ms", title: "Offset of this rank: ns, or with a unit (us, ms, s); empty for none" });
    chip.replaceWith(input);
    input.focus();
    let done = false;
    const finish = (apply) => {
      if (done) return;
      done = true;
      const ns = input.value.trim() === "" ? 0 : parseOffset(input.value);
      if (apply && ns !== null) this.setOffset(rank, ns);
      this.relayout();
    };
    input.addEventListener("keydown", (e) => {
      e.stopPropagation();
      if (e.key === "Enter") finish(true);
      else if (e.key === "Escape") finish(false);
    });
    input.addEventListener("blur", () => finish(true));
    input.addEventListener("click", (e) => e.stopPropagation());
  }

  /** Shift the slice's rank so that the slice starts where its match on the reference rank starts. */
  async alignOn(hit, refRank) {
    const r = await apiGet(runApi(this.runId, "/timeline/align"), { slice_id: hit.slice_id, rank: refRank });
    const rank = this.tracks.get(hit.track_id).rank;
    this.setOffset(rank, this.offRank(refRank) + r.shift_ns);
    return r;
  }

  get referenceRank() { return this.ranks.length ? this.ranks[0] : null; }

  selectLane(node) {
    this.selectedLaneId = this.selectedLaneId === node.id ? null : node.id;
    for (const el of this.root.querySelectorAll(".tl-lane")) el.classList.toggle("selected", el.dataset.laneId === this.selectedLaneId);
    this.requestDraw();
  }

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

  /** Follow an arrow to its other end: the end off the side for a clipped one, else the end away from the
   * selected slice (or from the click point). An end without a slice is centred in the view instead. */
  followArrow(a, x, y) {
    let end;
    if (a.clip) end = a.clip;
    else if (this.selection && a.src_slice_id === this.selection.slice_id) end = "dst";
    else if (this.selection && a.dst_slice_id === this.selection.slice_id) end = "src";
    else end = Math.hypot(x - a.x1, y - a.y1) > Math.hypot(x - a.x2, y - a.y2) ? "src" : "dst";
    const target = end === "src" ? a.src_slice_id : a.dst_slice_id;
    if (target !== null && target !== undefined) {
      this.select(target, { reveal: true });
      return;
    }
    const raw = end === "src" ? a.src_ts_ns : a.dst_ts_ns;
    const t = raw === null || raw === undefined ? null : raw + this.offTrack(end === "src" ? a.src_track_id : a.dst_track_id);
    if (t !== null) this.setView(t - this.viewport.span / 2, t + this.viewport.span / 2);
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

  // ---- selection ---------------------------------------------------------------------------------------------
  /** Select a slice (details in Slice Detail, unless keepPanel: a list in the panel jumped here, keep showing it). */
  async select(sliceId, { reveal = false, zoom = false, hint = null, keepPanel = false } = {}) {
    const token = ++this._detailToken;
    if (hint) this.selection = { slice_id: sliceId, track_id: hint.track_id, ts_ns: hint.ts_ns, dur_ns: hint.dur_ns, depth: hint.depth };
    else if (!this.selection || this.selection.slice_id !== sliceId) this.selection = { slice_id: sliceId, pending: true };
    this.selectedFlows = [];
    this.root.dataset.selectedSliceId = String(sliceId);
    if (!keepPanel) this.panel.show("detail");
    this.panel.showLoading(sliceId);
    if (hint && reveal) this.reveal(this.selection, zoom, reveal === "lanes");
    this.requestDraw();
    this.scheduleUrl();
    let d;
    try {
      d = await apiGet(runApi(this.runId, `/timeline/slices/${sliceId}`));
    } catch (err) {
      if (token === this._detailToken) this.panel.showError(`Could not load slice ${sliceId}: ${err.message}`);
      return;
    }
    if (token !== this._detailToken) return;
    const shown = { ...d, raw_ts_ns: d.ts_ns, ts_ns: d.ts_ns + this.offTrack(d.track_id) };
    this.selection = shown;
    this.selectedFlows = d.flows.map((f) => ({
      flow_id: f.flow_id, cat: f.cat, src_track_id: f.src_track_id, src_ts_ns: f.src_ts_ns, src_slice_id: f.src_slice_id,
      src_depth: f.direction === "out" ? d.depth : f.other.depth ?? null,
      dst_track_id: f.dst_track_id, dst_ts_ns: f.dst_ts_ns, dst_slice_id: f.dst_slice_id,
      dst_depth: f.direction === "in" ? d.depth : f.other.depth ?? null,
    }));
    this.panel.showDetail(d, this.laneTitle(d.track_id));
    this.insights.sliceDetail(d, token);  // a collective's late arrival, when it has one
    if (reveal && (!hint || zoom)) this.reveal(shown, zoom, reveal === "lanes");
    this.requestDraw();
  }

  clearSelection() {
    this._detailToken++;
    this.selection = null;
    this.selectedFlows = [];
    this.root.dataset.selectedSliceId = "";
    this.panel.clearDetail();
    this.requestDraw();
    this.scheduleUrl();
  }

  laneTitle(trackId) {
    const t = this.tracks.get(trackId);
    if (!t) return "";
    return `Rank ${t.rank} / ${t.process_name} / ${t.kind === "counter" ? t.counter_name : t.thread_name}`;
  }

  /** Bring a slice into view: expand its lanes, scroll to its row, and pan (or zoom) to it (unless lanesOnly). */
  reveal(s, zoom, lanesOnly = false) {
    const node = this.byTrack.get(s.track_id);
    if (!node) return;
    if (this.rankFilter !== null && node.rank !== this.rankFilter) {
      const sel = document.getElementById("rank-select");
      if (sel) { sel.value = ""; sel.dispatchEvent(new Event("change")); }
      this.rankFilter = null;
    }
    let changed = false;
    for (let p = node.parent; p; p = p.parent) if (p.collapsed) { p.collapsed = false; changed = true; }
    if (node.folded && (s.depth || 0) >= shownDepths(node)) {
      node.folded = false;
      this.saveFolds();
      changed = true;
    }
    if (changed) this.relayout();
    const row = this.layout.rowOfTrack.get(s.track_id);
    if (row && !row.pinnedArea) {
      const y = row.y + TRACK_PAD_PX + (s.depth || 0) * DEPTH_PX;
      const viewH = this.H - this.pinnedH;
      if (y < this.scrollY + 10 || y + DEPTH_PX > this.scrollY + viewH - 10) {
        // the lane's top just below the top edge when the slice then shows, else the slice a third down
        const top = row.y - HEADER_PX;
        this.setScroll(y + DEPTH_PX < top + viewH * 0.6 ? top : y - viewH / 3);
      }
    }
    if (lanesOnly) return;
    const v = this.viewport;
    const dur = Math.max(s.dur_ns, 1);
    const mid = s.ts_ns + dur / 2;
    if (zoom) {
      const span = Math.max(dur * 3, MIN_REVEAL_SPAN_NS);
      this.setView(mid - span / 2, mid + span / 2);
    } else if (dur * this.k < MIN_REVEAL_PX) {
      const span = Math.max(dur * 5, MIN_REVEAL_SPAN_NS);
      this.setView(mid - span / 2, mid + span / 2);
    } else if (s.ts_ns < v.start || s.ts_ns + dur > v.end) {
      const span = Math.max(v.span, dur * 1.2);
      this.setView(mid - span / 2, mid + span / 2);
    }
  }

  revealTrack(trackId) {
    const node = this.byTrack.get(trackId);
    if (!node) return null;
    this.reveal({ track_id: trackId, ts_ns: this.viewport.start, dur_ns: this.viewport.span - 1, depth: 0 }, false);
    return this.layout.rowOfTrack.get(trackId) || null;
  }

  // ---- range -------------------------------------------------------------------------------------------------
  setRange(a, b) {
    const start = Math.min(a, b);
    const end = Math.max(a, b);
    if (end - start < 1) { this.clearRange(); return; }
    this.range = { start, end };
    this.requestDraw();
    this.loadRangeStats();
  }

  clearRange() {
    this.range = null;
    if (this._rangeCtl) this._rangeCtl.abort();
    this.panel.clearRange();
    this.requestDraw();
  }

  /** Parameters of the range queries: the range (drawn time), the rank filter's tracks, the ranks' offsets. */
  rangeParams(range) {
    const trackIds = this.rankFilter === null ? [] : [...this.tracks.values()]
      .filter((t) => t.rank === this.rankFilter && t.kind !== "counter").map((t) => t.track_id);
    const offs = this.offsets.entries();
    return { start_ns: this.abs(range.start), end_ns: this.abs(range.end), track_id: trackIds,
      offset_rank: offs.map(([r]) => r), offset_ns: offs.map(([, v]) => v) };
  }

  async loadRangeStats(showPage = true) {
    if (this._rangeCtl) this._rangeCtl.abort();
    const ctl = new AbortController();
    this._rangeCtl = ctl;
    const range = { ...this.range };
    if (showPage) this.panel.show("range");
    this.panel.showRange(null, range, true);
    try {
      const r = await apiGet(runApi(this.runId, "/timeline/range_stats"), this.rangeParams(range),
        { signal: ctl.signal });
      if (this._rangeCtl === ctl) this.panel.showRange(r, range, false);
    } catch (err) {
      if (!isAbort(err)) this.panel.showError(err.message);
    }
  }

  rangeInstances(name, offset, limit) {
    if (!this.range) return Promise.reject(new Error("no range selected"));
    return apiGet(runApi(this.runId, "/timeline/range_instances"),
      { ...this.rangeParams(this.range), name, offset, limit });
  }

  /** Send the selected range to System View (for `rank`, or the lane's, or the first shown). */
  timeRangeAnalysis(rank = null) {
    if (!this.range) return;
    const sv = this.panel.systemView;
    sv.setScope({ ...this.range });
    sv.setRank(rank ?? this.rankFilter ?? sv.rank);
    this.panel.show("sysview");
  }

  /** System View on the row a slice belongs to (its rank, its lane's page, its name). */
  showInSystemView(hit) {
    const track = this.tracks.get(hit.track_id);
    const page = track && SYSTEM_VIEW_PAGE[track.kind];
    if (!page) return;
    let key = hit.name;
    if (page === "overall") key = `overlap:${pyQuote(hit.name)}`;
    else if (page === "communication") key = hit.name.replace(COMM_SUFFIX, "");
    this.panel.show("sysview");
    this.panel.systemView.showRow(track.rank, page, key, page === "communication" ? key : hit.name);
  }

  canShowInSystemView(hit) {
    const track = hit && this.tracks.get(hit.track_id);
    return !!(track && SYSTEM_VIEW_PAGE[track.kind]);
  }

  zoomToRange() {
    if (this.range) this.setView(this.range.start, this.range.end);
  }

  /** The view on a slice (a little margin each side), on a lane's extent, or on the whole run. */
  fitToScreen(hit, node) {
    if (hit) {
      const pad = Math.max(hit.dur_ns * 0.05, 10);
      this.setView(hit.ts_ns - pad, hit.ts_ns + hit.dur_ns + pad);
      return;
    }
    const tracks = [];
    const collect = (n) => (n.type === "track" ? tracks.push(n.track) : n.children.forEach(collect));
    if (node) collect(node);
    const spans = tracks.filter((t) => t.min_ts_ns !== null && t.max_end_ns !== null)
      .map((t) => [t.min_ts_ns + this.offRank(t.rank), t.max_end_ns + this.offRank(t.rank)]);
    if (!spans.length) { this.resetView(); return; }
    const a = Math.min(...spans.map((x) => x[0]));
    const b = Math.max(...spans.map((x) => x[1]));
    const pad = (b - a) * 0.02;
    this.setView(a - pad, b + pad);
  }

  /** Open the offset editor of a rank's header row (scrolled into view first). */
  editRankOffset(rank) {
    const row = this.layout.scroll.find((r) => r.node.id === `r${rank}`);
    if (row) this.setScroll(row.y);
    const chip = this.root.querySelector(`#tl-labels-inner .tl-lane.lane-rank[data-rank="${rank}"] .offset`);
    if (chip) this.editOffset(rank, chip);
  }

  /** A short message in the status line (a failed action, say). */
  flash(text) {
    this._flash = { text, until: performance.now() + 4000 };
    this.updateStatus();
    setTimeout(() => this.updateStatus(), 4100);
  }

  /** The "keep as region marker" button sits at the selected range's right edge in the ruler. */
  placeRangeButton() {
    const btn = this.$("tl-range-mark");
    const x = this.range ? this.xOf(this.range.end) : -1;
    btn.hidden = !(this.range && x >= 0 && x <= this.W);
    if (!btn.hidden) btn.style.left = `${this.$("tl-labels").offsetWidth + Math.min(x + 3, this.W - 20)}px`;
  }

  rangeFromSelection() {
    const s = this.selection;
    if (!s || s.pending || s.ts_ns === undefined) return;
    const end = s.ts_ns + Math.max(1, s.dur_ns);
    if (this.range && this.range.start === s.ts_ns && this.range.end === end) this.clearRange();
    else this.setRange(s.ts_ns, end);
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
