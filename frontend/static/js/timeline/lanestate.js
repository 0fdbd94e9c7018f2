// The timeline's lanes as the user arranges them (timeline.js installs these methods on the controller): expand
// and collapse, fold a deep track to its first levels, pin lanes on top (on one rank or on every rank), hide
// lanes, select a lane; the folds, pins and hidden lanes are remembered per run in localStorage (bounded).


const MAX_SAVED_UNFOLDS = 2000;    // bounds what one run keeps in localStorage
const MAX_SAVED_LANES = 500;       // pinned or hidden lanes kept per run

export const laneMethods = {
  toggleNode(node) {
    node.collapsed = !node.collapsed;
    this.relayout();
  },

  /** Fold a deep track to its first levels, or show them all; remembered per run. */
  toggleFold(node) {
    if (!node.deep) return;
    node.folded = !node.folded;
    this.saveFolds();
    this.relayout();
  },

  /** Fold (true) or unfold (false) every deep track. */
  foldAll(folded) {
    for (const node of this.byTrack.values()) if (node.deep) node.folded = folded;
    this.saveFolds();
    this.relayout();
  },

  get foldKey() { return `ascendscope.timeline.unfolded.${this.runId}`; },

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
  },

  saveFolds() {
    const ids = [...this.byTrack.values()].filter((n) => n.deep && !n.folded).map((n) => n.track.track_id);
    try {
      if (ids.length) localStorage.setItem(this.foldKey, JSON.stringify(ids.slice(0, MAX_SAVED_UNFOLDS)));
      else localStorage.removeItem(this.foldKey);
    } catch {
      // storage off or full: the fold state just lasts for this page
    }
  },

  togglePin(node, on = !node.pinned) {
    if (node.pinned === on) return;
    node.pinned = on;
    this.pinnedOrder = on ? [...this.pinnedOrder, node.id] : this.pinnedOrder.filter((id) => id !== node.id);
    this.saveLanes();
    this.relayout();
  },

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
  },

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
  },

  hideLane(node) {
    if (node.pinned) this.togglePin(node, false);
    this.hidden.add(node.id);
    if (this.selectedLaneId === node.id) this.selectedLaneId = null;
    this.saveLanes();
    this.relayout();
  },

  showHidden() {
    this.hidden.clear();
    this.saveLanes();
    this.relayout();
  },

  get lanesKey() { return `ascendscope.timeline.lanes.${this.runId}`; },

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
  },

  saveLanes() {
    const value = { pinned: this.pinnedOrder.slice(0, MAX_SAVED_LANES), hidden: [...this.hidden].slice(0, MAX_SAVED_LANES) };
    try {
      if (value.pinned.length || value.hidden.length) localStorage.setItem(this.lanesKey, JSON.stringify(value));
      else localStorage.removeItem(this.lanesKey);
    } catch {
      // storage off or full: pins and hidden lanes last for this page
    }
  },

  selectLane(node) {
    this.selectedLaneId = this.selectedLaneId === node.id ? null : node.id;
    for (const el of this.root.querySelectorAll(".tl-lane")) el.classList.toggle("selected", el.dataset.laneId === this.selectedLaneId);
    this.requestDraw();
  },
};
