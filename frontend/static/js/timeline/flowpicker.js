// The "Flows" popover: one checkbox per flow category of the run (with its count). Ticked categories are drawn
// for everything in view; onChange receives the Set of ticked categories.

import { flowColor } from "../common/colors.js";
import { el } from "../common/dom.js";
import { formatCount } from "../common/format.js";

export function buildFlowPicker(button, popover, categories, onChange) {
  const enabled = new Set();
  popover.replaceChildren();
  for (const { cat, count } of categories) {
    const box = el("input", { type: "checkbox", dataset: { cat }, onchange: () => {
      if (box.checked) enabled.add(cat);
      else enabled.delete(cat);
      button.textContent = enabled.size ? `Flows (${enabled.size}) ▾` : "Flows ▾";
      onChange(new Set(enabled));
    } });
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = flowColor(cat);
    popover.append(el("label", {}, box, swatch, el("span", {}, cat || "(no category)"),
      el("span", { class: "count" }, formatCount(count))));
  }
  popover.append(el("div", { class: "hint" }, categories.length ? "Ticked categories are drawn for everything in view."
    : "This run has no flows."));
  button.addEventListener("click", (e) => {
    e.stopPropagation();
    popover.hidden = !popover.hidden;
  });
  document.addEventListener("click", (e) => {
    if (!popover.contains(e.target) && e.target !== button) popover.hidden = true;
  });
}
