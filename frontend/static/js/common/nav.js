// Page chrome shared by every view: the page data the server embedded, the rank selector (kept in the URL as
// ?rank=, carried across the run tabs) and the wait-until-ready reload for runs still ingesting.
//
// Views import { page, currentRank, onRankChange } from "/static/js/common/nav.js".

import { apiGet } from "./api.js";
import { el } from "./dom.js";
import { progressText } from "./progress.js";
import { replaceParams, runApi, setParams, urlParam } from "./urls.js";

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
    const url = setParams(new URL(a.href, location.href), { rank });
    a.href = url.pathname + url.search;
  }
}

function initRankSelect() {
  if (!rankSelect) return;
  const wanted = urlParam("rank");
  if (wanted !== null && [...rankSelect.options].some((o) => o.value === wanted)) rankSelect.value = wanted;
  syncTabs(currentRank());
  rankSelect.addEventListener("change", () => {
    const rank = currentRank();
    replaceParams({ rank });
    syncTabs(rank);
    window.dispatchEvent(new CustomEvent(RANK_EVENT, { detail: { rank } }));
  });
}

async function waitUntilReady() {
  const box = document.getElementById("run-not-ready");
  if (!box || !page.run_id) return;
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
      box.appendChild(el("p", { class: "run-error" }, run.error || "ingestion failed"));
      return;
    }
  }
}

initRankSelect();
waitUntilReady();
