// A small context menu: groups of items separated by lines, each item's shortcut right-aligned, disabled items
// greyed with a reason in their tooltip. ↑/↓ move between items, Enter picks. Closes on a choice, Escape, a
// click or wheel elsewhere, or blur.
//
// items: [{label, action(), shortcut?, disabled?, title?, id?} | "-"]

import { el } from "../common/dom.js";

export class ContextMenu {
  constructor(container) {
    this.container = container;
    this.node = el("div", { class: "tl-menu", id: "tl-menu", role: "menu", hidden: true });
    container.append(this.node);
    const close = (e) => { if (!this.node.hidden && !this.node.contains(e.target)) this.hide(); };
    document.addEventListener("mousedown", close, true);
    document.addEventListener("wheel", close, { capture: true, passive: true });
    window.addEventListener("blur", () => this.hide());
    document.addEventListener("keydown", (e) => {
      if (this.node.hidden) return;
      if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); this.hide(); return; }
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        e.stopPropagation();
        const items = [...this.node.querySelectorAll(".tl-menu-item:not([disabled])")];
        const at = items.indexOf(document.activeElement);
        const next = items[(at + (e.key === "ArrowDown" ? 1 : items.length - 1)) % items.length];
        if (next) next.focus();
      } else if (this.node.contains(document.activeElement)) {
        e.stopPropagation();  // Enter / Space on an item: the button's own click, not a timeline key
      }
    }, true);
  }

  get open() {
    return !this.node.hidden;
  }

  /** Show at page coordinates (clientX, clientY), kept inside the container. */
  show(clientX, clientY, items) {
    const rows = [];
    let pendingSep = false;
    for (const item of items) {
      if (item === "-") { pendingSep = rows.length > 0; continue; }
      if (pendingSep) rows.push(el("div", { class: "tl-menu-sep", role: "separator" }));
      pendingSep = false;
      rows.push(el("button", {
        class: "tl-menu-item", role: "menuitem", disabled: !!item.disabled, title: item.title,
        dataset: item.id ? { action: item.id } : {},
        onclick: () => { this.hide(); item.action(); },
      }, el("span", { class: "label" }, item.label), el("span", { class: "key" }, item.shortcut || "")));
    }
    this.node.replaceChildren(...rows);
    this.node.hidden = false;
    const box = this.container.getBoundingClientRect();
    const w = this.node.offsetWidth;
    const h = this.node.offsetHeight;
    const x = Math.min(clientX - box.left, box.width - w - 4);
    const y = clientY - box.top + h > box.height - 4 ? Math.max(4, clientY - box.top - h) : clientY - box.top;
    this.node.style.left = `${Math.max(4, x)}px`;
    this.node.style.top = `${y}px`;
    const first = this.node.querySelector(".tl-menu-item:not([disabled])");
    if (first) first.focus({ preventScroll: true });
  }

  hide() {
    this.node.hidden = true;
  }
}
