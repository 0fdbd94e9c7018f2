// The views' server-paged table: sorting, filtering, paging and the CSV export are requests to the server (the
// table shows one page and holds no other rows); a row may unfold into details.

import { isAbort } from "../common/api.js";
import { clear, el } from "../common/dom.js";
import { formatCount } from "../common/format.js";

/**
 * new DataTable(container, {
 *   columns: [{key, label, sort?: "apiName", num?: true, render?: (row) => string|Node, title?}],
 *   load: (params) => Promise<{rows, total, offset, limit, truncated}>,   // params: {sort, order, q, offset, limit}
 *   csv: (params) => url | null, parquet: (params) => url | null (the whole table, GET …/export/<table>.parquet),
 *   filter: "placeholder" | null, pageSize, sort, order,
 *   empty?: string | (answer) => string | Node,   // what a page without rows says
 *   rowClass?: (row) => string, details?: (row) => Node (an expandable row), onRows?: (page) => void, id?: string })
 * Sorting, filtering and paging are server requests; the CSV and Parquet links carry the same filter.
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
    this.parquetLink = el("a", { class: "btn v-parquet", href: "#", download: "",
      title: "Every row of this table (with this filter) as Parquet" }, "Parquet");
    this.parquetLink.hidden = !opts.parquet;
    this.table = el("table", { class: "grid v-table", id: opts.id || null });
    this.pager = el("div", { class: "v-pager" });
    container.append(
      el("div", { class: "v-table-bar" }, filter, this.info, el("span", { class: "v-spacer" }), this.csvLink,
        this.parquetLink),
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
    const { offset, limit, ...rest } = this.params();
    for (const [make, link] of [[this.opts.csv, this.csvLink], [this.opts.parquet, this.parquetLink]]) {
      if (!make) continue;
      const url = make(rest);
      link.hidden = !url;
      if (url) link.href = url;
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
