// The memory snapshot's potential leaks in a range (the blocks allocated in it and not freed before its end,
// grouped by allocation stack) and its OOMs (what was asked, what the device had free, the state then and its
// largest live allocations by stack). Both are plain tables; a leak's row unfolds into its stack.

import { clear, el } from "../common/dom.js";
import { formatBytes, formatCount } from "../common/format.js";
import { formatX } from "./memsnapchart.js";

function frameList(frames) {
  if (!frames?.length) return el("div", { class: "v-note" }, "no stack recorded (allocated before recording, or without context)");
  return el("ol", { class: "snap-frames" }, frames.map((f) => el("li", {},
    el("b", {}, f.name || "?"), ` ${f.filename || "?"}:${f.line ?? "?"}`)));
}

/** Fill `host` with the leaks answer (GET …/memory/snapshot/leaks). */
export function renderLeaks(host, out, axis, onBlock) {
  clear(host);
  host.dataset.groups = String(out.groups.length);
  host.dataset.bytes = String(out.bytes);
  host.append(el("div", { class: "v-summary-line", id: "snap-leaks-total" },
    `[${formatX(out.lo, axis)}, ${formatX(out.hi, axis)}): `, el("b", {}, formatCount(out.blocks)),
    " blocks allocated and not freed before its end, ", el("b", {}, formatBytes(out.bytes)), ` in ${formatCount(out.total_groups)} stacks` +
    (out.truncated ? ` (the ${out.groups.length} largest shown)` : "")));
  if (!out.groups.length) {
    host.append(el("div", { class: "v-note" }, "Nothing allocated in this range is still live at its end."));
    return;
  }
  const body = el("tbody");
  for (const g of out.groups) {
    const details = el("tr", { class: "snap-detail-row", hidden: true },
      el("td", { colspan: "6" }, frameList(g.frames)));
    const open = el("button", { class: "btn small", type: "button", title: "Show the allocation stack" }, "▸");
    open.addEventListener("click", () => {
      details.hidden = !details.hidden;
      open.textContent = details.hidden ? "▸" : "▾";
    });
    const largest = el("a", { href: "#", title: "Open the largest block" }, "largest");
    largest.addEventListener("click", (e) => { e.preventDefault(); onBlock({ block_id: g.largest_block }); });
    body.append(el("tr", { class: "snap-leak" }, el("td", {}, open, " ", g.label || "(no stack)"),
      el("td", { class: "num" }, formatCount(g.blocks)), el("td", { class: "num" }, formatBytes(g.bytes)),
      el("td", { class: "num" }, `#${formatCount(g.first_idx)} – #${formatCount(g.last_idx)}`),
      el("td", { class: "num" }, formatCount(g.live_at_dump)), el("td", {}, largest)), details);
  }
  host.append(el("table", { class: "grid v-table", id: "snap-leaks-table" },
    el("thead", {}, el("tr", {}, ["Allocation stack", "Blocks", "Bytes", "Allocated at entries", "Live at the dump", ""]
      .map((h, i) => el("th", { class: i && i < 5 ? "num" : null }, h)))), body));
}

/** Fill `host` with the OOMs (GET …/memory/snapshot/ooms); `onPick(x, idx)` shows the state at one. */
export function renderOoms(host, out, onPick) {
  clear(host);
  host.dataset.ooms = String(out.ooms.length);
  if (!out.ooms.length) {
    host.append(el("div", { class: "v-note" }, "No out-of-memory error in this device's trace."));
    return;
  }
  for (const o of out.ooms) {
    const show = el("button", { class: "btn small", type: "button" }, "Show the state then");
    show.addEventListener("click", () => onPick(o.x, o.idx));
    const t = o.totals;
    host.append(el("div", { class: "snap-oom" },
      el("div", { class: "v-summary-line" }, el("b", { class: "snap-oom-title" }, `OOM at ${formatX(o.x, out.axis)}`),
        out.axis === "ns" ? ` (entry #${formatCount(o.idx)})` : "", ": asked for ", el("b", {}, formatBytes(o.requested)), " with ",
        el("b", {}, formatBytes(o.device_free)), " free on the device; reserved ", el("b", {}, formatBytes(t.reserved)),
        ", allocated ", el("b", {}, formatBytes(t.allocated)), ", largest free block ", el("b", {}, formatBytes(t.largest_free)),
        " ", show),
      el("table", { class: "grid v-table snap-oom-top" },
        el("thead", {}, el("tr", {}, el("th", {}, "Largest live allocations by stack"), el("th", { class: "num" }, "Blocks"),
          el("th", { class: "num" }, "Bytes"), el("th", { class: "num" }, "Largest"))),
        el("tbody", {}, o.top.map((r) => el("tr", {}, el("td", {}, r.label || "(no stack)"),
          el("td", { class: "num" }, formatCount(r.blocks)), el("td", { class: "num" }, formatBytes(r.bytes)),
          el("td", { class: "num" }, formatBytes(r.largest)))))),
      el("details", {}, el("summary", {}, "Where the failing allocation was asked for"), frameList(o.frames))));
  }
}

export { frameList };
