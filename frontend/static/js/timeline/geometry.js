// Sizes of the timeline (in CSS px, units in the names) and the viewport quantisation shared by data and render.

export const DEPTH_PX = 17;          // height of one nesting level of slices
export const SLICE_PX = 15;          // bar height inside a depth level
export const TRACK_PAD_PX = 3;       // space above the first level of a slice track
export const HEADER_PX = 24;         // rank and process header rows
export const EMPTY_TRACK_PX = 20;    // a track with nothing to draw
export const COUNTER_PX = 38;        // counter (line chart) tracks
export const SUMMARY_PX = 10;        // density strip of a collapsed process
export const FOLDED_ROWS = 5;        // a deeper slice track shows this many levels until it is unfolded
export const MORE_PX = 8;            // below a folded track: a strip where its hidden levels' slices fall
export const MORE_STRIP_PX = 4;      // height of that strip's bars
export const LANE_HEAD_PX = 21;      // the label line of a lane (kept in view while the lane is)
export const INDENT_PX = 14;         // label indentation per tree level
export const MIN_LABEL_PX = 26;      // a slice narrower than this gets no text
export const CHAR_PX = 6.4;          // average glyph width of the 11px label font (no measureText per slice)
export const LABEL_FONT = "11px -apple-system, 'Segoe UI', 'Noto Sans', Arial, sans-serif";

/** Levels of slices a track has (0 for counters and empty tracks). */
export function trackDepths(track) {
  if (track.kind === "counter" || !track.slice_count) return 0;
  return Number(track.max_depth || 0) + 1;
}

/** Height of a track row showing `shown` of its levels (all by default); a folded one adds the hidden-levels strip. */
export function trackHeight(track, shown = trackDepths(track)) {
  if (track.kind === "counter") return COUNTER_PX;
  if (!track.slice_count) return EMPTY_TRACK_PX;
  return TRACK_PAD_PX * 2 + shown * DEPTH_PX + (shown < trackDepths(track) ? MORE_PX : 0);
}

/**
 * The bucket a viewport of `span` ns drawn on `px` pixels is fetched at: span / (slicesPerPx × px) rounded up to a
 * power of two. `slicesPerPx` is the server's level-of-detail rule (`slices_per_px` of /timeline/tracks; the
 * server's queries/timeline.py viewport_bucket_ns is the same function).
 */
export function viewportBucket(span, px, slicesPerPx) {
  return 2 ** Math.max(0, Math.ceil(Math.log2(span / (slicesPerPx * px))));
}

/**
 * The normalised request for a viewport: its bucket (viewportBucket); the window is the view widened to whole
 * chunks of (px / 4 × bucket) ns, plus one chunk each side (about 1.3–1.8 views in all), so small pans and zooms
 * map to the same key and are answered from cache; the width asks for one bucket per 1 / slicesPerPx pixel.
 */
export function quantize(start, end, widthPx, slicesPerPx) {
  const px = Math.max(4, Math.round(widthPx));
  const span = Math.max(1, end - start);
  const bucket = viewportBucket(span, px, slicesPerPx);
  const chunk = bucket * Math.round(px / 4);
  const qs = (Math.floor(start / chunk) - 1) * chunk;
  const qe = (Math.ceil(end / chunk) + 1) * chunk;
  return { bucket, qs, qe, widthPx: Math.round((qe - qs) / (slicesPerPx * bucket)), key: `${bucket}:${qs}:${qe}` };
}

/** A "nice" tick step (1, 2, 5 × 10^k ns) so that ticks are at least minPx apart. */
export function niceStep(nsPerPx, minPx) {
  const raw = nsPerPx * minPx;
  const pow = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-9)));
  for (const m of [1, 2, 5, 10]) if (m * pow >= raw) return Math.max(1, m * pow);
  return Math.max(1, 10 * pow);
}
