// Small pieces the views put on a page: a "Show in Timeline" link and the box that says a part could not load.

import { el } from "../common/dom.js";
import { appUrl } from "../common/urls.js";

/** "Show in Timeline" link, or a greyed note when the rank has no trace. */
export function timelineLink(url, label = "Show in Timeline") {
  if (url) return el("a", { class: "tl-link", href: appUrl(url), title: "Open the timeline here" }, label);
  return el("span", { class: "tl-link disabled", title: "This rank has no trace_view.json: no timeline to open" },
    "no trace");
}

export function errorBox(err) {
  return el("div", { class: "v-error" }, `Could not load: ${err.message || err}`);
}
