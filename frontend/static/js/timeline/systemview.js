// System View, a page of the bottom panel: per rank, Overall Metrics (a tree from the Overlap Analysis lane) and
// per-name summaries of the Python, CANN, Ascend Hardware and communication lanes (GET …/systemview/{page}),
// over the whole run or a range sent by "Time Range Analysis". A click on a row lists its slices on the right
// (…/systemview/{page}/slices, paged); a click on a slice jumps to it on the timeline.
//
// host: {runId, rawWindow(rank, scope) → {start_ns, end_ns} absolute strings or {}, jump(sliceId),
//        describeScope(scope) → text, defaultRank() → the rank to start on or null}

import { apiGet, isAbort } from "../common/api.js";
import { el } from "../common/dom.js";
import { formatCount, pct } from "../common/format.js";
import { formatDuration, formatExact } from "../common/time.js";
import { runApi } from "../common/urls.js";
import { numCell as num, pager } from "./tables.js";

const PAGE_ROWS = 100;
const DETAIL_ROWS = 50;
export const PAGES = [
  { id: "overall", title: "Overall Metrics", short: "Overall Metrics",
    help: "Computing, Communication and Free time from the Overlap Analysis lane, as shares of E2E (first start to "
      + "last end of the lane). Computing is split by the accelerator core and kernel type of its Ascend Hardware "
      + "tasks (kernel time: tasks on different streams can run at once)." },
  { id: "python", title: "Python API Summary", short: "Python API", help: "Per name on the rank's Python lanes: torch ops, Python "
      + "functions, enqueue/dequeue. Self = time not covered by the slice's children." },
  { id: "cann", title: "CANN API Summary", short: "CANN API", help: "Per name on the rank's CANN lanes (AscendCL, Node@launch …). "
      + "Self = time not covered by the slice's children." },
  { id: "hardware", title: "Ascend Hardware Task Summary", short: "Ascend Hardware Tasks", help: "Per task name (or Task Type) on the rank's "
      + "Ascend Hardware streams." },
  { id: "communication", title: "Communication Summary", short: "Communication", help: "Per collective op type on the rank's "
      + "communication op lanes (the planes' link tasks are left out)." },
];
const COLUMNS = {  // per-name pages: [header, field, sort key]
  base: [["Count", "count", "count"], ["Total", "total_ns", "total"], ["Avg", "avg_ns", "avg"],
    ["Min", "min_ns", "min"], ["Max", "max_ns", "max"]],
  self: [["Self", "self_ns", "self"]],
};

export class SystemView {
  constructor(root, host) {
    this.root = root;
    this.host = host;
    this.base = runApi(host.runId, "/systemview");
    this.ranks = null;
    this.rank = null;
    this.page = "overall";
    this.scope = null;
    this.state = {};  // page → {q, sort, order, offset, group_by}
    this.selected = null;  // {key, name}
    this.detail = { offset: 0, sort: "duration", order: "desc" };
    this.expanded = new Set(["overlap:Computing", "overlap:Communication"]);
    this.ctl = {};
    this.built = false;
  }

  pageState() {
    if (!this.state[this.page]) this.state[this.page] = { q: "", sort: "total", order: "desc", offset: 0, group_by: null };
    return this.state[this.page];
  }

  build() {
    this.rankSelect = el("select", { id: "sv-rank", "aria-label": "Rank",
      onchange: () => { this.rank = Number(this.rankSelect.value); this.selected = null; this.refresh(); } });
    this.nav = el("nav", { class: "sv-pages" }, ...PAGES.map((p) => el("button", {
      class: "sv-page-btn", dataset: { page: p.id }, onclick: () => this.showPage(p.id) },
    el("span", {}, p.short), el("span", { class: "sv-help", title: p.help }, "?"))));
    this.scopeBox = el("div", { class: "sv-scope", id: "sv-scope" });
    this.mainBar = el("div", { class: "sv-bar" });
    this.mainBody = el("div", { class: "sv-scroll", id: "sv-main" });
    this.detailBar = el("div", { class: "sv-bar" });
    this.detailBody = el("div", { class: "sv-scroll", id: "sv-details" });
    this.root.replaceChildren(el("div", { class: "sv" },
      el("aside", { class: "sv-side" }, el("label", { class: "sv-rank" }, "Rank", this.rankSelect), this.nav),
      this.scopeBox,
      el("section", { class: "sv-main" }, this.mainBar, this.mainBody),
      el("section", { class: "sv-details" }, this.detailBar, this.detailBody)));
    this.built = true;
  }

  /** Called when the page becomes visible (and on every later scope or rank change). */
  async ensure() {
    if (!this.built) this.build();
    if (!this.ranks) {
      try {
        this.ranks = (await apiGet(this.base)).ranks;
      } catch (err) {
        this.mainBody.replaceChildren(el("p", { class: "tl-empty" }, `Could not load System View: ${err.message}`));
        return;
      }
      this.rankSelect.replaceChildren(...this.ranks.map((r) => el("option", { value: String(r.rank) }, `Rank ${r.rank}`)));
      if (this.rank === null && this.ranks.length) {
        const wanted = this.host.defaultRank();  // the page's rank filter, when it names a rank with slices
        this.rank = this.ranks.some((r) => r.rank === wanted) ? wanted : this.ranks[0].rank;
      }
    }
    if (!this.ranks.length) {
      this.mainBody.replaceChildren(el("p", { class: "tl-empty" }, "This run has no slices to summarise."));
      return;
    }
    this.refresh();
  }

  setRank(rank) {
    if (rank === null || rank === undefined || rank === this.rank) return;
    this.rank = rank;
    this.selected = null;
  }

  setScope(scope) {
    this.scope = scope;
    for (const st of Object.values(this.state)) st.offset = 0;
    this.detail.offset = 0;
  }

  showPage(page) {
    if (page === this.page) return;
    this.page = page;
    this.selected = null;
    this.refresh();
  }

  /** Open a page on a row: the rank, the page filtered to the row's name, the row's slices listed. */
  showRow(rank, page, key, name) {
    this.setRank(rank);
    this.page = page;
    if (page !== "overall") Object.assign(this.pageState(), { q: name, offset: 0, group_by: null });
    this.selected = { key, name };
    this.detail.offset = 0;
    return this.ensure();
  }

  refresh() {
    if (!this.built || this.rank === null) return;
    this.rankSelect.value = String(this.rank);
    const pages = (this.ranks.find((r) => r.rank === this.rank) || { pages: [] }).pages;
    for (const b of this.nav.querySelectorAll(".sv-page-btn")) {
      b.classList.toggle("active", b.dataset.page === this.page);
      b.classList.toggle("empty", !pages.includes(b.dataset.page));
    }
    this.renderScope();
    this.loadMain();
    this.loadDetails();
  }

  renderScope() {
    this.scopeBox.classList.toggle("ranged", !!this.scope);
    if (!this.scope) {
      this.scopeBox.replaceChildren(el("span", {}, "Whole run"),
        el("span", { class: "muted" }, "· right-click a selected range → Time Range Analysis to narrow it"));
      return;
    }
    this.scopeBox.replaceChildren(el("span", {}, "Time range ", el("b", {}, this.host.describeScope(this.scope))),
      el("span", { class: "muted" }, "· slices count for their time inside it"),
      el("button", { class: "tl-link", id: "sv-whole-run", onclick: () => { this.setScope(null); this.refresh(); } },
        "Whole run"));
  }

  params() {
    return { rank: this.rank, ...this.host.rawWindow(this.rank, this.scope) };
  }

  async fetch(area, url, params) {
    if (this.ctl[area]) this.ctl[area].abort();
    const ctl = new AbortController();
    this.ctl[area] = ctl;
    try {
      const r = await apiGet(url, params, { signal: ctl.signal });
      return this.ctl[area] === ctl ? r : null;
    } catch (err) {
      if (isAbort(err)) return null;
      (area === "main" ? this.mainBody : this.detailBody).replaceChildren(el("p", { class: "tl-empty" }, err.message));
      return null;
    }
  }

  // ---- the page's table -------------------------------------------------------------------------------------
  async loadMain() {
    const page = this.page;
    const st = this.pageState();
    this.root.dataset.svPage = page;
    this.root.dataset.svState = "loading";
    const params = page === "overall" ? this.params() : { ...this.params(), q: st.q || null, sort: st.sort,
      order: st.order, offset: st.offset, limit: PAGE_ROWS, group_by: st.group_by };
    const r = await this.fetch("main", `${this.base}/${page}`, params);
    if (!r || page !== this.page) return;
    if (page === "overall") this.renderOverall(r);
    else this.renderGrouped(r, st);
    this.root.dataset.svState = "ready";
  }

  renderOverall(r) {
    this.mainBar.replaceChildren(el("span", { class: "sv-title" }, "Overall Metrics"),
      el("span", { class: "muted" }, `E2E ${formatDuration(r.e2e_ns)}`));
    if (!r.has_data) {
      this.mainBody.replaceChildren(el("p", { class: "tl-empty" }, this.scope
        ? "No Overlap Analysis slice of this rank falls in the range." : "This rank has no Overlap Analysis lane."));
      return;
    }
    const head = el("tr", {}, ...["Category", "Total", "Ratio", "Count", "Avg", "Min", "Max"]
      .map((h, i) => el("th", i ? { class: "num" } : {}, h)));
    const body = el("tbody");
    const add = (row, level) => {
      const open = this.expanded.has(row.key);
      const twisty = row.children.length ? el("span", { class: "twisty", onclick: (e) => {
        e.stopPropagation();
        if (open) this.expanded.delete(row.key); else this.expanded.add(row.key);
        this.renderOverall(r);
      } }, open ? "▼" : "▶") : el("span", { class: "twisty leaf" });
      const name = el("td", { class: "name", title: row.name }, el("div", { class: "trunc" }, twisty, row.name));
      name.style.paddingLeft = `${6 + level * 16}px`;
      const tr = el("tr", { class: "sv-row" + (row.has_slices ? " link" : "") + (this.selected?.key === row.key ? " current" : ""),
        dataset: { key: row.key, name: row.name }, onclick: () => row.has_slices && this.select(row.key, row.name) },
      name, num(formatDuration(row.total_ns)), num(pct(row.ratio, 2)),
      num(formatCount(row.count)), num(formatDuration(row.avg_ns)), num(formatDuration(row.min_ns)),
      num(formatDuration(row.max_ns)));
      body.append(tr);
      if (open) for (const c of row.children) add(c, level + 1);
      if (open && row.truncated) body.append(el("tr", {}, el("td", { class: "muted", colspan: "7" }, "(longest kernel types shown)")));
    };
    for (const row of r.rows) add(row, 0);
    const notes = (r.notes || []).map((n) => el("p", { class: "muted sv-note" }, n));
    this.mainBody.replaceChildren(el("table", { class: "grid sv-table", id: "sv-table" }, el("thead", {}, head), body),
      ...notes);
  }

  renderGrouped(r, st) {
    const cols = [...COLUMNS.base, ...(r.self ? COLUMNS.self : [])];
    const filter = el("input", { type: "search", class: "sv-filter", placeholder: "Filter names…", value: st.q,
      spellcheck: "false", "aria-label": "Filter names" });
    filter.addEventListener("keydown", (e) => e.stopPropagation());
    filter.addEventListener("change", () => { st.q = filter.value.trim(); st.offset = 0; this.loadMain(); });
    const bar = [el("span", { class: "sv-title" }, PAGES.find((p) => p.id === this.page).title), filter];
    if (this.page === "hardware") {
      const group = el("select", { "aria-label": "Group by", onchange: () => {
        st.group_by = group.value; st.offset = 0; this.selected = null; this.loadMain(); this.loadDetails();
      } }, el("option", { value: "name" }, "by task name"), el("option", { value: "task_type" }, "by Task Type"));
      group.value = r.group_by;
      bar.push(group);
    }
    bar.push(el("span", { class: "muted" }, `${formatCount(r.total)} ${r.total === 1 ? "name" : "names"}`),
      pager(r.offset, r.limit, r.rows.length, r.total, (o) => { st.offset = o; this.loadMain(); }));
    this.mainBar.replaceChildren(...bar);
    if (!r.rows.length) {
      this.mainBody.replaceChildren(el("p", { class: "tl-empty" }, st.q ? `No name contains “${st.q}”.`
        : this.scope ? "Nothing of these lanes falls in the range." : "This rank has no slices in these lanes."));
      return;
    }
    const sortHead = (label, key, cls) => el("th", { class: `${cls || ""} sortable${st.sort === key ? " sorted" : ""}`,
      title: `Sort by ${label}`, onclick: () => {
        st.order = st.sort === key && st.order === "desc" ? "asc" : "desc";
        st.sort = key;
        st.offset = 0;
        this.loadMain();
      } }, label, st.sort === key ? (st.order === "desc" ? " ▾" : " ▴") : "");
    const head = el("tr", {}, sortHead("Name", "name"), ...cols.map(([h, , key]) => sortHead(h, key, "num")),
      ...(r.group_by === "name" && this.page === "hardware" ? [el("th", {}, "Task Type")] : []));
    const body = el("tbody");
    body.append(el("tr", { class: "totals" }, el("td", {}, "Totals"), num(formatCount(r.totals.count)),
      num(formatDuration(r.totals.total_ns)), el("td"), el("td"), el("td"),
      ...(r.self ? [num(formatDuration(r.totals.self_ns))] : []),
      ...(r.group_by === "name" && this.page === "hardware" ? [el("td")] : [])));
    for (const row of r.rows) {
      body.append(el("tr", { class: "sv-row link" + (this.selected?.key === row.key ? " current" : ""),
        dataset: { key: row.key }, onclick: () => this.select(row.key, row.name) },
      el("td", { class: "name", title: row.name }, el("div", { class: "trunc" }, row.name)),
      ...cols.map(([, f]) => num(f === "count" ? formatCount(row[f]) : formatDuration(row[f]))),
      ...(row.task_types !== undefined ? [el("td", { class: "muted" }, row.task_types)] : [])));
    }
    this.mainBody.replaceChildren(el("table", { class: "grid sv-table", id: "sv-table" }, el("thead", {}, head), body));
  }

  select(key, name) {
    this.selected = { key, name };
    this.detail.offset = 0;
    for (const tr of this.mainBody.querySelectorAll("tr.sv-row")) tr.classList.toggle("current", tr.dataset.key === key);
    this.loadDetails();
  }

  // ---- the selected row's slices ----------------------------------------------------------------------------
  async loadDetails() {
    if (!this.selected) {
      this.detailBar.replaceChildren(el("span", { class: "sv-title" }, "Slices"));
      this.detailBody.replaceChildren(el("p", { class: "tl-empty" }, "Click a row to list its slices."));
      return;
    }
    const sel = this.selected;
    const st = this.pageState();
    const d = this.detail;
    const r = await this.fetch("details", `${this.base}/${this.page}/slices`, { ...this.params(), key: sel.key,
      group_by: this.page === "hardware" ? st.group_by : null, sort: d.sort, order: d.order, offset: d.offset,
      limit: DETAIL_ROWS });
    if (!r || sel !== this.selected) return;
    this.detailBar.replaceChildren(el("span", { class: "sv-title", title: sel.name }, sel.name),
      el("span", { class: "muted" }, formatCount(r.total)),
      pager(r.offset, r.limit, r.rows.length, r.total, (o) => { d.offset = o; this.loadDetails(); }));
    if (!r.rows.length) {
      this.detailBody.replaceChildren(el("p", { class: "tl-empty" }, "No slice."));
      return;
    }
    const sortHead = (label, key) => el("th", { class: `num sortable${d.sort === key ? " sorted" : ""}`,
      title: `Sort by ${label.toLowerCase()}`, onclick: () => {
        d.order = d.sort === key && d.order === "desc" ? "asc" : "desc";
        d.sort = key;
        d.offset = 0;
        this.loadDetails();
      } }, label, d.sort === key ? (d.order === "desc" ? " ▾" : " ▴") : "");
    const clipped = !!this.scope;
    const head = el("tr", {}, el("th", {}, "Name"), sortHead("Start", "start"), sortHead("Duration", "duration"),
      ...(clipped ? [sortHead("Inside", "time")] : []));
    const body = el("tbody");
    for (const s of r.rows) {
      body.append(el("tr", { class: "sv-slice link", dataset: { sliceId: String(s.slice_id) },
        title: `${s.name} · ${s.lane} — click to show it on the timeline`, onclick: () => this.host.jump(s.slice_id) },
      el("td", { class: "name" }, el("div", { class: "trunc" }, s.name, el("span", { class: "muted" }, `  ${s.lane}`))),
      num(formatExact(s.ts_ns)), num(formatDuration(s.dur_ns)), ...(clipped ? [num(formatDuration(s.time_ns))] : [])));
    }
    this.detailBody.replaceChildren(el("table", { class: "grid sv-table" }, el("thead", {}, head), body));
  }
}
