// The run a view shows: its id and API path, and the view's side of the rank selector (base.html renders it; nav.js
// keeps it in the URL).

import { currentRank, page } from "../common/nav.js";
import { runApi } from "../common/urls.js";

export const runId = page.run_id;
export const apiBase = runApi(runId);

/** Rank options without this view's data are marked (but stay selectable: the view then says so). */
export function markRanks(available) {
  const sel = document.getElementById("rank-select");
  if (!sel) return;
  const have = new Set(available.map(String));
  for (const o of sel.options) {
    if (o.value === "") continue;
    const base = o.dataset.label || o.textContent;
    o.dataset.label = base;
    o.textContent = have.has(o.value) ? base : `${base} (no data)`;
  }
}

/** Make the rank selector show `rank` (the server's default when the URL did not pick one). */
export function showRank(rank) {
  const sel = document.getElementById("rank-select");
  if (!sel || rank === null || rank === undefined) return;
  if (currentRank() === null && sel.querySelector('option[value=""]')) return;
  if ([...sel.options].some((o) => o.value === String(rank))) sel.value = String(rank);
}
