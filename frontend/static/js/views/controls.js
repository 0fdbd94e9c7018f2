// Form controls of the views' filter bars: a <select> and a labelled field.

import { el } from "../common/dom.js";

/** A <select> with options [{value, label}] and an onchange. */
export function select(options, value, onchange, attrs = {}) {
  const s = el("select", attrs, options.map((o) => el("option", { value: o.value ?? "", selected: String(o.value ?? "") === String(value ?? "") }, o.label)));
  s.addEventListener("change", () => onchange(s.value));
  return s;
}

export function field(label, control, attrs = {}) {
  return el("label", { class: "v-field", ...attrs }, el("span", { class: "v-field-label" }, label), control);
}
