// DOM building for the timeline's panels and popovers: elements from tag, properties and children, text only
// (names, args and marker names are user data: never HTML).

/** el("td", {class: "num", onclick: fn, dataset: {…}}, child, "text", …): null/undefined children are skipped. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "value") node.value = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
  return node;
}

/** A "‹ 1–100 of 606 ›" pager; onPage(offset) is called with the new offset. */
export function pager(offset, limit, shown, total, onPage) {
  const prev = el("button", { class: "tl-icon", title: "Previous page", disabled: offset <= 0,
    onclick: () => onPage(Math.max(0, offset - limit)) }, "‹");
  const next = el("button", { class: "tl-icon", title: "Next page", disabled: offset + shown >= total,
    onclick: () => onPage(offset + limit) }, "›");
  const text = total ? `${(offset + 1).toLocaleString("en-US")}–${(offset + shown).toLocaleString("en-US")} of `
    + total.toLocaleString("en-US") : "0 of 0";
  return el("div", { class: "tl-pager" }, prev, el("span", {}, text), next);
}
