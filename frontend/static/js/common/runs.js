// The runs page: one row per run (name, ranks, status with live ingest progress, size on disk, created, source)
// with open / rename / delete / retry (a failed run), refreshed every second while any run is queued or ingesting
// (every 10 s otherwise, for runs others add); and the upload zone (upload.js). A run's ingest warnings and its
// ingest log unfold under its status, and stay unfolded across refreshes. A read-only dashboard has no upload zone
// and no actions.

import { apiGet, apiSend } from "./api.js";
import { formatBytes } from "./format.js";
import { page } from "./nav.js";
import { progressBar, progressText } from "./progress.js";
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

function make(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function cell(tr, content, cls) {
  const td = make("td", cls);
  if (content instanceof Node) td.appendChild(content);
  else td.textContent = content ?? "";
  tr.appendChild(td);
  return td;
}

function button(label, cls, onClick) {
  const b = make("button", `btn ${cls || ""}`.trim(), label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function statusCell(run) {
  const box = make("div", "run-status");
  const head = make("div", "run-status-head");
  head.append(make("span", `status status-${run.status}`, run.status));
  box.append(head);
  if (run.status === "queued" || run.status === "ingesting") {
    box.append(progressBar(run.progress));
    box.append(make("div", "run-progress muted", progressText(run.progress)));
  }
  if (run.error) box.append(make("div", "run-error", run.error));
  if (refusals.has(run.id)) box.append(make("div", "run-error", refusals.get(run.id)));
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
      content = make("div", "run-error", err.message);
    }
    if (unfolded.has(key)) {
      unfolded.set(key, content);
      refresh();
    }
  });
  b.setAttribute("aria-expanded", String(unfolded.has(key)));
  b.dataset.fold = kind;
  if (unfolded.has(key)) box.append(unfolded.get(key) || make("div", "muted", "loading…"));
  return b;
}

async function loadWarnings(id) {
  const run = await apiGet(`/api/runs/${encodeURIComponent(id)}`);
  const list = make("ul", "run-warnings");
  for (const w of (run.warnings && run.warnings.items) || []) {
    const where = w.rank === null || w.rank === undefined ? w.file : `rank ${w.rank} · ${w.file}`;
    const li = make("li", null, ` ${w.message}`);
    li.prepend(make("span", "warn-file", where));
    list.append(li);
  }
  if (run.warnings && run.warnings.truncated) list.append(make("li", "muted", `… ${run.warnings.count} in all`));
  return list;
}

async function loadLog(id) {
  const log = await apiGet(`/api/runs/${encodeURIComponent(id)}/log`);
  const text = log.text || "(the ingest log is empty)";
  return make("pre", "run-log", log.truncated ? `… (the last ${formatBytes(text.length)})\n${text}` : text);
}

function nameCell(run) {
  const name = make(run.status === "ready" ? "a" : "span", "run-name-link", run.name);
  if (run.status === "ready") name.href = `/runs/${encodeURIComponent(run.id)}/timeline`;
  name.title = run.id;
  return name;
}

function startRename(tr, run) {
  editing = run.id;
  const td = tr.querySelector("td");
  const input = make("input", "rename-input");
  input.type = "text";
  input.value = run.name;
  input.maxLength = 200;
  input.setAttribute("aria-label", "New name");
  const done = async (save) => {
    if (editing !== run.id) return;
    const name = input.value.trim();
    if (save && name && name !== run.name) {
      try {
        await apiSend("PATCH", `/api/runs/${encodeURIComponent(run.id)}`, { name });
      } catch (err) {
        td.append(make("div", "run-error", err.message));
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
  const ask = make("span", "confirm", "Delete?");
  ask.title = "Delete this run and its files (a source folder on the server is kept)";
  const yes = button("Delete", "danger", async () => {
    yes.disabled = true;
    try {
      await apiSend("DELETE", `/api/runs/${encodeURIComponent(run.id)}`);
    } catch (err) {
      ask.replaceChildren(make("span", "run-error", err.message));
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
      await apiSend("POST", `/api/runs/${encodeURIComponent(run.id)}/retry`);
      unfolded.delete(`log:${run.id}`);
    } catch (err) {
      refusals.set(run.id, `Retry refused: ${err.message}`);
    }
    refresh();
  });
}

function actionsCell(tr, run) {
  const actions = make("div", "run-actions");
  if (run.status === "ready") {
    const open = make("a", "btn primary", "Open");
    open.href = `/runs/${encodeURIComponent(run.id)}/timeline`;
    actions.append(open);
  }
  if (run.status === "failed") actions.append(retry(run));
  actions.append(button("Rename", "", () => startRename(tr, run)));
  actions.append(button("Delete", "", () => confirmDelete(actions, run)));
  return actions;
}

function render(runs) {
  body.replaceChildren();
  hint.hidden = runs.length > 0;
  for (const run of runs) {
    const tr = make("tr");
    tr.dataset.runId = run.id;
    tr.dataset.status = run.status;
    cell(tr, nameCell(run));
    cell(tr, run.rank_count ?? "–", "num");
    cell(tr, statusCell(run));
    cell(tr, formatBytes(run.size), "num");
    cell(tr, new Date(run.created * 1000).toLocaleString());
    const src = cell(tr, run.origin === "upload" ? `uploaded ${run.source}` : run.source, "run-source");
    src.title = run.source;
    if (!readOnly) cell(tr, actionsCell(tr, run));
    body.appendChild(tr);
  }
}

async function refresh() {
  clearTimeout(timer);
  try {
    const data = await apiGet("/api/runs");
    if (editing === null) render(data.runs);
    const busy = editing !== null || data.runs.some((r) => r.status === "queued" || r.status === "ingesting");
    timer = setTimeout(refresh, busy ? REFRESH_MS : IDLE_REFRESH_MS);
  } catch (err) {
    body.replaceChildren();
    const tr = make("tr");
    cell(tr, `Could not load runs: ${err.message}`, "run-error").colSpan = columns;
    body.appendChild(tr);
  }
}

initUploads({ maxBytes: page.max_upload_bytes, onChange: refresh });
refresh();
