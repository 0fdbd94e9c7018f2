// Page chrome shared by every view: the page data the server embedded, the rank selector (kept in the URL as
// ?rank=, carried across the run tabs with the page's ?ranks=) and the wait-until-ready reload for runs still
// ingesting. On a big sharded run whose server loads only some ranks (common/scope.js), a page opened for a rank
// (or a slice) the server did not load, or a rank picked that it has not loaded, reloads the page asking for that
// rank, and a note next to the selector says which ranks are loaded.
//
// Views import { page, currentRank, onRankChange } from "./nav.js".

import "./overflow.js";
import { apiGet } from "./api.js";
import { el } from "./dom.js";
import { progressText } from "./progress.js";
import { isLoaded, LOADED_EVENT, rescope, scopedUrl } from "./scope.js";
import { replaceParams, runApi, runPage, setParams, urlParam } from "./urls.js";

export const page = JSON.parse(document.getElementById("page-data")?.textContent || "{}");

const RANK_EVENT = "ascendscope:rankchange";
const rankSelect = document.getElementById("rank-select");

/** The selected rank as a number, or null for "all ranks" (only offered where the view allows it). */
export function currentRank() {
  if (!rankSelect) return null;
  const v = rankSelect.value;
  return v === "" ? null : Number(v);
}

/** Calls fn(rank) whenever the user picks another rank. */
export function onRankChange(fn) {
  window.addEventListener(RANK_EVENT, (e) => fn(e.detail.rank));
}

function syncTabs(rank) {
  for (const a of document.querySelectorAll("#view-tabs a.tab")) {
    const url = setParams(new URL(a.href, location.href), { rank, ranks: urlParam("ranks") });
    a.href = url.pathname + url.search;
  }
}

function initRankSelect() {
  if (!rankSelect) return;
  // ?ranks=N alone (one rank loaded, as the Cluster view's links open a rank) selects that rank, not "All ranks"
  const scoped = (urlParam("ranks") || "").split(",").filter((r) => r.trim() !== "");
  const wanted = urlParam("rank") ?? (scoped.length === 1 ? scoped[0].trim() : null);
  if (wanted !== null && [...rankSelect.options].some((o) => o.value === wanted)) rankSelect.value = wanted;
  syncTabs(currentRank());
  rankSelect.addEventListener("change", () => {
    const rank = currentRank();
    if (!isLoaded(rank)) {  // the server has not loaded it: the view would show nothing
      location.assign(scopedUrl(rank));
      return;
    }
    replaceParams({ rank });
    syncTabs(rank);
    window.dispatchEvent(new CustomEvent(RANK_EVENT, { detail: { rank } }));
  });
}

const LISTED_RANKS = 4;  // beyond this many loaded ranks the note counts them

/** Next to the selector: which of the run's ranks the server loaded, when that is not all of them. */
function showLoaded(loaded) {
  document.getElementById("rank-scope")?.remove();
  const all = page.ranks || [];
  if (!rankSelect || !page.run_id || loaded.length >= all.length) return;
  const fmt = (n) => n.toLocaleString("en-US");
  const which = loaded.length <= LISTED_RANKS
    ? `rank${loaded.length === 1 ? "" : "s"} ${loaded.join(", ")}` : `${fmt(loaded.length)} ranks`;
  const note = el("span", { id: "rank-scope", class: "muted rank-scope",
    title: "The server loads only some ranks of a run this big: pick another rank in the selector, or in the "
      + "Cluster view" }, `${which} of ${fmt(all.length)} loaded · `,
  el("a", { href: runPage(page.run_id, "cluster") }, "Cluster view"));
  rankSelect.closest("label").after(note);
}

async function waitUntilReady() {
  const box = document.getElementById("run-not-ready");
  // a run that failed already shows its error (the page was made with it): nothing to wait for
  if (!box || !page.run_id || box.dataset.status === "failed") return;
  for (;;) {
    await new Promise((r) => setTimeout(r, 1000));
    let run;
    try {
      run = await apiGet(runApi(page.run_id));
    } catch {
      continue;
    }
    if (run.status === "ready") { location.reload(); return; }
    const status = box.querySelector(".status");
    if (status) {
      const line = progressText(run.progress);
      status.textContent = run.status + (line ? ` — ${line}` : "");
      status.className = `status status-${run.status}`;
    }
    if (run.status === "failed") {
      if (!box.querySelector(".run-error")) box.appendChild(el("p", { class: "run-error" }, run.error || "ingestion failed"));
      return;
    }
  }
}

initRankSelect();
window.addEventListener(LOADED_EVENT, (e) => {
  if (!rescope(currentRank(), urlParam("slice"), page.ingest?.pending)) showLoaded(e.detail.ranks);
});
waitUntilReady();
