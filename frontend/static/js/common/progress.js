// How a run's ingest progress reads on screen: a <progress> bar (indeterminate while queued or before the first
// number) and one line — "reading rank 0: trace_view.json · 45% · 48.2 MB of 107 MB read · 11.3 MB/s · ETA 5 s".

import { el } from "./dom.js";
import { formatBytes } from "./format.js";
import { formatSeconds } from "./time.js";

/** The line of text for run.progress (older servers stored a plain string). */
export function progressText(p) {
  if (!p) return "";
  if (typeof p === "string") return p;
  const parts = [p.text || p.phase || ""];
  if (p.percent) parts.push(`${Math.floor(p.percent)}%`);
  if (p.phase === "reading" && p.total_bytes) {
    parts.push(p.done_bytes ? `${formatBytes(p.done_bytes)} of ${formatBytes(p.total_bytes)} read`
      : `${formatBytes(p.total_bytes)} to read`);
  }
  if (p.mb_per_s) parts.push(`${p.mb_per_s.toFixed(1)} MB/s`);
  if (p.eta_s !== null && p.eta_s !== undefined) parts.push(`ETA ${formatSeconds(p.eta_s)}`);
  return parts.filter(Boolean).join(" · ");
}

/** A <progress> element showing run.progress; no value (indeterminate) until there is a percentage. */
export function progressBar(p, bar = el("progress")) {
  bar.max = 100;
  const percent = p && typeof p === "object" ? p.percent : null;
  if (percent) bar.value = percent;
  else bar.removeAttribute("value");
  return bar;
}

/** "3 of 8 ranks loaded · 1 failed" for a run still ingesting (run.ranks_state), "" when it says nothing. */
export function ranksText(state) {
  if (!state || !state.total) return "";
  const fmt = (n) => n.toLocaleString("en-US");
  const parts = [`${fmt(state.ready)} of ${fmt(state.total)} rank${state.total === 1 ? "" : "s"} loaded`];
  if (state.failed) parts.push(`${fmt(state.failed)} failed`);
  return parts.join(" · ");
}
