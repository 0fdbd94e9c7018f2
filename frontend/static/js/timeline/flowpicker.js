// The "Flows" popover: one checkbox per flow category of the run (with its count). Ticked categories are drawn
// for everything in view; onChange receives the Set of ticked categories.

import { flowColor } from "../common/colors.js";
import { formatCount } from "../common/format.js";

export function buildFlowPicker(button, popover, categories, onChange) {
  const enabled = new Set();
  popover.replaceChildren();
  for (const { cat, count } of categories) {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.dataset.cat = cat;
    box.addEventListener("change", () => {
      if (box.checked) enabled.add(cat);
      else enabled.delete(cat);
      button.textContent = enabled.size ? `Flows (${enabled.size}) ▾` : "Flows ▾";
      onChange(new Set(enabled));
    });
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = flowColor(cat);
    const name = document.createElement("span");
    name.textContent = cat || "(no category)";
    const n = document.createElement("span");
    n.className = "count";
    n.textContent = formatCount(count);
    label.append(box, swatch, name, n);
    popover.appendChild(label);
  }
  const hint = document.createElement("div");
  hint.className = "hint";
  hint.textContent = categories.length ? "Ticked categories are drawn for everything in view."
    : "This run has no flows.";
  popover.appendChild(hint);
  button.addEventListener("click", (e) => {
    e.stopPropagation();
    popover.hidden = !popover.hidden;
  });
  document.addEventListener("click", (e) => {
    if (!popover.contains(e.target) && e.target !== button) popover.hidden = true;
  });
}
