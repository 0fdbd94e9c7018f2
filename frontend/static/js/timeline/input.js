// Keyboard and mouse for the timeline (MindStudio Insight's keys): W/S zoom, A/D pan, ↑/↓ scroll lanes,
// Backspace undo, Ctrl/Cmd+0 reset, Q panel, Shift+Z zoom to range, M range from slice, K marker, ? help; wheel
// zooms, drag pans, Alt+drag zooms to the dragged range, drag on the ruler selects a range (or moves the marker
// flag under the mouse; a click on a flag edits it), click selects (on a folded track's hidden-levels strip:
// unfolds it), right-click opens the context menu (menu.js) on the lanes, their labels and the ruler.

import { el } from "../common/dom.js";
import { formatValue } from "../common/format.js";
import { formatDuration, formatExact } from "../common/time.js";
import { FOLDED_ROWS } from "./geometry.js";
import { arrowAt, counterAt, foldedAt, rowAt, sliceAt } from "./hittest.js";
import { timelineMenu } from "./menu.js";

const ZOOM_IN = 0.8;
const ZOOM_OUT = 1 / ZOOM_IN;
const PAN_FRACTION = 0.2;
const SCROLL_PX = 60;
const CLICK_SLOP_PX = 3;

export function attachInput(tl) {
  const canvas = tl.canvas;
  const ruler = tl.$("tl-ruler");
  const search = tl.$("tl-search");
  const tooltip = tl.$("tl-tooltip");
  let mouse = null;  // last canvas position while the pointer is over the canvas
  let drag = null;
  let rulerDrag = null;
  let flagDrag = null;
  let hoverFrame = 0;

  const local = (e, el) => {
    const r = el.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };

  // ---- keyboard
  document.addEventListener("keydown", (e) => {
    if (e.target === search) {
      if (e.key === "Enter") { e.preventDefault(); tl.searchStep(e.shiftKey ? -1 : 1); }
      else if (e.key === "Escape") search.blur();
      return;
    }
    if (e.target.closest && e.target.closest("input, textarea, select")) return;
    if (!tl.ready || tl.root.dataset.noTrace) return;  // no trace: no view to move, no key map to show
    const ctrl = e.ctrlKey || e.metaKey;
    if (ctrl && (e.key === "0" || e.code === "Digit0" || e.code === "Numpad0")) {
      e.preventDefault();
      tl.resetView();
      return;
    }
    if (ctrl || e.altKey) return;
    const rec = e.repeat ? { record: "coalesce", gesture: `key-${e.code}` } : { record: "push" };
    const anchorX = mouse ? mouse.x : null;
    let handled = true;
    if (e.key === "?") tl.toggleHelp();
    else if (e.shiftKey && (e.key === "Z" || e.key === "z")) tl.zoomToRange();
    else {
      switch (e.code) {
        case "KeyW": tl.zoomBy(ZOOM_IN, anchorX, rec); break;
        case "KeyS": tl.zoomBy(ZOOM_OUT, anchorX, rec); break;
        case "KeyA": tl.panBy(-PAN_FRACTION * tl.viewport.span, rec); break;
        case "KeyD": tl.panBy(PAN_FRACTION * tl.viewport.span, rec); break;
        case "ArrowUp": tl.scrollBy(-SCROLL_PX); break;
        case "ArrowDown": tl.scrollBy(SCROLL_PX); break;
        case "Backspace": tl.undo(); break;
        case "KeyQ": tl.togglePanel(); break;
        case "KeyM": tl.rangeFromSelection(); break;
        case "KeyK": {
          if (e.repeat) break;  // one marker per press, not a row of them while the key is held
          const t = tl.hoverX !== null && tl.hoverX !== undefined ? tl.tOf(tl.hoverX) : (tl.viewport.start + tl.viewport.end) / 2;
          tl.markers.addPoint(t);
          break;
        }
        case "Slash": search.focus(); search.select(); break;
        case "Escape":
          tl.toggleHelp(false);
          tl.markers.closeEditor();
          tl.clearRange();
          tl.clearSelection();
          break;
        default: handled = false;
      }
    }
    if (handled) e.preventDefault();
  });

  // ---- toolbar
  tl.$("tl-zoom-in").addEventListener("click", () => tl.zoomBy(ZOOM_IN, null));
  tl.$("tl-zoom-out").addEventListener("click", () => tl.zoomBy(ZOOM_OUT, null));
  tl.$("tl-reset").addEventListener("click", () => tl.resetView());
  tl.$("tl-unfold-all").addEventListener("click", () => tl.foldAll(false));
  tl.$("tl-fold-all").addEventListener("click", () => tl.foldAll(true));
  tl.$("tl-search-next").addEventListener("click", () => tl.searchStep(1));
  tl.$("tl-search-prev").addEventListener("click", () => tl.searchStep(-1));
  tl.$("tl-help-btn").addEventListener("click", () => tl.toggleHelp());
  tl.$("tl-help").addEventListener("click", () => tl.toggleHelp(false));

  // ---- canvas: wheel zoom, drag pan, Alt+drag zoom, click select, hover tooltip
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const p = local(e, canvas);
    const scale = e.deltaMode === 1 ? 33 : e.deltaMode === 2 ? 400 : 1;
    if (e.shiftKey) tl.scrollBy(e.deltaY * scale);
    else if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      tl.panBy((e.deltaX * scale) / tl.k, { record: "coalesce", gesture: "wheel-pan" });
    } else tl.zoomBy(Math.exp(e.deltaY * scale * 0.0015), p.x, { record: "coalesce", gesture: "wheel" });
  }, { passive: false });

  canvas.addEventListener("mousedown", (e) => {
    if (e.button !== 0) return;
    const p = local(e, canvas);
    drag = { ...p, x0: p.x, y0: p.y, start: tl.viewport.start, end: tl.viewport.end, scroll: tl.scrollY,
      alt: e.altKey, moved: false, recorded: false };
    e.preventDefault();
    tl.root.focus({ preventScroll: true });
  });

  window.addEventListener("mousemove", (e) => {
    if (drag) {
      const p = local(e, canvas);
      const dx = p.x - drag.x0;
      const dy = p.y - drag.y0;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) > CLICK_SLOP_PX) {
        drag.moved = true;
        canvas.classList.add("dragging");
      }
      if (!drag.moved) return;
      if (drag.alt) {
        tl.rubber = { x0: drag.x0, x1: Math.min(Math.max(p.x, 0), tl.W) };
        tl.drawOverlayOnly();
      } else {
        const k0 = tl.W / (drag.end - drag.start);
        tl.setView(drag.start - dx / k0, drag.end - dx / k0, { record: drag.recorded ? "none" : "push" });
        drag.recorded = true;
        tl.setScroll(drag.scroll - dy);
      }
      return;
    }
    if (flagDrag) {
      const p = local(e, ruler);
      if (Math.abs(p.x - flagDrag.x0) > CLICK_SLOP_PX) flagDrag.moved = true;
      if (flagDrag.moved) {
        const t = Math.round(tl.tOf(Math.min(Math.max(p.x, 0), tl.W)));
        tl.markers.update(flagDrag.marker.id, { [flagDrag.edge]: t }, false);
      }
      return;
    }
    if (rulerDrag) {
      const p = local(e, ruler);
      if (Math.abs(p.x - rulerDrag.x0) > CLICK_SLOP_PX) rulerDrag.moved = true;
      if (rulerDrag.moved) {
        const t = tl.tOf(Math.min(Math.max(p.x, 0), tl.W));
        tl.range = { start: Math.min(rulerDrag.t0, t), end: Math.max(rulerDrag.t0, t) };
        tl.requestDraw();
      }
    }
  });

  window.addEventListener("mouseup", (e) => {
    if (drag) {
      const d = drag;
      drag = null;
      canvas.classList.remove("dragging");
      const p = local(e, canvas);
      if (d.alt && d.moved) {
        tl.rubber = null;
        const a = Math.min(d.x0, p.x);
        const b = Math.max(d.x0, p.x);
        if (b - a > CLICK_SLOP_PX) tl.setView(tl.tOf(Math.max(a, 0)), tl.tOf(Math.min(b, tl.W)));
        tl.drawOverlayOnly();
      } else if (!d.moved) {
        click(p.x, p.y);
      }
      return;
    }
    if (flagDrag) {
      const f = flagDrag;
      flagDrag = null;
      if (f.moved) tl.markers.save();
      else tl.markers.openEditor(f.marker, e.clientX);
      return;
    }
    if (rulerDrag) {
      const r = rulerDrag;
      rulerDrag = null;
      if (r.moved && tl.range) tl.setRange(tl.range.start, tl.range.end);
      else tl.clearRange();
    }
  });

  function click(x, y) {
    const arrow = arrowAt(tl.arrows, x, y);
    if (arrow) {
      tl.followArrow(arrow, x, y);
      return;
    }
    const scene = tl.scene();
    const hit = sliceAt(scene, x, y);
    if (hit && !tl.inOverview(hit.track_id)) {  // (an overview's busy time has no slice to show yet)
      tl.select(hit.slice_id, { hint: hit });
      return;
    }
    const folded = foldedAt(scene, x, y);
    if (folded) tl.toggleFold(folded);
    else tl.clearSelection();
  }

  canvas.addEventListener("mousemove", (e) => {
    mouse = local(e, canvas);
    if (drag) return;
    if (hoverFrame) return;
    hoverFrame = requestAnimationFrame(() => {
      hoverFrame = 0;
      if (!mouse) return;
      updateHover(mouse.x, mouse.y, e);
    });
  });

  // after a redraw the pointer may be over another slice (or none) without moving: hit-test again where it is
  tl.refreshHover = () => { if (mouse && !drag) updateHover(mouse.x, mouse.y); };

  canvas.addEventListener("mouseleave", () => {
    mouse = null;
    tl.hover = null;
    tl.hoverX = null;
    tooltip.hidden = true;
    canvas.style.cursor = "";
    tl.drawOverlayOnly();
  });

  function updateHover(x, y) {
    const scene = tl.scene();
    const hit = sliceAt(scene, x, y);
    const arrow = hit ? null : arrowAt(tl.arrows, x, y);
    const folded = hit || arrow ? null : foldedAt(scene, x, y);
    tl.hoverX = x;
    tl.hover = { x, box: hit ? tl.sliceBox(hit.track_id, hit.ts_ns, hit.dur_ns, hit.depth) : null };
    canvas.style.cursor = arrow || folded ? "pointer" : "";
    tl.drawOverlayOnly();
    const counter = hit || folded ? null : counterAt(scene, x, y);
    if (!hit && !counter && !folded) {
      tooltip.hidden = true;
      return;
    }
    let rows;
    if (folded) {
      rows = [["Lane", tl.laneTitle(folded.track.track_id)], ["Click", "show every row"]];
    } else if (hit && tl.inOverview(hit.track_id)) {
      rows = [["Busy from", formatExact(hit.ts_ns - tl.runStart)], ["To", formatExact(hit.ts_ns + hit.dur_ns - tl.runStart)],
        ["Slices starting here", hit.count.toLocaleString("en-US")], ["Lane", tl.laneTitle(hit.track_id)],
        ["Overview", "the rank is still loading: no depth or details yet"]];
    } else if (hit) {
      rows = [["Duration", formatDuration(hit.dur_ns)], ["Start", formatExact(hit.ts_ns - tl.runStart)],
        ["Lane", tl.laneTitle(hit.track_id)]];
      if (hit.lod && hit.count > 1) rows.push(["Summary", `${hit.count} slices here (longest shown) — zoom in`]);
    } else {
      rows = [...counter.values.map(([series, v]) => [series, formatValue(v)]),
        ["At", formatExact(counter.t - tl.runStart)], ["Lane", tl.laneTitle(counter.track_id)]];
    }
    tooltip.replaceChildren(
      el("div", { class: "tt-name" }, hit ? hit.name : folded ? `${folded.depths - FOLDED_ROWS} more rows` : counter.name),
      ...rows.map(([k, v]) => el("div", { class: "tt-row" }, `${k}: `, el("b", {}, v))));
    tooltip.hidden = false;
    const mainRect = tl.main.getBoundingClientRect();
    const cRect = canvas.getBoundingClientRect();
    let left = cRect.left - mainRect.left + x + 14;
    let top = cRect.top - mainRect.top + y + 16;
    const tw = tooltip.offsetWidth;
    const th = tooltip.offsetHeight;
    if (left + tw > mainRect.width - 4) left = Math.max(4, left - tw - 28);
    if (top + th > mainRect.height - 4) top = Math.max(4, top - th - 28);
    tooltip.style.left = `${left}px`;
    tooltip.style.top = `${top}px`;
  }

  // ---- ruler: drag selects a range, click clears it; a marker flag drags, a click on it edits it
  ruler.addEventListener("mousedown", (e) => {
    if (e.button !== 0) return;
    const p = local(e, ruler);
    const flag = tl.markers.flagAt(p.x);
    if (flag) flagDrag = { ...flag, x0: p.x, moved: false };
    else rulerDrag = { x0: p.x, t0: tl.tOf(p.x), moved: false };
    e.preventDefault();
  });
  ruler.addEventListener("mousemove", (e) => {
    const p = local(e, ruler);
    tl.hoverX = p.x;
    ruler.style.cursor = flagDrag || tl.markers.flagAt(p.x) ? "ew-resize" : "";
    tl.drawOverlayOnly();
  });

  ruler.addEventListener("mouseleave", () => {
    tl.hoverX = null;
    ruler.style.cursor = "";
    tl.drawOverlayOnly();
  });

  // ---- right-click menu
  const openMenu = (e, ctx) => {
    e.preventDefault();
    tl.hover = null;
    tooltip.hidden = true;
    tl.menu.show(e.clientX, e.clientY, timelineMenu(tl, ctx));
  };
  canvas.addEventListener("contextmenu", (e) => {
    const p = local(e, canvas);
    const scene = tl.scene();
    const hit = sliceAt(scene, p.x, p.y);
    const row = rowAt(scene, p.y);
    openMenu(e, { t: tl.tOf(p.x), hit, node: row ? row.row.node : null });
  });
  ruler.addEventListener("contextmenu", (e) => openMenu(e, { t: tl.tOf(local(e, ruler).x), hit: null, node: null }));
  tl.$("tl-labels").addEventListener("contextmenu", (e) => {
    const label = e.target.closest(".tl-lane");
    if (!label) return;
    openMenu(e, { t: null, hit: null, node: tl.byId.get(label.dataset.laneId) || null });
  });
  tl.$("tl-range-mark").addEventListener("click", () => {
    if (tl.range) tl.markers.addRegion(tl.range.start, tl.range.end);
  });
}
