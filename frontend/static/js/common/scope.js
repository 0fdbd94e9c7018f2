// The ranks of this page's run the server has loaded. A sharded run of more ranks than the server's limit
// (max_loaded_ranks) answers each request from a subset only: those its `ranks` parameter names, else those its
// rank/track/slice ids belong to, else the first. urls.js adds this page's `ranks` to its requests; this module
// keeps the `loaded_ranks` answers report (apiGet hands them over), so that the rank selector and the timeline
// can reload the page scoped to a rank the server has not loaded, and the chrome can say which ranks are shown.

import { setParams, underPageRun, urlParam } from "./urls.js";

export const LOADED_EVENT = "ascendscope:loadedranks";
const SLICE_ID_BITS = 36n;  // a shard's slice ids carry their rank above these bits (ingest/pipeline.py)

let loaded = null;  // the loaded ranks the last answer that said so named; null: no answer said (all are loaded)

/** Keep the loaded ranks an answer under this page's run reports (null `loaded_ranks`: one file, all loaded).
 *  The run answer (/api/runs/<id>) is not under it, and rightly so: it reports the server's default scope
 *  whatever `ranks` a request names. */
export function noteAnswer(path, body) {
  if (!body || !Array.isArray(body.loaded_ranks) || !underPageRun(path)) return;
  loaded = body.loaded_ranks.map(Number);
  window.dispatchEvent(new CustomEvent(LOADED_EVENT, { detail: { ranks: [...loaded] } }));
}

/** The ranks the last answer that said so had loaded, or null (none said: everything is). */
export function loadedRanks() {
  return loaded ? [...loaded] : null;
}

/** Whether the server has `rank` loaded for this page: as the last answer told, else as the URL asks. */
export function isLoaded(rank) {
  if (rank === null || rank === undefined) return true;
  if (loaded !== null) return loaded.includes(Number(rank));
  const asked = urlParam("ranks");
  return !asked || asked.split(",").map(Number).includes(Number(rank));
}

let leaving = false;

/** On a page whose URL names no `ranks`, once an answer said which ranks are loaded: when the server has not
 *  loaded `rank` (the one picked) or the rank of `sliceId` (a linked slice), reload the page asking for them
 *  (location.replace). True while that reload is under way: the caller then stops building the page. (With
 *  `ranks` in the URL the server loaded what it could of them; asking again would only loop.) Ranks in
 *  `pending` (a run still ingesting: not written yet) are not asked for: no server could load them, and the
 *  ingest banner reloads the page once they are. */
export function rescope(rank, sliceId, pending = []) {
  if (leaving) return true;
  if (urlParam("ranks") || loaded === null) return false;
  const notYet = new Set(pending.map(Number));
  const want = [rank, sliceRank(sliceId)].filter((r) => r !== null && r !== undefined && !loaded.includes(r)
    && !notYet.has(Number(r)));
  if (!want.length) return false;
  const url = setParams(new URL(location.href), { ranks: [...new Set(want)].sort((a, b) => a - b).join(",") });
  leaving = true;
  location.replace(url.pathname + url.search + url.hash);
  return true;
}

/** This page's URL scoped to one rank (ranks= and rank=), without a selected slice of another rank. */
export function scopedUrl(rank) {
  const url = setParams(new URL(location.href), { ranks: rank, rank });
  const slice = url.searchParams.get("slice");
  if (slice !== null && sliceRank(slice) !== Number(rank)) url.searchParams.delete("slice");
  return url.pathname + url.search + url.hash;
}

/** The rank a slice id belongs to (exact for the decimal-string ids the API sends), or null for no id. */
export function sliceRank(sliceId) {
  const text = sliceId === null || sliceId === undefined ? "" : String(sliceId);
  return /^\d+$/.test(text) ? Number(BigInt(text) >> SLICE_ID_BITS) : null;
}
