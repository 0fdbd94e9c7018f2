// The runs list: one row per run with its status; refreshed every second while any run is still ingesting.

import { apiGet } from "./api.js";

const VIEWS = ["timeline", "operator", "memory", "summary", "communication"];
const body = document.getElementById("runs-body");
const hint = document.getElementById("runs-hint");

function cell(tr, text, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  if (text instanceof Node) td.appendChild(text);
  else td.textContent = text ?? "";
  tr.appendChild(td);
  return td;
}

function formatSize(bytes) {
  if (!bytes) return "";
  const mb = bytes / 1e6;
  return mb >= 100 ? `${mb.toFixed(0)} MB` : `${mb.toFixed(1)} MB`;
}

function render(runs) {
  body.replaceChildren();
  hint.hidden = runs.length > 0;
  for (const run of runs) {
    const tr = document.createElement("tr");
    tr.dataset.runId = run.id;
    const name = document.createElement(run.status === "ready" ? "a" : "span");
    name.textContent = run.name;
    if (run.status === "ready") name.href = `/runs/${encodeURIComponent(run.id)}/timeline`;
    cell(tr, name);
    const status = document.createElement("span");
    status.className = `status status-${run.status}`;
    status.textContent = run.status;
    const st = cell(tr, status);
    if (run.progress && run.status !== "ready") st.append(" ", run.progress);
    if (run.error) {
      const err = document.createElement("div");
      err.className = "run-error";
      err.textContent = run.error;
      st.appendChild(err);
    }
    const links = document.createElement("span");
    links.className = "run-links";
    if (run.status === "ready") {
      for (const v of VIEWS) {
        const a = document.createElement("a");
        a.href = `/runs/${encodeURIComponent(run.id)}/${v}`;
        a.textContent = v[0].toUpperCase() + v.slice(1);
        links.appendChild(a);
      }
    }
    cell(tr, links);
    const src = cell(tr, run.source, "run-source");
    src.title = run.source;
    cell(tr, new Date(run.created * 1000).toLocaleString());
    cell(tr, formatSize(run.size), "num");
    body.appendChild(tr);
  }
}

async function refresh() {
  try {
    const data = await apiGet("/api/runs");
    render(data.runs);
    if (data.runs.some((r) => r.status === "queued" || r.status === "ingesting")) setTimeout(refresh, 1000);
  } catch (err) {
    body.replaceChildren();
    const tr = document.createElement("tr");
    cell(tr, `Could not load runs: ${err.message}`, "run-error").colSpan = 6;
    body.appendChild(tr);
  }
}

refresh();
