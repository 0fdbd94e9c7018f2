// Advice view: expert findings over one rank (and the cross-rank ones), by category on the left; a paged table of
// findings, then the chosen finding's explanation and its instances, each with a link that opens the timeline
// with that slice selected. The server sends every finding of the rank at once (capped), so paging is local.
// Data strings are untrusted: the DOM is built with textContent only (common/dom.js `el`).

import { isAbort, latest } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { formatCount } from "../common/format.js";
import { currentRank, onRankChange } from "../common/nav.js";
import { ms, relMs } from "../common/time.js";
import { replaceParams, urlParam, withQuery } from "../common/urls.js";
import { errorBox, timelineLink } from "./blocks.js";
import { apiBase, showRank } from "./run.js";
import { DataTable } from "./table.js";

const SEVERITY_LABEL = { critical: "Critical", warning: "Warning", info: "Info" };
const PAGE_FINDINGS = 10;
const PAGE_INSTANCES = 10;

const state = {
  rank: currentRank(),
  category: urlParam("category"),
  finding: urlParam("finding"),
};
let data = null;
let findingsTable = null;
let instancesTable = null;

/** A DataTable source over rows already here: the page slice, and a name filter on `key`. */
function localSource(getRows, key) {
  return async ({ offset = 0, limit, q }) => {
    let rows = getRows();
    if (q && key) {
      const needle = q.toLowerCase();
      rows = rows.filter((r) => String(key(r) ?? "").toLowerCase().includes(needle));
    }
    return { rows: rows.slice(offset, offset + limit), total: rows.length, offset, limit,
      truncated: offset + limit < rows.length };
  };
}

function keepInUrl() {
  replaceParams({ category: state.category || null, finding: state.finding || null });
}

function severityChip(sev) {
  return el("span", { class: `adv-sev adv-sev-${sev}`, title: SEVERITY_LABEL[sev] || sev }, SEVERITY_LABEL[sev] || sev);
}

function findingsOf(category) {
  return data.findings.filter((f) => f.category === category);
}

function renderCategories() {
  const nav = clear($("#adv-cats"));
  nav.append(el("div", { class: "adv-cats-head" }, "Expert Analysis"));
  for (const c of data.categories) {
    const worst = findingsOf(c.id)
      .reduce((w, f) => (w === null || rankOf(f.severity) < rankOf(w) ? f.severity : w), null);
    const item = el("button", {
      class: `adv-cat${c.id === state.category ? " active" : ""}${c.count ? "" : " empty"}`, type: "button",
      title: c.description, dataset: { category: c.id },
    }, el("span", { class: "adv-cat-label" }, c.label),
    el("span", { class: `adv-count${worst ? ` adv-count-${worst}` : ""}` }, String(c.count)));
    item.addEventListener("click", () => pickCategory(c.id));
    nav.append(item);
  }
  if (data.truncated) nav.append(el("div", { class: "v-note warn" }, "Only the first findings are listed."));
}

function rankOf(sev) {
  return { critical: 0, warning: 1, info: 2 }[sev] ?? 3;
}

function pickCategory(id, findingId = null) {
  state.category = id;
  const list = findingsOf(id);
  state.finding = findingId && list.some((f) => f.id === findingId) ? findingId : list[0]?.id ?? null;
  keepInUrl();
  renderCategories();
  const cat = data.categories.find((c) => c.id === id);
  $("#adv-cat-title").textContent = cat ? cat.label : "Findings";
  $("#adv-cat-note").textContent = cat ? cat.description : "";
  findingsTable.reset();
  renderDetail();
}

function pickFinding(f) {
  state.finding = f.id;
  keepInUrl();
  findingsTable.reload();
  renderDetail();
}

function sourceText(src) {
  if (!src) return "";
  const parts = [];
  if (src.file) parts.push(src.file);
  else if (src.table) parts.push(`table ${src.table}`);
  if (src.src_row !== undefined && src.src_row !== null) parts.push(`row ${src.src_row}`);
  if (src.lane) parts.push(`lane ${src.lane}`);
  if (src.where) parts.push(src.where);
  if (src.rule) parts.push(`rule ${src.rule}`);
  if (src.host) parts.push(`host side: ${src.host}`);
  return `Source: ${parts.join(" · ")}`;
}

function renderDetail() {
  const f = data.findings.find((x) => x.id === state.finding);
  const section = $("#adv-detail-section");
  section.hidden = !f;
  if (!f) return;
  clear($("#adv-detail-title")).append(severityChip(f.severity), " ", f.title);
  $("#adv-detail-note").textContent = f.rank === null ? "across ranks" : `rank ${f.rank}`;
  $("#adv-text").textContent = f.text;
  $("#adv-source").textContent = sourceText(f.source);
  instancesTable.reset();
}

function instanceRows() {
  const f = data.findings.find((x) => x.id === state.finding);
  return f ? f.instances.map((inst, i) => ({ ...inst, index: i + 1 })) : [];
}

function buildTables() {
  findingsTable = new DataTable($("#adv-findings"), {
    id: "adv-findings-table",
    pageSize: PAGE_FINDINGS,
    load: localSource(() => findingsOf(state.category)),
    // every finding of the rank (all categories) with its numbers, as the Python API's run.advice(rank)
    csv: () => withQuery(`${apiBase}/export/advice.csv`, { rank: data?.rank ?? undefined }),
    parquet: () => withQuery(`${apiBase}/export/advice.parquet`, { rank: data?.rank ?? undefined }),
    empty: "Nothing to report in this category.",
    rowClass: (f) => (f.id === state.finding ? "selected" : ""),
    onRowClick: (f) => pickFinding(f),
    columns: [
      { key: "severity", label: "Severity", render: (f) => severityChip(f.severity) },
      { key: "title", label: "Finding", cellTitle: (f) => f.title },
      { key: "rank", label: "Rank", num: true, render: (f) => (f.rank === null ? "all" : String(f.rank)) },
      { key: "step", label: "Step", num: true, render: (f) => (f.step === null ? "–" : String(f.step)) },
      { key: "instance_count", label: "Instances", num: true, render: (f) => formatCount(f.instance_count) },
    ],
  });
  instancesTable = new DataTable($("#adv-instances"), {
    id: "adv-instances-table",
    pageSize: PAGE_INSTANCES,
    filter: "Filter by name",
    load: localSource(instanceRows, (r) => `${r.name} ${r.detail || ""}`),
    empty: "No instances.",
    onRows: () => {
      const f = data.findings.find((x) => x.id === state.finding);
      const note = $("#adv-instances-note");
      if (note) note.remove();
      if (f && f.instances_truncated) {
        const shown = formatCount(f.instances.length);
        $("#adv-instances").append(el("div", { class: "v-note", id: "adv-instances-note" },
          `The first ${shown} of ${formatCount(f.instance_count)} instances, largest first.`));
      }
    },
    columns: [
      { key: "index", label: "#", num: true },
      { key: "name", label: "Name", cellTitle: (r) => r.name },
      { key: "rank", label: "Rank", num: true },
      { key: "ts_ns", label: "Start (ms)", num: true, title: "From the start of the run",
        render: (r) => (r.ts_ns === null ? "–" : relMs(r.ts_ns, data.origin_ns)) },
      { key: "dur_ns", label: "Duration (ms)", num: true, render: (r) => ms(r.span_ns ?? r.dur_ns) },
      { key: "detail", label: "Notes", cellTitle: (r) => r.detail || "", render: (r) => r.detail || "" },
      { key: "link", label: "Timeline", render: (r) => timelineLink(r.timeline_url, "Show in timeline") },
    ],
  });
}

async function load() {
  const view = $("#advice-view");
  view.dataset.ready = "false";
  try {
    data = await latest("advice", `${apiBase}/advice`, { rank: state.rank ?? undefined });
  } catch (err) {
    if (isAbort(err)) return;
    clear($("#adv-findings")).append(errorBox(err));
    return;
  }
  showRank(data.rank);
  const known = data.categories.some((c) => c.id === state.category);
  const first = data.categories.find((c) => c.count) || data.categories[0];
  pickCategory(known ? state.category : first.id, state.finding);
  view.dataset.ready = "true";
}

if ($("#advice-view")) {
  buildTables();
  onRankChange((rank) => {
    state.rank = rank;
    state.finding = null;
    load();
  });
  load();
}
