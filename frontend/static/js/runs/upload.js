// Uploading zipped runs: a drop zone (the whole page accepts a drop) and a file picker. Each file gets a card that
// follows it through the upload (XHR upload progress, MB/s), the server's check of the archive, the queue and the
// ingest (polling GET /api/runs/{id}: phase, %, MB/s, ETA), then links to the run or shows the server's refusal.
// A card and the run's row in the table show the same record: each record either of them fetches goes to both
// (onRun, and show() for the table's), so they never show two different progresses. Every size says what it is:
// the file sent, the bytes read by the ingest, the run on disk.
// Bytes the server already has as a run (200, duplicate) follow that run instead, and the card says so. A file
// uploaded on its own opens its run's timeline when the run is ready, unless other uploads are still under way.

import { apiGet } from "../common/api.js";
import { el } from "../common/dom.js";
import { formatBytes } from "../common/format.js";
import { progressBar, progressText } from "../common/progress.js";
import { formatSeconds } from "../common/time.js";
import { RUNS_API, runApi, runPage } from "../common/urls.js";

const POLL_MS = 500;
const OPEN_DELAY_MS = 600; // the card shows "opening…" this long before the page moves on
const ACTIVE = new Set(["uploading", "checking", "queued", "ingesting"]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class UploadCard {
  constructor(list, file) {
    this.root = el("div", { class: "upload-card" });
    const head = el("div", { class: "upload-head" });
    this.title = el("span", { class: "upload-name" }, file.name);
    this.size = el("span", { class: "muted upload-size" }, `${formatBytes(file.size)} file`);
    this.state = el("span", { class: "status" });
    this.close = el("button", { class: "btn icon-btn upload-close", type: "button", title: "Dismiss", hidden: true,
      onclick: () => this.root.remove() }, "×");
    head.append(this.title, this.size, this.state, this.close);
    this.bar = progressBar(null);
    this.detail = el("div", { class: "upload-detail" });
    this.note = ""; // said before the run's own state (a duplicate upload)
    this.root.append(head, this.bar, this.detail);
    list.prepend(this.root);
  }

  set(state, label, detail) {
    this.root.dataset.state = state;
    const chip = { uploading: "ingesting", checking: "ingesting", queued: "queued", ingesting: "ingesting" }[state];
    this.state.className = `status status-${chip || state}`;
    this.state.textContent = label;
    this.detail.replaceChildren(detail || "");
    this.close.hidden = !(state === "ready" || state === "failed");
    this.bar.hidden = state === "ready" || state === "failed";
  }

  uploading(loaded, total, seconds) {
    const rate = seconds > 0 ? loaded / seconds : 0;
    const eta = rate > 0 ? (total - loaded) / rate : null;
    this.bar.value = (100 * loaded) / Math.max(1, total);
    const parts = [`${Math.floor((100 * loaded) / Math.max(1, total))}%`,
      `${formatBytes(loaded)} of ${formatBytes(total)} sent`];
    if (rate) parts.push(`${(rate / 1e6).toFixed(1)} MB/s`);
    if (eta !== null && loaded < total) parts.push(`ETA ${formatSeconds(eta)}`);
    this.set("uploading", "uploading", parts.join(" · "));
  }

  run(run) {
    this.root.dataset.runId = run.id;
    this.title.textContent = run.name;
    if (run.status === "ready") {
      const open = el("a", { class: "btn primary", href: runPage(run.id, "timeline") }, "Open");
      const ranks = run.rank_count ? `${run.rank_count} rank${run.rank_count === 1 ? "" : "s"} · ` : "";
      const line = el("span", {}, `${this.note}${ranks}${formatBytes(run.size)} on disk `);
      line.append(open);
      this.set("ready", "ready", line);
    } else if (run.status === "failed") {
      this.set("failed", "failed", el("span", { class: "run-error" }, run.error || "ingestion failed"));
    } else {
      progressBar(run.progress, this.bar);
      this.set(run.status, run.status,
        this.note + (progressText(run.progress) || (run.status === "queued" ? "waiting for a worker" : "")));
    }
  }

  /** The page is about to open the run: say so on the card. */
  opening() {
    this.detail.append(el("span", { class: "upload-note" }, " · opening its timeline…"));
  }

  fail(message) {
    this.set("failed", "refused", el("span", { class: "run-error" }, message));
  }
}

function errorMessage(xhr) {
  const err = xhr.response && xhr.response.error;
  if (err && err.message) return `${err.message} (HTTP ${xhr.status})`;
  return xhr.status ? `the server answered HTTP ${xhr.status}` : "the upload failed (connection closed)";
}

function hasFiles(event) {
  return event.dataTransfer && [...event.dataTransfer.types].includes("Files");
}

/** Wire the drop zone and the picker; onChange() is called whenever the runs list should be reloaded, onRun(run)
 * with every run record a card fetched. Returns show(run): a record the table fetched, for the run's card. */
export function initUploads({ maxBytes, onChange, onRun = () => {} }) {
  const zone = document.getElementById("dropzone");
  const input = document.getElementById("upload-input");
  const list = document.getElementById("uploads");
  if (!zone || !input || !list) return () => {}; // read-only dashboard
  document.getElementById("upload-limit").textContent = `Up to ${formatBytes(maxBytes)} per file. ` +
    "The archive is checked before anything is kept; ingestion then runs in the background.";

  const cards = [];

  /** Open the run if it was uploaded on its own and nothing else is under way on this page. */
  function openIfAlone(card, run) {
    const busy = cards.some((c) => c !== card && ACTIVE.has(c.root.dataset.state));
    if (!card.alone || busy || document.querySelector(".rename-input")) return;
    card.opening();
    setTimeout(() => location.assign(runPage(run.id, "timeline")), OPEN_DELAY_MS);
  }

  async function follow(card, id) {
    for (;;) {
      await sleep(POLL_MS);
      let run;
      try {
        run = await apiGet(runApi(id));
      } catch (err) {
        if (err.status === 404) {
          card.fail("the run was deleted");
          return;
        }
        continue;
      }
      card.run(run);
      onRun(run);
      if (run.status === "ready" || run.status === "failed") {
        onChange();
        if (run.status === "ready") openIfAlone(card, run);
        return;
      }
    }
  }

  function upload(file, alone) {
    const card = new UploadCard(list, file);
    card.alone = alone;
    cards.push(card);
    if (file.size > maxBytes) {
      card.fail(`${file.name} is larger than the limit of ${formatBytes(maxBytes)}`);
      return;
    }
    const xhr = new XMLHttpRequest();
    const started = performance.now();
    xhr.open("POST", RUNS_API);
    xhr.responseType = "json";
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) card.uploading(e.loaded, e.total, (performance.now() - started) / 1000);
    });
    xhr.upload.addEventListener("load", () => {
      card.bar.removeAttribute("value");
      card.set("checking", "checking", "checking and extracting the archive…");
    });
    xhr.addEventListener("load", () => {
      const answer = xhr.response;
      if ((xhr.status === 202 || xhr.status === 200) && answer && answer.id) {
        if (answer.duplicate) card.note = `the same file as the run “${answer.name}” uploaded before: `;
        card.run(answer);
        onChange();
        if (answer.status === "ready") openIfAlone(card, answer);
        else if (answer.status !== "failed") follow(card, answer.id);
      } else {
        card.fail(errorMessage(xhr));
      }
    });
    xhr.addEventListener("error", () => card.fail(errorMessage(xhr)));
    const form = new FormData();
    form.append("file", file, file.name);
    card.uploading(0, file.size, 0);
    xhr.send(form);
  }

  const uploadAll = (files) => {
    for (const file of files) upload(file, files.length === 1);
  };
  input.addEventListener("change", () => {
    uploadAll([...input.files]);
    input.value = "";
  });
  let depth = 0; // dragenter/dragleave fire for every child element crossed
  document.addEventListener("dragenter", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth += 1;
    zone.classList.add("dragging");
  });
  document.addEventListener("dragover", (e) => {
    if (hasFiles(e)) e.preventDefault();
  });
  document.addEventListener("dragleave", () => {
    depth = Math.max(0, depth - 1);
    if (!depth) zone.classList.remove("dragging");
  });
  document.addEventListener("drop", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth = 0;
    zone.classList.remove("dragging");
    uploadAll([...e.dataTransfer.files]);
  });
  return (run) => {
    for (const card of cards) {
      if (card.root.dataset.runId === run.id && ACTIVE.has(card.root.dataset.state) && ACTIVE.has(run.status)) {
        card.run(run); // (its own poll says when the run is done, and opens it)
      }
    }
  };
}
