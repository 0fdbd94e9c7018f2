// The timeline's markers: K drops a point marker at the mouse, a selected range can be kept as a region marker.
// Each is a flag on the ruler (regions: a band with a flag at each edge) and a dashed line down the lanes; a flag
// drags (an edge of a region moves alone) and a click on it opens its editor (name, colour, go to, delete).
// The list lives in the run's shared store (common/markers.js), so the Memory view sees the same regions.
//
// In here times are the timeline's (ns relative to the origin, as drawn); the store keeps absolute epoch ns.

import { el } from "../common/dom.js";
import { MARKER_COLORS, loadMarkers, onMarkersChange, saveMarkers } from "../common/markers.js";
import { formatDuration, formatExact } from "../common/time.js";

export const FLAG_HIT_PX = 7;

export class MarkerBar {
  constructor(tl) {
    this.tl = tl;
    this.runId = tl.runId;
    this.list = [];
    this.editing = null;
    this.editor = el("div", { class: "tl-popover tl-marker-editor", id: "tl-marker-editor", hidden: true });
    tl.root.append(this.editor);
    this.reload(loadMarkers(this.runId));
    onMarkersChange(this.runId, (list) => { this.reload(list); this.renderList(); tl.requestDraw(); });
    document.addEventListener("mousedown", (e) => {
      if (!this.editor.hidden && !this.editor.contains(e.target)) this.closeEditor();
    });
  }

  reload(stored) {
    this.list = stored.map((m) => ({ id: m.id, name: m.name, color: m.color, start: this.tl.rel(m.start_ns),
      end: m.end_ns === null ? null : this.tl.rel(m.end_ns) }));
  }

  save() {
    saveMarkers(this.runId, this.list.map((m) => ({ id: m.id, name: m.name, color: m.color,
      start_ns: this.tl.abs(m.start), end_ns: m.end === null ? null : this.tl.abs(m.end) })));
  }

  nextName(prefix) {
    const used = new Set(this.list.map((m) => m.name));
    let i = 1;
    while (used.has(`${prefix} ${i}`)) i += 1;
    return `${prefix} ${i}`;
  }

  nextColor() {
    return MARKER_COLORS[this.list.length % MARKER_COLORS.length];
  }

  newId() {
    return `m${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
  }

  /** A point marker at time t; returns it. */
  addPoint(t) {
    const m = { id: this.newId(), name: this.nextName("Marker"), color: this.nextColor(), start: Math.round(t),
      end: null };
    this.list.push(m);
    this.save();
    return m;
  }

  /** A region marker over [a, b); returns it. */
  addRegion(a, b) {
    const m = { id: this.newId(), name: this.nextName("Region"), color: this.nextColor(),
      start: Math.round(Math.min(a, b)), end: Math.round(Math.max(a, b)) };
    this.list.push(m);
    this.save();
    return m;
  }

  update(id, patch, persist = true) {
    const m = this.list.find((x) => x.id === id);
    if (!m) return;
    Object.assign(m, patch);
    if (m.end !== null && m.end < m.start) [m.start, m.end] = [m.end, m.start];
    if (persist) this.save();
    this.tl.requestDraw();
  }

  remove(id) {
    this.list = this.list.filter((m) => m.id !== id);
    this.save();
    this.closeEditor();
  }

  clear() {
    this.list = [];
    this.save();
    this.closeEditor();
  }

  /** The flag under ruler x (px), preferring the nearest: {marker, edge: "start"|"end"} or null. */
  flagAt(x) {
    let best = null;
    let bestD = FLAG_HIT_PX;
    for (const m of this.list) {
      for (const edge of m.end === null ? ["start"] : ["start", "end"]) {
        const d = Math.abs(this.tl.xOf(m[edge]) - x);
        if (d < bestD) { best = { marker: m, edge }; bestD = d; }
      }
    }
    return best;
  }

  /** Move the view to a marker: a point centred at the current zoom, a region filled (and selected). */
  goTo(m) {
    const tl = this.tl;
    if (m.end === null) {
      const half = tl.viewport.span / 2;
      tl.setView(m.start - half, m.start + half);
    } else {
      const pad = (m.end - m.start) * 0.05;
      tl.setView(m.start - pad, m.end + pad);
      tl.setRange(m.start, m.end);
    }
  }

  // ---- editor popover (a click on a flag) -------------------------------------------------------------------
  openEditor(m, clientX) {
    this.editing = m.id;
    const name = el("input", { type: "text", value: m.name, maxlength: "200", "aria-label": "Marker name",
      spellcheck: "false" });
    const commit = () => { if (name.value.trim() && name.value !== m.name) this.update(m.id, { name: name.value.trim() }); };
    name.addEventListener("change", commit);
    name.addEventListener("keydown", (e) => {
      e.stopPropagation();
      if (e.key === "Enter") { commit(); this.closeEditor(); }
      if (e.key === "Escape") this.closeEditor();
    });
    const swatches = el("div", { class: "tl-swatches" }, ...MARKER_COLORS.map((c) => {
      const b = el("button", { class: "tl-swatch" + (c === m.color ? " on" : ""), title: c,
        onclick: () => { this.update(m.id, { color: c }); this.openEditor(this.list.find((x) => x.id === m.id), clientX); } });
      b.style.background = c;
      return b;
    }));
    const when = m.end === null ? `at ${formatExact(m.start - this.tl.runStart)}`
      : `${formatExact(m.start - this.tl.runStart)} → ${formatExact(m.end - this.tl.runStart)} (${formatDuration(m.end - m.start)})`;
    const actions = el("div", { class: "tl-marker-actions" },
      el("button", { class: "btn", onclick: () => { this.closeEditor(); this.goTo(m); } },
        m.end === null ? "Centre" : "Zoom & select"),
      el("button", { class: "btn danger", id: "tl-marker-delete", onclick: () => this.remove(m.id) }, "Delete"));
    this.editor.replaceChildren(name, el("div", { class: "tl-marker-when" }, when), swatches, actions);
    this.editor.hidden = false;
    const box = this.tl.root.getBoundingClientRect();
    const head = this.tl.$("tl-ruler").getBoundingClientRect();
    const w = this.editor.offsetWidth;
    this.editor.style.left = `${Math.max(4, Math.min(clientX - box.left - w / 2, box.width - w - 4))}px`;
    this.editor.style.top = `${head.bottom - box.top + 4}px`;
    name.focus();
    name.select();
  }

  closeEditor() {
    this.editor.hidden = true;
    this.editing = null;
  }

  // ---- the Markers popover in the toolbar -------------------------------------------------------------------
  bindList(button, popover) {
    this.listButton = button;
    this.listPopover = popover;
    button.addEventListener("click", (e) => {
      e.stopPropagation();
      popover.hidden = !popover.hidden;
      this.renderList();
    });
    document.addEventListener("click", (e) => {
      if (!popover.contains(e.target) && e.target !== button) popover.hidden = true;
    });
    this.renderList();
  }

  renderList() {
    if (!this.listButton) return;
    this.listButton.textContent = this.list.length ? `Markers (${this.list.length}) ▾` : "Markers ▾";
    if (this.listPopover.hidden) return;
    const rows = [...this.list].sort((a, b) => a.start - b.start).map((m) => {
      const dot = el("span", { class: "swatch" });
      dot.style.background = m.color;
      const time = m.end === null ? formatExact(m.start - this.tl.runStart) : `${formatDuration(m.end - m.start)} region`;
      return el("div", { class: "tl-marker-row", dataset: { markerId: m.id } },
        dot,
        el("a", { href: "#", class: "name", title: `Go to ${m.name}`,
          onclick: (e) => { e.preventDefault(); this.listPopover.hidden = true; this.goTo(m); } }, m.name),
        el("span", { class: "count" }, time),
        el("button", { class: "tl-x", title: `Delete ${m.name}`, onclick: (e) => { e.stopPropagation(); this.remove(m.id); this.renderList(); } }, "×"));
    });
    const foot = el("div", { class: "hint" }, "K adds a marker at the mouse; right-click a selected range to keep it as a region.");
    const clear = this.list.length ? el("button", { class: "btn", onclick: () => { this.clear(); this.renderList(); } }, "Delete all") : null;
    const parts = [...(rows.length ? rows : [el("div", { class: "hint" }, "No markers yet.")]), foot];
    if (clear) parts.push(el("div", { class: "tl-marker-actions" }, clear));
    this.listPopover.replaceChildren(...parts);
  }
}
