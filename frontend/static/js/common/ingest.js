// The banner of a run's pages while the run still ingests (base.html renders it, only for such a run): which ranks
// are loaded and which are pending, the ingest's progress and ETA, refreshed from GET /api/runs/{id} every few
// seconds. The rank selector marks the pending ranks "(loading)". When the rank on screen was pending and is
// loaded, or its overview is published (a big rank: every lane's busy time, ingest.overview), the page reloads by
// itself (it was showing nothing, or only the overview, of that rank); ranks loaded meanwhile, or the whole
// run once ready, are offered by a refresh link. Opening a pending rank (?rank=) moves it to the front of the ingest queue (the
// server notes it); the banner says so.

import { apiGet } from "./api.js";
import { el } from "./dom.js";
import { currentRank, page } from "./nav.js";
import { progressBar, progressText, ranksText } from "./progress.js";
import { runApi } from "./urls.js";

const POLL_MS = 2000;
const OVERVIEW_POLL_MS = 500; // while the rank on screen has nothing to show: its overview comes within this
const LISTED = 6; // pending ranks named before "+N more"
const banner = document.getElementById("run-ingesting");
const rankSelect = document.getElementById("rank-select");

function ranksList(ranks) {
  const shown = ranks.slice(0, LISTED).join(", ");
  return ranks.length > LISTED ? `${shown} +${(ranks.length - LISTED).toLocaleString("en-US")} more` : shown;
}

/** The rank selector's options of pending / failed ranks say so. */
function markStates(pending, failed) {
  if (!rankSelect) return;
  const wait = new Set(pending.map(String));
  const bad = new Set(failed.map(String));
  for (const o of rankSelect.options) {
    if (o.value === "") continue;
    const base = o.dataset.rank || o.value;
    o.dataset.rank = base;
    const note = wait.has(o.value) ? " (loading)" : bad.has(o.value) ? " (failed)" : "";
    o.textContent = base + note;
    if (!o.dataset.label || o.dataset.label.startsWith(base)) o.dataset.label = base + note;
  }
}

function render(run, pending, failed, readyAtLoad) {
  const rank = currentRank();
  const state = run.ranks_state || { ready: (run.ranks || []).length - pending.length - failed.length,
    pending: pending.length, failed: failed.length, total: (run.ranks || []).length };
  const line = el("div", { class: "ingest-line" },
    el("span", { class: "ingest-title" }, "Still ingesting"), " ", ranksText(state));
  if (pending.length) line.append(` · pending: rank${pending.length === 1 ? "" : "s"} ${ranksList(pending)}`);
  const more = state.ready - readyAtLoad;  // loaded since this page was: shown after a reload
  if (more > 0) {
    line.append(" · ", el("a", { href: location.href, class: "ingest-refresh" },
      `${more.toLocaleString("en-US")} more loaded: refresh`));
  }
  const details = el("div", { class: "ingest-detail muted" }, progressText(run.progress));
  if (rank !== null && (run.partial_ranks || []).includes(rank)) {  // drawn from its overview
    details.prepend(el("b", {}, `Rank ${rank} is shown as an overview: every lane's busy time, coarse, without depth `
      + "or details; the other views show it once it is loaded, and this page reloads then. "));
  } else if (rank !== null && pending.includes(rank)) {
    details.prepend(el("b", {}, `Rank ${rank} is next in the queue; this page reloads when it is loaded. `));
  }
  banner.replaceChildren(line, progressBar(run.progress, el("progress", { class: "ingest-bar" })), details);
  banner.hidden = false;
}

function offerRefresh(text) {
  banner.append(el("div", { class: "ingest-done" }, `${text} `,
    el("a", { href: location.href, class: "btn" }, "Refresh")));
}

async function follow() {
  let pending = [...(page.ingest.pending || [])];
  let failed = [...(page.ingest.failed || [])];
  const onScreen = currentRank();
  const waitingFor = onScreen !== null && pending.includes(onScreen) ? onScreen : null;
  const readyAtLoad = (page.ranks || []).length - pending.length - failed.length;
  const overviewAtLoad = waitingFor !== null && (page.ingest.partial || []).includes(waitingFor);
  const pause = () => new Promise((r) => setTimeout(r, waitingFor !== null && !overviewAtLoad ? OVERVIEW_POLL_MS
    : POLL_MS));
  markStates(pending, failed);
  for (;;) {
    let run;
    try {
      run = await apiGet(runApi(page.run_id));
    } catch {
      await pause();
      continue;
    }
    pending = run.pending_ranks || pending;
    failed = run.failed_ranks || failed;
    markStates(pending, failed);
    if (run.status === "failed") {
      banner.replaceChildren(el("div", { class: "run-error" }, run.error || "ingestion failed"));
      return;
    }
    const done = run.status === "ready";
    if (waitingFor !== null && (done || !pending.includes(waitingFor)
        || (!overviewAtLoad && (run.partial_ranks || []).includes(waitingFor)))) {
      location.reload();  // the rank on screen was empty (or only an overview) until now
      return;
    }
    if (done) {
      banner.replaceChildren();
      offerRefresh("Every rank is loaded.");
      banner.classList.add("ingest-finished");
      return;
    }
    render(run, pending, failed, readyAtLoad);
    await pause();
  }
}

if (banner && page.ingest) follow();
