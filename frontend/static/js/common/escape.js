// Escaping for data strings that reach markup. Plotly renders a subset of HTML (<a href>, <b>, <br>, …) in trace
// names, labels, tick labels, hover and annotation text, so a profiled name like `<a href=…>` would become a live
// link there: every data string handed to plotly goes through plotText. DOM built by the views uses textContent
// (common/dom.js `el`), which needs no escaping; nothing in the app assigns innerHTML.

const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;" };

/** A data value as plotly text: `<`, `>` and `&` become entities, which plotly shows literally. */
export function plotText(value) {
  if (value === null || value === undefined) return "";
  return String(value).replace(/[&<>]/g, (c) => ENTITIES[c]);
}
