// The bottom panel: Slice Detail, Range Stats (rangepage.js), System View (systemview.js) and Find pages. Built
// with DOM nodes and textContent only (slice names and args are user data). Links call back into the timeline
// (jump to a slice).

import { flowColor } from "../common/colors.js";
import { el } from "../common/dom.js";
import { formatCount } from "../common/format.js";
import { formatDuration, formatExact } from "../common/time.js";
import { RangePage } from "./rangepage.js";
import { SystemView } from "./systemview.js";

const MIN_PANEL_PX = 120;
const MAX_PANEL_FRACTION = 0.7;

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
    this.handlers = handlers; // {jump(sliceId), toggle(), instances(name, offset, limit), systemView: host}
    this.detail = root.querySelector("#tl-detail");
    this.range = new RangePage(root.querySelector("#tl-range"), handlers);
    this.systemView = new SystemView(root.querySelector("#tl-sysview"), handlers.systemView);
    this.find = root.querySelector("#tl-find");
    this.tabs = [...root.querySelectorAll(".tl-panel-tab")];
    for (const t of this.tabs) t.addEventListener("click", () => this.show(t.dataset.tab));
    root.querySelector("#tl-panel-toggle").addEventListener("click", () => handlers.toggle());
    this.bindResize(root.querySelector("#tl-panel-resize"));
  }

  /** Drag the panel's top edge to give it more or less of the page (remembered by the browser). */
  bindResize(handle) {
    const KEY = "ascendscope.timeline.panelHeight";
    const apply = (px) => {
      const max = Math.max(MIN_PANEL_PX, (this.root.parentElement.clientHeight || 800) * MAX_PANEL_FRACTION);
      const h = Math.round(Math.max(MIN_PANEL_PX, Math.min(max, px)));
      this.root.style.setProperty("--tl-panel-h", `${h}px`);
      return h;
    };
    let saved = null;
    try {
      saved = Number(localStorage.getItem(KEY)) || null;
    } catch {
      saved = null;  // storage off: the default height
    }
    if (saved) apply(saved);
    handle.addEventListener("mousedown", (e) => {
      if (e.button !== 0 || this.collapsed) return;
      e.preventDefault();
      const y0 = e.clientY;
      const h0 = this.root.offsetHeight;
      let h = h0;
      const move = (ev) => {
        h = apply(h0 + y0 - ev.clientY);
        this.handlers.resized();
      };
      const up = () => {
        window.removeEventListener("mousemove", move);
        window.removeEventListener("mouseup", up);
        try {
          localStorage.setItem(KEY, String(h));
        } catch {
          // storage off: the height lasts for this page
        }
      };
      window.addEventListener("mousemove", move);
      window.addEventListener("mouseup", up);
    });
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
    if (tab === "sysview") this.systemView.ensure();
  }

  get current() {
    const tab = this.tabs.find((t) => t.classList.contains("active"));
    return tab ? tab.dataset.tab : null;
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
      el("div", { class: "title", dataset: { sliceId: String(d.slice_id) } }, d.name,
        d.full_name_url ? el("a", { class: "full-name", href: d.full_name_url, target: "_blank", rel: "noopener" },
          ` the whole name: ${formatCount(d.name_chars)} characters`) : null),
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
    this.range.show(r, range, pending);
  }

  clearRange() {
    this.range.clear();
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
