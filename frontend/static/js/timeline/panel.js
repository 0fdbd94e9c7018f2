// The bottom panel: Slice Detail, Range Stats and Find pages. Built with DOM nodes and textContent only
// (slice names and args are user data). Links call back into the timeline (jump to a slice).

import { flowColor } from "../common/colors.js";
import { formatCount, formatDuration, formatExact } from "../common/format.js";

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function kvTable(rows) {
  const table = el("table", { class: "kv" });
  for (const [k, v, cls] of rows) {
    if (v === null || v === undefined || v === "") continue;
    table.append(el("tr", {}, el("td", {}, k), el("td", cls ? { class: cls } : {}, v)));
  }
  return table;
}

export class Panel {
  constructor(root, handlers) {
    this.root = root;
    this.handlers = handlers; // {jump(sliceId), toggle()}
    this.detail = root.querySelector("#tl-detail");
    this.rangePage = root.querySelector("#tl-range");
    this.find = root.querySelector("#tl-find");
    this.tabs = [...root.querySelectorAll(".tl-panel-tab")];
    for (const t of this.tabs) t.addEventListener("click", () => this.show(t.dataset.tab));
    root.querySelector("#tl-panel-toggle").addEventListener("click", () => handlers.toggle());
  }

  get collapsed() {
    return this.root.classList.contains("collapsed");
  }

  setCollapsed(on) {
    this.root.classList.toggle("collapsed", on);
  }

  show(tab) {
    for (const t of this.tabs) t.classList.toggle("active", t.dataset.tab === tab);
    for (const page of this.root.querySelectorAll(".tl-panel-page")) page.hidden = page.dataset.page !== tab;
    if (this.collapsed) this.handlers.toggle();
  }

  jumpLink(text, sliceId, title) {
    return el("a", { class: "jump", href: "#", title: title || "Go to this slice",
      onclick: (e) => { e.preventDefault(); this.handlers.jump(sliceId); } }, text);
  }

  showLoading(sliceId) {
    this.detail.replaceChildren(el("p", { class: "tl-empty" }, `Loading slice ${sliceId}…`));
  }

  showError(message) {
    this.detail.replaceChildren(el("p", { class: "tl-empty" }, message));
  }

  clearDetail() {
    this.detail.replaceChildren(el("p", { class: "tl-empty" }, "Click a slice to see its details."));
  }

  /** Slice Detail from GET …/timeline/slices/{id}. */
  showDetail(d, trackTitle) {
    const left = el("div", { class: "tl-detail" });
    left.append(
      el("h3", {}, "Slice"),
      el("div", { class: "title", dataset: { sliceId: String(d.slice_id) } }, d.name),
      kvTable([
        ["Start", formatExact(d.ts_ns)],
        ["Wall duration", `${formatDuration(d.dur_ns)}  (${formatCount(d.dur_ns)} ns)`],
        ["Start (raw)", `${d.start_abs_ns} ns`, "mono"],
        ["End (raw)", `${d.end_abs_ns} ns`, "mono"],
        ["Lane", trackTitle],
        ["Category", d.cat],
        ["Depth", String(d.depth)],
        ["Slice id", String(d.slice_id)],
      ]),
    );
    if (d.parent) {
      left.append(el("h3", {}, "Parent"), el("div", {}, this.jumpLink(d.parent.name, d.parent.slice_id), "  ",
        formatDuration(d.parent.dur_ns)));
    }
    if (d.children.count) {
      left.append(el("h3", {}, `Children (${d.children.count}${d.children.truncated ? ", first shown" : ""})`));
      const list = el("ul", { class: "flow-list" });
      for (const c of d.children.items.slice(0, 50)) {
        list.append(el("li", {}, this.jumpLink(c.name, c.slice_id), "  ", formatDuration(c.dur_ns)));
      }
      left.append(list);
    }
    const right = el("div", { class: "tl-detail" });
    if (d.flows.length) {
      right.append(el("h3", {}, `Flows (${d.flows.length})`));
      const list = el("ul", { class: "flow-list" });
      for (const f of d.flows) {
        const o = f.other;
        const where = o.track ? `${o.track.process_name} / ${o.track.thread_name} (rank ${o.track.rank})` : "";
        const label = o.name || `ts ${formatExact(o.ts_ns)}`;
        const swatch = el("span", { class: "cat" }, `${f.direction === "out" ? "→" : "←"} ${f.cat}`);
        swatch.style.color = flowColor(f.cat);
        list.append(el("li", { dataset: { flowId: String(f.flow_id) } }, swatch, " ",
          o.slice_id !== null ? this.jumpLink(label, o.slice_id, `Go to ${label}`) : label,
          el("span", { class: "muted" }, `  ${where}`)));
      }
      right.append(list);
    }
    const args = Object.entries(d.args || {}).filter(([k]) => !["Call stack", "Input Dims", "Input type"].includes(k));
    if (args.length) {
      right.append(el("h3", {}, "Args"),
        kvTable(args.map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : String(v), "mono"])));
    }
    if (d.input_shapes.length || d.input_types.length) {
      right.append(el("h3", {}, "Inputs"));
      const n = Math.max(d.input_shapes.length, d.input_types.length);
      const rows = [];
      for (let i = 0; i < n; i++) rows.push([`#${i}`, `${d.input_types[i] || ""}  [${d.input_shapes[i] || ""}]`, "mono"]);
      right.append(kvTable(rows));
    }
    if (d.kernel) {
      const keep = ["type", "accelerator_core", "block_dim", "input_shapes", "input_data_types", "output_shapes",
        "output_data_types", "wait_time_ns", "task_id", "stream_id"];
      right.append(el("h3", {}, "Kernel details"),
        kvTable(keep.filter((k) => d.kernel[k] !== null && d.kernel[k] !== undefined)
          .map((k) => [k, String(d.kernel[k]), "mono"])));
    }
    if (d.call_stack.length) {
      right.append(el("h3", {}, "Call stack"));
      const list = el("ul", { class: "stack-list" });
      for (const frame of d.call_stack) list.append(el("li", {}, frame));
      right.append(list);
    }
    this.detail.replaceChildren(el("div", { class: "tl-detail-grid" }, left, right));
  }

  /** Range Stats from GET …/timeline/range_stats. */
  showRange(r, range, pending) {
    const head = el("div", { class: "tl-range-head" },
      el("span", {}, "Range ", el("b", {}, formatExact(range.start)), " → ", el("b", {}, formatExact(range.end))),
      el("span", {}, "Duration ", el("b", {}, formatDuration(range.end - range.start))));
    if (pending) {
      this.rangePage.replaceChildren(head, el("p", { class: "tl-empty" }, "Computing…"));
      return;
    }
    head.append(el("span", {}, "Slices ", el("b", {}, formatCount(r.totals.count)), ` in ${formatCount(r.totals.names)} names`
      + (r.truncated ? " (longest shown)" : "")));
    const table = el("table", { class: "grid", id: "tl-range-table" });
    table.append(el("thead", {}, el("tr", {}, ...["Name", "Occurrences", "Wall duration", "Average", "Max", "Min"]
      .map((h, i) => el("th", i ? { class: "num" } : {}, h)))));
    const body = el("tbody");
    body.append(el("tr", { class: "totals" }, el("td", {}, "Totals"), el("td", { class: "num" }, formatCount(r.totals.count)),
      el("td", { class: "num" }, formatDuration(r.totals.total_ns)), el("td"), el("td"), el("td")));
    for (let i = 0; i < r.name.length; i++) {
      const row = el("tr", { dataset: { name: r.name[i] } },
        el("td", { class: "name", title: r.name[i] }, r.name[i]),
        el("td", { class: "num" }, formatCount(r.count[i])),
        el("td", { class: "num" }, formatDuration(r.total_ns[i])),
        el("td", { class: "num" }, formatDuration(r.avg_ns[i])),
        el("td", { class: "num" }, formatDuration(r.max_ns[i])),
        el("td", { class: "num" }, formatDuration(r.min_ns[i])));
      body.append(row);
    }
    table.append(body);
    this.rangePage.replaceChildren(head, table);
  }

  clearRange() {
    this.rangePage.replaceChildren(el("p", { class: "tl-empty" },
      "Drag on the time ruler to select a range; its slices are summarised here."));
  }

  /** Find page: the loaded page of hits, the current one highlighted. */
  showFind(search, laneTitle) {
    if (!search.hits.length) {
      this.find.replaceChildren(el("p", { class: "tl-empty" }, search.query ? `No slice name contains “${search.query}”.`
        : "Type in the search box above and press Enter."));
      return;
    }
    const table = el("table", { class: "grid" });
    table.append(el("thead", {}, el("tr", {}, el("th", { class: "num" }, "#"), el("th", {}, "Name"),
      el("th", {}, "Lane"), el("th", { class: "num" }, "Start"), el("th", { class: "num" }, "Duration"))));
    const body = el("tbody");
    search.hits.forEach((h, i) => {
      const idx = search.offset + i;
      const row = el("tr", { class: "tl-find-row" + (idx === search.index ? " current" : ""),
        dataset: { sliceId: String(h.slice_id) }, onclick: () => search.goTo(idx) },
      el("td", { class: "num" }, String(idx + 1)), el("td", { class: "name" }, h.name),
      el("td", {}, laneTitle(h.track_id)), el("td", { class: "num" }, formatExact(h.ts_ns)),
      el("td", { class: "num" }, formatDuration(h.dur_ns)));
      body.append(row);
    });
    table.append(body);
    this.find.replaceChildren(el("p", { class: "tl-empty" },
      `${formatCount(search.total)} matches for “${search.query}”` + (search.total > search.hits.length ? `, showing ${search.offset + 1}–${search.offset + search.hits.length}` : "")), table);
    const current = table.querySelector("tr.current");
    if (current && !this.find.hidden) current.scrollIntoView({ block: "nearest" });
  }
}
