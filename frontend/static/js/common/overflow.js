// A visible cue on every box that scrolls sideways (a wide table's `.v-table-wrap`, a panel's `.cp-scroll`, the run
// tabs): while columns lie beyond an edge, that edge fades out (`.more-right` / `.more-left`, styled in base.css),
// so a clipped last column reads as "more this way", not as the table's end. Tables come and go as views render:
// the boxes are found as they appear (a MutationObserver), re-measured when they or their content change size (a
// ResizeObserver) and when they scroll.

const BOXES = ".v-table-wrap, .cp-scroll, .tl-panel-page, #view-tabs";
const watched = new WeakSet();

function mark(box) {
  const over = box.scrollWidth - box.clientWidth > 1;
  box.classList.toggle("more-right", over && box.scrollLeft + box.clientWidth < box.scrollWidth - 1);
  box.classList.toggle("more-left", over && box.scrollLeft > 1);
}

const resized = new ResizeObserver((entries) => {
  for (const e of entries) {
    const box = e.target.matches(BOXES) ? e.target : e.target.parentElement?.closest(BOXES);
    if (box) mark(box);
  }
});

function watch(root) {
  const found = root.matches?.(BOXES) ? [root] : [];
  for (const box of [...found, ...(root.querySelectorAll?.(BOXES) || [])]) {
    if (watched.has(box)) continue;
    watched.add(box);
    resized.observe(box);
    if (box.firstElementChild) resized.observe(box.firstElementChild);  // the table growing inside the box
    // no mark(box) here: observe() reports every rendered box once at the next frame, and measuring now would force
    // a layout in the middle of a view's rendering
  }
}

document.addEventListener("scroll", (e) => {
  if (e.target instanceof Element && watched.has(e.target)) mark(e.target);
}, true);
new MutationObserver((changes) => {
  for (const c of changes) for (const n of c.addedNodes) if (n instanceof Element) watch(n);
}).observe(document.body, { childList: true, subtree: true });
watch(document.body);
