// The ingest-warnings banner of a run's pages (base.html renders it, hidden, only for a run with warnings): the
// first few warnings from GET /api/runs/{id}, the rest behind "Show all", and a dismiss button remembered for the
// run in this browser (so it does not come back on every tab).

import { apiGet } from "./api.js";
import { el } from "./dom.js";
import { runApi } from "./urls.js";

const SHOWN = 3;
const banner = document.getElementById("run-warnings");
const list = document.getElementById("run-warnings-list");
const more = document.getElementById("run-warnings-more");
const close = document.getElementById("run-warnings-close");
const key = banner ? `ascendscope.warnings-dismissed.${banner.dataset.runId}` : null;

function dismissed() {
  try {
    return localStorage.getItem(key) === "1";
  } catch {
    return false; // storage blocked: the banner just comes back
  }
}

function item(w) {
  const where = `${w.rank === null || w.rank === undefined ? "" : `rank ${w.rank} · `}${w.file || ""}`;
  return el("li", {}, el("span", { class: "warn-file" }, where), ` ${w.message}`);
}

async function show() {
  let run;
  try {
    run = await apiGet(runApi(banner.dataset.runId));
  } catch {
    return; // the view itself reports a run it cannot read
  }
  const warnings = (run.warnings && run.warnings.items) || [];
  if (!warnings.length) return;
  const nodes = warnings.map(item);
  list.replaceChildren(...nodes.slice(0, SHOWN));
  const total = run.warnings.count;
  if (warnings.length > SHOWN) {
    more.hidden = false;
    more.textContent = `Show all ${total}`;
    more.addEventListener("click", () => {
      list.replaceChildren(...nodes);
      if (run.warnings.truncated) list.append(item({ file: "", message: `… and ${total - warnings.length} more` }));
      list.classList.add("warn-list-all");
      more.hidden = true;
    });
  }
  banner.hidden = false;
}

if (banner && !dismissed()) {
  close.addEventListener("click", () => {
    banner.hidden = true;
    try {
      localStorage.setItem(key, "1");
    } catch {
      // storage blocked: dismissed for this page only
    }
  });
  show();
}
