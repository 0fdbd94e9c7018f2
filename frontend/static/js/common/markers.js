// Timeline markers and region markers of a run, kept in localStorage so that every view of the run sees them:
// the timeline draws and edits them, the Memory chart shades the regions.
//
// A marker is {id, name, start_ns, end_ns, color}: times are absolute epoch ns as decimal strings (beyond 2^53, so
// never Numbers), end_ns is null for a point marker and a string for a region. loadMarkers drops entries that do
// not fit that shape (an old or hand-edited store must not break a view). saveMarkers replaces the run's list and
// tells listeners in this page and, through the storage event, in the run's other tabs.

const PREFIX = "ascendscope:markers:";
const EVENT = "ascendscope:markers";
const NS = /^-?\d{1,19}$/;
const COLOR = /^#[0-9a-fA-F]{3,8}$/;
export const MARKER_COLORS = ["#f2b84b", "#5aa0ff", "#e0508a", "#4bbf73", "#b07cf0", "#e0643a"];
export const MAX_MARKERS = 500;

function key(runId) {
  return PREFIX + runId;
}

function clean(m, i) {
  if (!m || typeof m !== "object" || !NS.test(String(m.start_ns))) return null;
  const end = m.end_ns === null || m.end_ns === undefined ? null : String(m.end_ns);
  if (end !== null && !NS.test(end)) return null;
  let [start, stop] = [String(m.start_ns), end];
  if (stop !== null && BigInt(stop) < BigInt(start)) [start, stop] = [stop, start];
  return {
    id: String(m.id ?? `m${i}`),
    name: String(m.name ?? "").slice(0, 200),
    start_ns: start,
    end_ns: stop,
    color: COLOR.test(String(m.color)) ? String(m.color) : MARKER_COLORS[i % MARKER_COLORS.length],
  };
}

/** The run's markers, in stored order; [] when there are none or storage is unavailable. */
export function loadMarkers(runId) {
  let raw;
  try {
    raw = JSON.parse(localStorage.getItem(key(runId)) || "[]");
  } catch {
    return [];
  }
  if (!Array.isArray(raw)) return [];
  return raw.slice(0, MAX_MARKERS).map(clean).filter(Boolean);
}

/** Replace the run's markers (at most MAX_MARKERS are kept); returns the list as stored. */
export function saveMarkers(runId, list) {
  const kept = (list || []).slice(0, MAX_MARKERS).map(clean).filter(Boolean);
  try {
    if (kept.length) localStorage.setItem(key(runId), JSON.stringify(kept));
    else localStorage.removeItem(key(runId));
  } catch {
    // storage full or disabled: the markers live for this page only
  }
  window.dispatchEvent(new CustomEvent(EVENT, { detail: { runId } }));
  return kept;
}

/** Call fn(markers) whenever the run's markers change (this page or another tab); returns an unsubscribe. */
export function onMarkersChange(runId, fn) {
  const local = (e) => { if (e.detail?.runId === runId) fn(loadMarkers(runId)); };
  const other = (e) => { if (e.key === key(runId)) fn(loadMarkers(runId)); };
  window.addEventListener(EVENT, local);
  window.addEventListener("storage", other);
  return () => { window.removeEventListener(EVENT, local); window.removeEventListener("storage", other); };
}

/** The region markers (those with an end). */
export function regions(markers) {
  return markers.filter((m) => m.end_ns !== null);
}
