// Building blocks of the operator, memory, summary and communication views: DOM helpers, a server-paged table
// (sort, filter, page and CSV export all happen on the server), dark plotly defaults and timeline links.

import { apiGet, isAbort, queryString } from "/static/js/common/api.js";
import { plotText } from "/static/js/common/escape.js";
import { formatCount, formatDuration } from "/static/js/common/format.js";
import { currentRank, page } from "/static/js/common/nav.js";

export { apiGet, formatCount, formatDuration, currentRank, page, plotText, queryString };

export const runId = page.run_id;
export const apiBase = `/api/runs/${encodeURIComponent(runId)}`;

/** el("div", {class: "x", onclick: fn}, child, "text", …): a DOM element; null/false children are skipped. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export const $ = (sel, root = document) => root.querySelector(sel);

/** Milliseconds with fixed decimals, the unit MindStudio Insight uses in its tables. */
export function ms(ns, digits = 3) {
  if (ns === null || ns === undefined) return "–";
  return (Number(ns) / 1e6).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function us(ns, digits = 3) {
  if (ns === null || ns === undefined) return "–";
  return (Number(ns) / 1e3).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function pct(x, digits = 1) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return `${(100 * x).toFixed(digits)}%`;
}

export function num(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toLocaleString("en-US", { maximumFractionDigits: digits });
}

/** A ratio or measure with a fixed number of decimals (table columns line up). */
export function fixed(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toFixed(digits);
}

/** An absolute epoch-ns string relative to origin (a string too), in ms: exact through BigInt. */
export function relMs(absNs, originNs, digits = 3) {
  if (absNs === null || absNs === undefined || originNs === null || originNs === undefined) return "–";
  return ms(Number(BigInt(absNs) - BigInt(originNs)), digits);
}

export function relNs(absNs, originNs) {
  return Number(BigInt(absNs) - BigInt(originNs));
}

export function absNs(relativeNs, originNs) {
  return (BigInt(originNs) + BigInt(Math.round(relativeNs))).toString();
}

/** "Show in Timeline" link, or a greyed note when the rank has no trace. */
export function timelineLink(url, label = "Show in Timeline") {
  if (url) return el("a", { class: "tl-link", href: url, title: "Open the timeline here" }, label);
  return el("span", { class: "tl-link disabled", title: "This rank has no trace_view.json: no timeline to open" },
    "no trace");
}

/** Rank options without this view's data are marked (but stay selectable: the view then says so). */
export function markRanks(available) {
  const sel = document.getElementById("rank-select");
  if (!sel) return;
  const have = new Set(available.map(String));
  for (const o of sel.options) {
    if (o.value === "") continue;
    const base = o.dataset.label || o.textContent;
    o.dataset.label = base;
    o.textContent = have.has(o.value) ? base : `${base} (no data)`;
  }
}

/** Make the rank selector show `rank` (the server's default when the URL did not pick one). */
export function showRank(rank) {
  const sel = document.getElementById("rank-select");
  if (!sel || rank === null || rank === undefined) return;
  if (currentRank() === null && sel.querySelector('option[value=""]')) return;
  if ([...sel.options].some((o) => o.value === String(rank))) sel.value = String(rank);
}

export function section(title, ...children) {
  return el("section", { class: "v-section" }, el("h2", { class: "v-section-title" }, title), ...children);
}

export function note(text, cls = "v-note") {
  return el("div", { class: cls }, text);
}

/**
 * Why a section has no rows, as the server says it (server/queries/sources.py): `section` is one entry of an
 * answer's `empty_sources` ({label, sources, ranks: [{rank, message}], more}). Returns null when no rank is listed
 * (the section has rows), else a note: "No <label> for rank N", one line per rank naming the file or table, and the
 * sources that feed the section in either export.
 */
export function sourceNote(section, attrs = {}) {
  if (!section || !section.ranks?.length) return null;
  const ranks = section.ranks.map((r) => r.rank).filter((r) => r !== null && r !== undefined);
  const named = ranks.length && ranks.length <= 8 && !section.more;
  const who = named ? ` for rank${ranks.length > 1 ? "s" : ""} ${ranks.join(", ")}` : ranks.length ? " for some ranks" : "";
  return el("div", { class: "v-source-note", ...attrs },
    el("div", { class: "v-source-head" }, `No ${section.label}${who}:`),
    el("ul", {}, section.ranks.map((r) => el("li", { dataset: { rank: r.rank ?? "", reason: r.reason } }, r.message)),
      section.more ? el("li", { class: "v-note" }, `and ${section.more} more ranks`) : null),
    el("div", { class: "v-source-feeds" }, `Read from: ${section.sources.join(" · ")}`));
}

/** The first rank's reason of a section, as one line (table placeholders, chart notes), or `fallback`. */
export function sourceLine(section, fallback) {
  const first = section?.ranks?.[0];
  return first ? `No ${section.label}: ${first.message}` : fallback;
}

export function errorBox(err) {
  return el("div", { class: "v-error" }, `Could not load: ${err.message || err}`);
}

/** A request that cancels the previous one of the same key (fast filter typing). */
const inflight = new Map();
export async function latest(key, path, params) {
  inflight.get(key)?.abort();
  const ctl = new AbortController();
  inflight.set(key, ctl);
  try {
    return await apiGet(path, params, { signal: ctl.signal });
  } finally {
    if (inflight.get(key) === ctl) inflight.delete(key);
  }
}

export { isAbort };

// ---------------------------------------------------------------- plotly

export const CHART_COLORS = ["#3f7fd8", "#2f9e8f", "#8a5cd0", "#e07b39", "#4b9a4f", "#c2507a", "#2d8fb8", "#b8a02c",
  "#6a6fd6", "#c2503f", "#3c9c74", "#9c6b3d", "#5a86c9", "#b04f72", "#5f9a38", "#7a63b8"];

export function baseLayout(extra = {}) {
  const axis = { gridcolor: "#343840", zerolinecolor: "#454a54", linecolor: "#454a54", tickfont: { size: 11 } };
  return {
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { color: "#c9ccd3", size: 12, family: "-apple-system, Segoe UI, Noto Sans, Arial, sans-serif" },
    margin: { l: 60, r: 20, t: 30, b: 40 },
    legend: { orientation: "h", y: 1.12, x: 0, font: { size: 11 } },
    hoverlabel: { bgcolor: "#22252b", bordercolor: "#454a54", font: { color: "#f1f3f6" } },
    ...extra,
    xaxis: { ...axis, ...(extra.xaxis || {}) },
    yaxis: { ...axis, ...(extra.yaxis || {}) },
    ...(extra.yaxis2 ? { yaxis2: { ...axis, ...extra.yaxis2 } } : {}),
  };
}

export const PLOT_CONFIG = { displaylogo: false, responsive: true,
  modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d", "toggleSpikelines"] };

/** [min, max] of the finite values of some arrays, padded by 1% (a lone value by ±0.5), or null without any: the
 * x range of a time chart is set from its data, because plotly's autorange also reaches for shapes and arrows. */
export function dataRange(arrays) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const a of arrays) {
    for (const v of a || []) {
      if (v === null || !Number.isFinite(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (lo > hi) return null;
  const pad = hi > lo ? (hi - lo) * 0.01 : Math.max(Math.abs(lo) * 0.01, 0.5);
  return [lo - pad, hi + pad];
}

function hasPoints(t) {
  const v = t.values || t.y || t.z || [];
  return Array.isArray(v) && v.length > 0;
}

/** Plotly.react with the dark defaults; a chart without any point says "No data" instead of empty axes. */
export function plot(node, traces, layout, config = {}) {
  if (!traces.some(hasPoints)) {
    const { yaxis2, ...rest } = layout;
    layout = { ...rest, xaxis: { ...layout.xaxis, visible: false }, yaxis: { ...layout.yaxis, visible: false },
      showlegend: false,
      annotations: [{ text: "No data", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
        font: { size: 14, color: "#8e94a0" } }] };
  }
  // eslint-disable-next-line no-undef
  return Plotly.react(node, traces, layout, { ...PLOT_CONFIG, ...config });
}

// ---------------------------------------------------------------- server-paged table

/**
 * new DataTable(container, {
 *   columns: [{key, label, sort?: "apiName", num?: true, render?: (row) => string|Node, title?}],
 *   load: (params) => Promise<{rows, total, offset, limit, truncated}>,   // params: {sort, order, q, offset, limit}
 *   csv: (params) => url | null, filter: "placeholder" | null, pageSize, sort, order,
 *   empty?: string | (answer) => string | Node,   // what a page without rows says
 *   rowClass?: (row) => string, details?: (row) => Node (an expandable row), onRows?: (page) => void, id?: string })
 * Sorting, filtering and paging are server requests; the CSV link carries the same filter.
 */
export class DataTable {
  constructor(container, opts) {
    this.opts = { pageSize: 20, order: "desc", ...opts };
    this.state = { sort: opts.sort ?? null, order: this.opts.order, q: "", offset: 0 };
    this.seq = 0;
    this.open = new Set();
    const filter = opts.filter
      ? el("input", { type: "search", class: "v-filter", placeholder: opts.filter, spellcheck: "false" })
      : null;
    if (filter) {
      let t = null;
      filter.addEventListener("input", () => {
        clearTimeout(t);
        t = setTimeout(() => { this.state.q = filter.value.trim(); this.state.offset = 0; this.reload(); }, 250);
      });
    }
    this.info = el("span", { class: "v-table-info" });
    this.csvLink = el("a", { class: "btn v-csv", href: "#", download: "" }, "Export CSV");
    this.csvLink.hidden = !opts.csv;
    this.table = el("table", { class: "grid v-table", id: opts.id || null });
    this.pager = el("div", { class: "v-pager" });
    container.append(
      el("div", { class: "v-table-bar" }, filter, this.info, el("span", { class: "v-spacer" }), this.csvLink),
      el("div", { class: "v-table-wrap" }, this.table),
      this.pager,
    );
  }

  params() {
    const { sort, order, q, offset } = this.state;
    return { sort: sort || undefined, order: sort ? order : undefined, q: q || undefined, offset,
      limit: this.opts.pageSize };
  }

  async reload() {
    const seq = ++this.seq;
    this.table.classList.add("loading");
    let data;
    try {
      data = await this.opts.load(this.params());
    } catch (err) {
      if (isAbort(err)) return;
      if (seq !== this.seq) return;
      this.table.classList.remove("loading");
      clear(this.table).append(el("tbody", {}, el("tr", {}, el("td", { class: "v-error" }, String(err.message)))));
      return;
    }
    if (seq !== this.seq) return;
    this.table.classList.remove("loading");
    this.data = data;
    this.render(data);
    if (this.opts.csv) {
      const { offset, limit, ...rest } = this.params();
      const url = this.opts.csv(rest);
      this.csvLink.hidden = !url;
      if (url) this.csvLink.href = url;
    }
    this.opts.onRows?.(data);
  }

  render(data) {
    const { columns } = this.opts;
    const head = el("tr", {}, this.opts.details ? el("th", { class: "v-expand-col" }) : null,
      columns.map((c) => {
        const active = c.sort && this.state.sort === c.sort;
        const th = el("th", { class: [c.num ? "num" : "", c.sort ? "sortable" : "", active ? "sorted" : ""].join(" "),
          title: c.title || (c.sort ? "Sort on the server" : null), dataset: { key: c.key } },
        c.label, active ? el("span", { class: "v-sort-mark" }, this.state.order === "asc" ? " ▲" : " ▼") : null);
        if (c.sort) th.addEventListener("click", () => this.sortBy(c.sort));
        return th;
      }));
    const body = el("tbody");
    if (!data.rows.length) {
      // `empty` may be a function of the answer: a table without rows can then say which file would have fed it
      const empty = typeof this.opts.empty === "function" ? this.opts.empty(data) : this.opts.empty;
      body.append(el("tr", {}, el("td", { colspan: columns.length + 1, class: "empty" }, empty || "No rows")));
    }
    data.rows.forEach((row, i) => {
      const key = this.opts.rowKey ? this.opts.rowKey(row) : String(data.offset + i);
      const tr = el("tr", { class: this.opts.rowClass?.(row) || null });
      if (this.opts.details) {
        const isOpen = this.open.has(key);
        const btn = el("button", { class: "v-expand", title: "Details", "aria-expanded": isOpen ? "true" : "false" },
          isOpen ? "▾" : "▸");
        tr.append(el("td", { class: "v-expand-col" }, btn));
        btn.addEventListener("click", (ev) => { ev.stopPropagation(); this.toggle(key, row, tr, btn); });
      }
      for (const c of columns) {
        const v = c.render ? c.render(row) : row[c.key];
        tr.append(el("td", { class: c.num ? "num" : null, title: c.cellTitle ? c.cellTitle(row) : null },
          v instanceof Node ? v : (v === null || v === undefined ? "–" : String(v))));
      }
      if (this.opts.onRowClick) {
        tr.classList.add("clickable");
        tr.addEventListener("click", () => this.opts.onRowClick(row, tr));
      }
      body.append(tr);
      if (this.opts.details && this.open.has(key)) this.insertDetails(key, row, tr);
    });
    clear(this.table).append(el("thead", {}, head), body);
    const first = data.total ? data.offset + 1 : 0;
    const last = data.offset + data.rows.length;
    this.info.textContent = `${formatCount(first)}–${formatCount(last)} of ${formatCount(data.total)}`;
    const prev = el("button", { class: "btn", disabled: data.offset === 0 }, "‹ Prev");
    const next = el("button", { class: "btn", disabled: last >= data.total }, "Next ›");
    prev.addEventListener("click", () => { this.state.offset = Math.max(0, data.offset - this.opts.pageSize); this.reload(); });
    next.addEventListener("click", () => { this.state.offset = data.offset + this.opts.pageSize; this.reload(); });
    const pages = Math.max(1, Math.ceil(data.total / this.opts.pageSize));
    const cur = Math.floor(data.offset / this.opts.pageSize) + 1;
    clear(this.pager).append(prev, el("span", { class: "v-page-no" }, `page ${cur} / ${pages}`), next);
  }

  toggle(key, row, tr, btn) {
    if (this.open.has(key)) {
      this.open.delete(key);
      tr.nextElementSibling?.classList.contains("v-details-row") && tr.nextElementSibling.remove();
      btn.textContent = "▸";
      btn.setAttribute("aria-expanded", "false");
    } else {
      this.open.add(key);
      btn.textContent = "▾";
      btn.setAttribute("aria-expanded", "true");
      this.insertDetails(key, row, tr);
    }
  }

  insertDetails(key, row, tr) {
    const cell = el("td", { colspan: this.opts.columns.length + 1 });
    tr.after(el("tr", { class: "v-details-row" }, cell));
    cell.append(this.opts.details(row));
  }

  sortBy(sort) {
    if (this.state.sort === sort) this.state.order = this.state.order === "asc" ? "desc" : "asc";
    else { this.state.sort = sort; this.state.order = "desc"; }
    this.state.offset = 0;
    this.reload();
  }

  /** Start over (new filters outside the table): first page, details closed. */
  reset() {
    this.state.offset = 0;
    this.open.clear();
    return this.reload();
  }
}

export function csvUrl(path, params) {
  return path + queryString(params);
}

/** A <select> with options [{value, label}] and an onchange. */
export function select(options, value, onchange, attrs = {}) {
  const s = el("select", attrs, options.map((o) => el("option", { value: o.value ?? "", selected: String(o.value ?? "") === String(value ?? "") }, o.label)));
  s.addEventListener("change", () => onchange(s.value));
  return s;
}

export function field(label, control, attrs = {}) {
  return el("label", { class: "v-field", ...attrs }, el("span", { class: "v-field-label" }, label), control);
}

export { formatDuration as dur };
