// The runs page: one row per run (name, ranks, status with live ingest progress, size on disk, created, source)
// with open / rename / delete / retry (a failed run), refreshed every second while any run is queued or ingesting
// (a run still ingesting opens as soon as its first ranks are loaded: the row says how many are)
// (every 10 s otherwise, for runs others add); and the upload zone (upload.js). A run's ingest warnings and its
// ingest log unfold under its status, and stay unfolded across refreshes. A read-only dashboard has no upload zone
// and no actions.

import { apiGet, apiSend } from "../common/api.js";
import { el } from "../common/dom.js";
import { formatBytes } from "../common/format.js";
import { page } from "../common/nav.js";
import { progressBar, progressText, ranksText } from "../common/progress.js";
import { RUNS_API, runApi, runPage } from "../common/urls.js";
import { initUploads } from "./upload.js";

const REFRESH_MS = 1000;
const IDLE_REFRESH_MS = 10_000;
const body = document.getElementById("runs-body");
const hint = document.getElementById("runs-hint");
const readOnly = Boolean(page.read_only);
const columns = readOnly ? 6 : 7;
let editing = null; // id of the run being renamed: the table is not redrawn under the user's typing
let timer = null;
const unfolded = new Map(); // "warnings:<id>" / "log:<id>" -> the panel's content once loaded (null while loading)
const refusals = new Map(); // run id -> why the server refused a retry (shown until the next try)

function cell(tr, content, cls) {
  const td = el("td", { class: cls }, content);
  tr.appendChild(td);
  return td;
}

function button(label, cls, onClick) {
  return el("button", { class: `btn ${cls || ""}`.trim(), type: "button", onclick: onClick }, label);
}

function statusCell(run) {
  const box = el("div", { class: "run-status" });
  const head = el("div", { class: "run-status-head" });
  head.append(el("span", { class: `status status-${run.status}` }, run.status));
  box.append(head);
  if (run.status === "queued" || run.status === "ingesting") {
    box.append(progressBar(run.progress));
    box.append(el("div", { class: "run-progress muted" }, progressText(run.progress)));
    const ranks = ranksText(run.ranks_state);
    if (ranks) box.append(el("div", { class: "run-ranks" }, `${ranks} — open it now`));
  }
  if (run.error) box.append(el("div", { class: "run-error" }, run.error));
  if (refusals.has(run.id)) box.append(el("div", { class: "run-error" }, refusals.get(run.id)));
  if (run.status === "ready" && run.warning_count) {
    head.append(foldButton(box, "warnings", run, `${run.warning_count} warning${run.warning_count === 1 ? "" : "s"}`,
      "warn-badge", loadWarnings));
  }
  if (run.status === "failed") head.append(foldButton(box, "log", run, "Log", "", loadLog));
  return box;
}

/** A button that unfolds a panel under the status (its content fetched once, kept across table refreshes). */
function foldButton(box, kind, run, label, cls, load) {
  const key = `${kind}:${run.id}`;
  const b = button(label, `fold ${cls}`, async () => {
    if (unfolded.has(key)) {
      unfolded.delete(key);
      refresh();
      return;
    }
    unfolded.set(key, null);
    refresh();
    let content;
    try {
      content = await load(run.id);
    } catch (err) {
      content = el("div", { class: "run-error" }, err.message);
    }
    if (unfolded.has(key)) {
      unfolded.set(key, content);
      refresh();
    }
  });
  b.setAttribute("aria-expanded", String(unfolded.has(key)));
  b.dataset.fold = kind;
  if (unfolded.has(key)) box.append(unfolded.get(key) || el("div", { class: "muted" }, "loading…"));
  return b;
}

async function loadWarnings(id) {
  const run = await apiGet(runApi(id));
  const list = el("ul", { class: "run-warnings" });
  for (const w of (run.warnings && run.warnings.items) || []) {
    const where = w.rank === null || w.rank === undefined ? w.file : `rank ${w.rank} · ${w.file}`;
    list.append(el("li", {}, el("span", { class: "warn-file" }, where), ` ${w.message}`));
  }
  if (run.warnings && run.warnings.truncated) list.append(el("li", { class: "muted" }, `… ${run.warnings.count} in all`));
  return list;
}

async function loadLog(id) {
  const log = await apiGet(runApi(id, "/log"));
  const text = log.text || "(the ingest log is empty)";
  return el("pre", { class: "run-log" }, log.truncated ? `… (the last ${formatBytes(text.length)})\n${text}` : text);
}

/** A run whose views can be opened: ready, or still ingesting with its first ranks loaded. */
function openable(run) {
  return run.status === "ready" || Boolean(run.servable);
}

function nameCell(run) {
  const open = openable(run);
  return el(open ? "a" : "span", { class: "run-name-link", href: open ? runPage(run.id, "timeline") : null,
    title: run.id }, run.name);
}

function startRename(tr, run) {
  editing = run.id;
  const td = tr.querySelector("td");
  const input = el("input", { class: "rename-input", type: "text", value: run.name, maxlength: 200,
    "aria-label": "New name" });
  const done = async (save) => {
    if (editing !== run.id) return;
    const name = input.value.trim();
    if (save && name && name !== run.name) {
      try {
        await apiSend("PATCH", runApi(run.id), { name });
      } catch (err) {
        td.append(el("div", { class: "run-error" }, err.message));
        input.focus();
        return;
      }
    }
    editing = null;
    refresh();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") done(true);
    if (e.key === "Escape") done(false);
  });
  td.replaceChildren(input, button("Save", "primary", () => done(true)), button("Cancel", "", () => done(false)));
  input.focus();
  input.select();
}

function confirmDelete(actions, run) {
  editing = run.id;
  const ask = el("span", { class: "confirm", title: "Delete this run and its files (a source folder on the server is kept)" },
    "Delete?");
  const yes = button("Delete", "danger", async () => {
    yes.disabled = true;
    try {
      await apiSend("DELETE", runApi(run.id));
    } catch (err) {
      ask.replaceChildren(el("span", { class: "run-error" }, err.message));
      editing = null;
      return;
    }
    editing = null;
    refresh();
  });
  const keep = button("Keep", "", () => {
    editing = null;
    refresh();
  });
  ask.append(yes, keep);
  actions.replaceChildren(ask);
}

function retry(run) {
  return button("Retry", "primary", async (e) => {
    e.target.disabled = true;
    refusals.delete(run.id);
    try {
      await apiSend("POST", runApi(run.id, "/retry"));
      unfolded.delete(`log:${run.id}`);
    } catch (err) {
      refusals.set(run.id, `Retry refused: ${err.message}`);
    }
    refresh();
  });
}

function actionsCell(tr, run) {
  const actions = el("div", { class: "run-actions" });
  if (openable(run)) {
    actions.append(el("a", { class: "btn primary", href: runPage(run.id, "timeline") }, "Open"));
  }
  if (run.status === "failed") actions.append(retry(run));
  actions.append(button("Rename", "", () => startRename(tr, run)));
  actions.append(button("Delete", "", () => confirmDelete(actions, run)));
  return actions;
}

function runRow(run) {
  const tr = el("tr", { dataset: { runId: run.id, status: run.status } });
  cell(tr, nameCell(run));
  cell(tr, run.rank_count ?? run.ranks_state?.total ?? "–", "num");
  cell(tr, statusCell(run));
  cell(tr, formatBytes(run.size), "num");
  cell(tr, new Date(run.created * 1000).toLocaleString());
  const src = cell(tr, run.origin === "upload" ? `uploaded ${run.source}` : run.source, "run-source");
  src.title = run.source;
  if (!readOnly) cell(tr, actionsCell(tr, run));
  return tr;
}

function render(runs) {
  body.replaceChildren();
  hint.hidden = runs.length > 0;
  for (const run of runs) {
    body.appendChild(runRow(run));
    showOnCard(run);
  }
}

/** A record an upload card fetched: its row shows the same (unless the row is being renamed). */
function showOnRow(run) {
  const tr = body.querySelector(`tr[data-run-id="${CSS.escape(run.id)}"]`);
  if (tr && editing !== run.id) tr.replaceWith(runRow(run));
}

async function refresh() {
  clearTimeout(timer);
  try {
    const data = await apiGet(RUNS_API);
    if (editing === null) render(data.runs);
    const busy = editing !== null || data.runs.some((r) => r.status === "queued" || r.status === "ingesting");
    timer = setTimeout(refresh, busy ? REFRESH_MS : IDLE_REFRESH_MS);
  } catch (err) {
    body.replaceChildren();
    const tr = el("tr");
    cell(tr, `Could not load runs: ${err.message}`, "run-error").colSpan = columns;
    body.appendChild(tr);
  }
}

const showOnCard = initUploads({ maxBytes: page.max_upload_bytes, onChange: refresh, onRun: showOnRow });
refresh();
