// Range Stats, a page of the bottom panel: the slices overlapping the selected range per name (GET
// …/timeline/range_stats: count, wall, self = wall minus what the slice's children cover, avg, max, min), and for
// the clicked name its instances in the range (…/range_instances, paged), each a link to the slice.
//
// host: {jump(sliceId), instances(name, offset, limit) → Promise<range_instances answer>}

import { isAbort } from "../common/api.js";
import { el } from "../common/dom.js";
import { formatCount } from "../common/format.js";
import { formatDuration, formatExact } from "../common/time.js";
import { numCell as num, pager } from "./tables.js";

const INSTANCE_ROWS = 50;

export class RangePage {
  constructor(root, host) {
    this.root = root;
    this.host = host;
    this.name = null;
    this.token = 0;
  }

  clear() {
    this.name = null;
    this.root.replaceChildren(el("p", { class: "tl-empty" },
      "Drag on the time ruler to select a range; its slices are summarised here."));
  }

  show(r, range, pending) {
    const head = el("div", { class: "tl-range-head" },
      el("span", {}, "Range ", el("b", {}, formatExact(range.start)), " → ", el("b", {}, formatExact(range.end))),
      el("span", {}, "Duration ", el("b", {}, formatDuration(range.end - range.start))));
    if (pending) {
      this.name = null;
      this.root.replaceChildren(head, el("p", { class: "tl-empty" }, "Computing…"));
      return;
    }
    head.append(el("span", {}, "Slices ", el("b", {}, formatCount(r.totals.count)),
      ` in ${formatCount(r.totals.names)} names` + (r.truncated ? " (longest shown)" : "")));
    // the durations are the slices' own, whole, even where they reach outside the range (and nested slices add
    // up): the totals can exceed the range by far, which reads as a bug unless it is said
    const whole = r.totals.total_ns > range.end - range.start;
    head.append(el("span", { class: "muted tl-range-whole", id: "tl-range-whole" },
      `Durations are whole slices', also outside the range${whole ? " (so the totals exceed it)" : ""}; `
      + "Time Range Analysis in System View counts only the time inside."));
    const cols = ["Occurrences", "Wall duration", "Self", "Average", "Max", "Min"];
    const table = el("table", { class: "grid", id: "tl-range-table" },
      el("thead", {}, el("tr", {}, el("th", {}, "Name"), ...cols.map((h) => el("th", { class: "num",
        title: h === "Self" ? "Wall duration minus the part the slices' children cover" : null }, h)))));
    const body = el("tbody");
    body.append(el("tr", { class: "totals" }, el("td", {}, "Totals"), num(formatCount(r.totals.count)),
      num(formatDuration(r.totals.total_ns)), num(formatDuration(r.totals.self_ns)), el("td"), el("td"), el("td")));
    for (let i = 0; i < r.name.length; i++) {
      const name = r.name[i];
      body.append(el("tr", { class: "tl-range-row" + (name === this.name ? " current" : ""), dataset: { name },
        title: "Click to list its slices in the range", onclick: () => this.select(name) },
      el("td", { class: "name", title: name }, name), num(formatCount(r.count[i])), num(formatDuration(r.total_ns[i])),
      num(formatDuration(r.self_ns[i])), num(formatDuration(r.avg_ns[i])), num(formatDuration(r.max_ns[i])),
      num(formatDuration(r.min_ns[i]))));
    }
    table.append(body);
    this.side = el("div", { class: "tl-range-side", id: "tl-range-instances" });
    this.root.replaceChildren(head, el("div", { class: "tl-range-grid" }, el("div", { class: "tl-range-main" }, table),
      this.side));
    if (this.name !== null && r.name.includes(this.name)) this.loadInstances(0);
    else {
      this.name = null;
      this.side.replaceChildren(el("div", { class: "sv-bar" }, el("span", { class: "sv-title" }, "Details")),
        el("p", { class: "tl-empty" }, "Click a name to list its slices in the range."));
    }
  }

  select(name) {
    this.name = name;
    for (const tr of this.root.querySelectorAll("tr.tl-range-row")) tr.classList.toggle("current", tr.dataset.name === name);
    this.loadInstances(0);
  }

  async loadInstances(offset) {
    const token = ++this.token;
    const name = this.name;
    let r;
    try {
      r = await this.host.instances(name, offset, INSTANCE_ROWS);
    } catch (err) {
      if (!isAbort(err) && token === this.token) this.side.replaceChildren(el("p", { class: "tl-empty" }, err.message));
      return;
    }
    if (token !== this.token) return;
    const body = el("tbody");
    r.slice_id.forEach((id, i) => {
      body.append(el("tr", { class: "tl-instance link", dataset: { sliceId: String(id) }, title: "Show it on the timeline",
        onclick: () => this.host.jump(id) },
      num(String(r.offset + i + 1)), num(formatExact(r.ts_ns[i])), num(formatDuration(r.dur_ns[i])),
      num(formatDuration(r.self_ns[i]))));
    });
    this.side.replaceChildren(
      el("div", { class: "sv-bar" }, el("span", { class: "sv-title", title: name }, name),
        pager(r.offset, r.limit, r.slice_id.length, r.total, (o) => this.loadInstances(o))),
      el("table", { class: "grid sv-table" }, el("thead", {}, el("tr", {}, ...["#", "Start", "Duration", "Self"]
        .map((h) => el("th", { class: "num" }, h)))), body));
  }
}
