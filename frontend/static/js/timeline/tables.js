// Pieces of the bottom panel's tables (Range Stats, System View): the pager and a number cell.

import { el } from "../common/dom.js";
import { formatCount } from "../common/format.js";

/** A "‹ 1–100 of 606 ›" pager; onPage(offset) is called with the new offset. */
export function pager(offset, limit, shown, total, onPage) {
  const prev = el("button", { class: "tl-icon", title: "Previous page", disabled: offset <= 0,
    onclick: () => onPage(Math.max(0, offset - limit)) }, "‹");
  const next = el("button", { class: "tl-icon", title: "Next page", disabled: offset + shown >= total,
    onclick: () => onPage(offset + limit) }, "›");
  const text = total ? `${formatCount(offset + 1)}–${formatCount(offset + shown)} of ${formatCount(total)}` : "0 of 0";
  return el("div", { class: "tl-pager" }, prev, el("span", {}, text), next);
}

/** A right-aligned table cell. */
export function numCell(text) {
  return el("td", { class: "num" }, text);
}
