// DOM building for every page: an element from a tag, its attributes and its children. Text only: names, args and
// messages are data (escape.js says why), so a string child becomes a text node and nothing is parsed as HTML.

/**
 * el("div", {class: "x", onclick: fn, dataset: {…}, text: "…"}, child, "text", [more, …]): a new element.
 * An attribute that is null, undefined or false is left out (true gives an empty one, e.g. disabled); `on…`
 * functions become listeners. Children may be nodes, strings, numbers or arrays of them; null, undefined and false
 * are skipped.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  return append(node, ...children);
}

/** Append children to `node` as el() takes them (null, undefined and false skipped: Node.append would write
 * them as the text "null"); returns it. */
export function append(node, ...children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** Remove every child of `node`; returns it (clear(box).append(…)). */
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export const $ = (sel, root = document) => root.querySelector(sel);
