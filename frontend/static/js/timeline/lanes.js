// The lane tree (rank → process → thread/stream/plane/counter), its layout into rows, and the label column.
//
// Nodes: {type: "rank"|"group"|"track", id, title, collapsed, pinned, children, track?}. layout() flattens the
// expanded, rank-filtered tree into rows {node, y, h, level}; pinned nodes go to a separate list drawn at the top
// (whatever the rank filter: pinning is how ranks are compared), hidden nodes get no row at all.
// A slice track deeper than FOLDED_ROWS + 1 levels is "deep": folded (its first levels only) until unfolded, so
// torch op stacks 30–40 levels deep do not push the device lanes off the screen.

import { el } from "../common/dom.js";
import { formatDuration, formatShift } from "../common/time.js";
import { FOLDED_ROWS, HEADER_PX, INDENT_PX, LANE_HEAD_PX, trackDepths, trackHeight } from "./geometry.js";

const KIND_TITLES = { python: "Python", cann: "CANN", hardware: "Ascend Hardware", communication: "Communication",
  overlap: "Overlap Analysis" };
// Process kinds shown expanded by default; counters and unknown processes start collapsed.
const OPEN_KINDS = new Set(["python", "cann", "hardware", "communication", "overlap"]);
const MAX_OPEN_RANKS = 4;

export function buildTree(tracks) {
  const ranks = new Map();
  for (const t of tracks) {
    if (!ranks.has(t.rank)) {
      ranks.set(t.rank, { type: "rank", id: `r${t.rank}`, rank: t.rank, title: `Rank ${t.rank}`, collapsed: false,
        pinned: false, children: [], groups: new Map() });
    }
    const rank = ranks.get(t.rank);
    const gkey = `${t.pid}`;
    let group = rank.groups.get(gkey);
    if (!group) {
      const kindTitle = KIND_TITLES[t.kind];
      group = {
        type: "group", id: `g${t.rank}:${t.pid}`, rank: t.rank, kind: t.kind,
        title: t.process_name || kindTitle || `Process ${t.pid}`,
        meta: t.kind === "python" ? `(${t.pid})` : "",
        badge: t.label || "", collapsed: !OPEN_KINDS.has(t.kind), pinned: false, children: [],
        sort: t.sort_index,
      };
      rank.groups.set(gkey, group);
      rank.children.push(group);
    }
    const depths = trackDepths(t);
    group.children.push({
      type: "track", id: `t${t.track_id}`, rank: t.rank, kind: t.kind, track: t,
      title: t.kind === "counter" ? t.counter_name || t.thread_name : t.thread_name || `Thread ${t.tid}`,
      collapsed: false, pinned: false, children: [], parent: group,
      // folding hides at least two levels: trading one level for the strip that stands for it gains nothing
      depths, deep: depths > FOLDED_ROWS + 1, folded: depths > FOLDED_ROWS + 1,
    });
  }
  const out = [...ranks.values()].sort((a, b) => a.rank - b.rank);
  out.forEach((r, i) => {
    r.collapsed = i >= MAX_OPEN_RANKS;
    r.children.sort((a, b) => a.sort - b.sort);
    for (const g of r.children) {
      g.parent = r;
      if (g.children.every((c) => c.track.kind !== "counter" && !c.track.slice_count)) g.collapsed = true;
    }
    delete r.groups;
  });
  return out;
}

/** Every node by id, and every track node by track_id. */
export function indexTree(ranks) {
  const byId = new Map();
  const byTrack = new Map();
  for (const r of ranks) {
    byId.set(r.id, r);
    for (const g of r.children) {
      byId.set(g.id, g);
      for (const t of g.children) {
        byId.set(t.id, t);
        byTrack.set(t.track.track_id, t);
      }
    }
  }
  return { byId, byTrack };
}

/** Levels of slices a track row shows now. */
export function shownDepths(node) {
  return node.folded ? FOLDED_ROWS : node.depths;
}

function nodeHeight(node) {
  return node.type === "track" ? trackHeight(node.track, shownDepths(node)) : HEADER_PX;
}

/**
 * Rows for the current state. rankFilter: null (all) or a rank. pinnedOrder: node ids in pin order. hidden: a
 * Set of node ids not to show. Returns {scroll: rows, pinned: rows, scrollHeight, pinnedHeight,
 * rowOfTrack: Map(track_id → row)}. A track inside a collapsed parent maps to the visible ancestor's row (flows
 * still have somewhere to land); a hidden one maps to none.
 */
export function layout(ranks, rankFilter, pinnedOrder, byId, hidden = new Set()) {
  const scroll = [];
  const pinned = [];
  const rowOfTrack = new Map();
  const pinnedSet = new Set(pinnedOrder);
  let y = 0;

  function emit(list, node, level, yy, prefix) {
    const row = { node, y: yy, h: nodeHeight(node), level, title: prefix + node.title, pinnedArea: list === pinned };
    list.push(row);
    return row;
  }
  function mapTracks(node, row) {
    if (node.type === "track") rowOfTrack.set(node.track.track_id, row);
    else for (const c of node.children) if (!pinnedSet.has(c.id) && !hidden.has(c.id)) mapTracks(c, row);
  }
  function walk(list, node, level, prefix, inPinned) {
    if ((!inPinned && pinnedSet.has(node.id)) || hidden.has(node.id)) return;
    const row = emit(list, node, level, list === pinned ? pY : y, prefix);
    if (list === pinned) pY += row.h;
    else y += row.h;
    if (node.type === "track") {
      rowOfTrack.set(node.track.track_id, row);
      return;
    }
    if (node.collapsed) {
      mapTracks(node, row);
      return;
    }
    for (const c of node.children) walk(list, c, level + 1, "", inPinned);
  }

  let pY = 0;
  for (const id of pinnedOrder) {
    const node = byId.get(id);
    if (!node) continue;
    walk(pinned, node, 0, `${node.rank}_`, true);
  }
  for (const r of ranks) {
    if (rankFilter !== null && r.rank !== rankFilter) continue;
    walk(scroll, r, 0, "", false);
  }
  return { scroll, pinned, scrollHeight: y, pinnedHeight: pY, rowOfTrack };
}

/**
 * (Re)builds the label column for rows; handlers: {toggle(node), fold(node), pin(node), select(node),
 * offsetOf(rank), editOffset(node, chip)}. Each row gets `el` (its label) and `head` (the line that stays in view
 * while the lane does, see stickLabel). A rank's row carries its time offset (a chip to click and edit).
 */
export function renderLabels(container, rows, handlers, selectedLaneId) {
  const frag = document.createDocumentFragment();
  // a click on a control of the label does its own thing, not the label's (select / toggle)
  const own = (fn) => (e) => { e.stopPropagation(); fn(); };
  for (const row of rows) {
    const n = row.node;
    const opens = n.type !== "track" || n.deep;
    const twisty = el("span", { class: "twisty" + (opens ? "" : " leaf"),
      title: n.deep ? (n.folded ? `Show all ${n.depths} rows` : `Fold to ${FOLDED_ROWS} rows`) : null,
      onclick: n.deep ? own(() => handlers.fold(n)) : opens ? own(() => handlers.toggle(n)) : null },
    !opens ? null : (n.type === "track" ? n.folded : n.collapsed) ? "▶" : "▼");
    const head = el("div", { class: "tl-lane-head" }, twisty, el("span", { class: "name", title: row.title }, row.title));
    if (n.deep && n.folded) {
      head.append(el("span", { class: "more", title: `${n.depths - FOLDED_ROWS} more rows: click to show them`,
        onclick: own(() => handlers.fold(n)) }, `+${n.depths - FOLDED_ROWS} rows`));
    }
    if (n.meta) head.append(el("span", { class: "meta" }, n.meta));
    if (n.badge) head.append(el("span", { class: "badge" }, n.badge));
    if (n.type === "rank" && handlers.offsetOf) {
      const off = handlers.offsetOf(n.rank);
      const chip = el("span", { class: "offset" + (off ? " on" : ""),
        title: off ? `Rank ${n.rank} is drawn ${formatDuration(Math.abs(off))} ${off > 0 ? "later" : "earlier"}`
          + " than recorded: click to change" : `Shift rank ${n.rank} in time (its clock differs from the others)`,
        onclick: own(() => handlers.editOffset(n, chip)) }, off ? formatShift(off) : "Offset");
      head.append(chip);
    }
    if (n.type !== "rank") {
      head.append(el("span", { class: "pin" + (n.pinned ? " on" : ""), title: n.pinned ? "Unpin" : "Pin to the top",
        onclick: own(() => handlers.pin(n)) }, "↥"));
    }
    const label = el("div", {
      class: `tl-lane lane-${n.type}` + (n.id === selectedLaneId ? " selected" : "") + (n.deep ? " deep" : ""),
      dataset: { laneId: n.id, kind: n.kind || n.type, rank: String(n.rank),
        ...(n.type === "track" ? { trackId: String(n.track.track_id) } : {}),
        ...(n.deep ? { folded: String(n.folded) } : {}) },
      onclick: () => (n.type === "track" ? handlers.select(n) : handlers.toggle(n)) }, head);
    // geometry as CSSOM properties (the style policy allows no style attributes)
    label.style.top = `${row.y}px`;
    label.style.height = `${row.h}px`;
    label.style.paddingLeft = `${4 + row.level * INDENT_PX}px`;
    row.el = label;
    row.head = head;
    frag.appendChild(label);
  }
  container.replaceChildren(frag);
}

/**
 * Keeps the label of the row that crosses the top edge of the scrolled area (at scroll offset `top`) in view:
 * its head line moves down with the edge until the row's bottom pushes it back up. Only that one row (rows do
 * not overlap) is offset; `prev` is the row offset last time (reset here). Returns the row now offset, or null.
 */
export function stickLabel(rows, top, prev) {
  let lo = 0;
  let hi = rows.length - 1;
  let row = null;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const r = rows[mid];
    if (top < r.y) hi = mid - 1;
    else if (top >= r.y + r.h) lo = mid + 1;
    else { row = r; break; }
  }
  if (prev && prev !== row && prev.head) prev.head.style.transform = "";
  if (!row || !row.head) return null;
  const shift = Math.max(0, Math.min(top - row.y, row.h - LANE_HEAD_PX));
  row.head.style.transform = shift > 0 ? `translateY(${shift}px)` : "";
  return row;
}
