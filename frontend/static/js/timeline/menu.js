// What the timeline's right-click menu offers at a point: the selected range (Time Range Analysis, keep it as a
// region marker), the view (fit, zoom to the range, undo, reset), markers, the lane under the mouse (hide, pin,
// pin on every rank), the slice under it (Show in System View, align its rank on it) and the ranks' offsets.
//
// ctx: {t: time at the mouse or null, hit: the slice there or null, node: the lane there or null}

import { formatDuration } from "../common/time.js";

export function timelineMenu(tl, ctx) {
  const { t, hit, node } = ctx;
  const range = tl.range;
  const rangeWhy = range ? null : "Select a range first: drag on the time ruler (or press M on a slice)";
  const laneRank = node ? node.rank : hit ? tl.tracks.get(hit.track_id).rank : null;
  const items = [
    { id: "range-analysis", label: "Time Range Analysis", disabled: !range, title: rangeWhy
      || `Statistics of rank ${laneRank ?? "…"} in the selected ${formatDuration(range.end - range.start)}, in System View`,
    action: () => tl.timeRangeAnalysis(laneRank) },
    { id: "range-marker", label: "Keep range as region marker", disabled: !range, title: rangeWhy,
      action: () => tl.markers.addRegion(range.start, range.end) },
    "-",
    { id: "fit", label: "Fit to screen", title: hit ? "Zoom to this slice" : node ? "Zoom to the extent of this lane"
      : "Show the whole run", action: () => tl.fitToScreen(hit, node) },
    { id: "zoom-range", label: "Zoom to selection", shortcut: "Shift+Z", disabled: !range, title: rangeWhy,
      action: () => tl.zoomToRange() },
    { id: "undo", label: `Undo zoom${tl.viewport.history.length ? ` (${tl.viewport.history.length})` : ""}`,
      shortcut: "Backspace", disabled: !tl.viewport.history.length, action: () => tl.undo() },
    { id: "reset", label: "Reset zoom", shortcut: "Ctrl+0", action: () => tl.resetView() },
    "-",
    { id: "add-marker", label: "Add marker here", shortcut: "K", disabled: t === null,
      action: () => tl.markers.addPoint(t) },
  ];
  if (node) {
    const all = tl.sameLaneOnEveryRank(node);
    const allPinned = all.length > 1 && all.every((n) => n.pinned);
    items.push("-",
      { id: "hide", label: "Hide lane", title: `Hide ${node.title}; the corner above the lanes shows it again`,
        action: () => tl.hideLane(node) },
      { id: "pin", label: node.pinned ? "Unpin lane" : "Pin lane", disabled: node.type === "rank",
        title: node.type === "rank" ? "Pin one of the rank's lanes" : "Keep this lane at the top, whatever the rank filter",
        action: () => tl.togglePin(node) });
    if (node.type !== "rank" && all.length > 1) {
      items.push({ id: "pin-all", label: allPinned ? "Unpin on every rank" : "Pin on every rank",
        title: `${node.title} of each of the ${all.length} ranks at the top, to compare them row by row`,
        action: () => tl.pinOnEveryRank(node) });
    }
  }
  if (hit) {
    const rank = tl.tracks.get(hit.track_id).rank;
    const ref = tl.referenceRank;
    items.push("-",
      { id: "system-view", label: "Show in System View", disabled: !tl.canShowInSystemView(hit),
        title: "This slice's row in System View, with its slices listed", action: () => tl.showInSystemView(hit) });
    if (tl.ranks.length > 1) {
      items.push({ id: "align", label: `Align rank ${rank} on this slice`, disabled: rank === ref,
        title: rank === ref ? `Rank ${ref} is the reference: align another rank's slice on it`
          : `Shift rank ${rank} so that this slice starts where the same slice of rank ${ref} starts`,
        action: () => tl.alignOn(hit, ref).catch((err) => tl.flash(`Cannot align: ${err.message}`)) });
    }
  }
  if (laneRank !== null && tl.ranks.length > 1) {
    items.push({ id: "offset", label: `Set rank ${laneRank} offset…`, action: () => tl.editRankOffset(laneRank) });
  }
  if (tl.offsets.size) {
    items.push({ id: "reset-offsets", label: "Reset all rank offsets", action: () => tl.clearOffsets() });
  }
  return items;
}
