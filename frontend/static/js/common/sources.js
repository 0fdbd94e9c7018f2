// Why a part of a page has no data, as the server says it (server/queries/sources.py): an answer's
// `empty_sources` entry is {label, sources, ranks: [{rank, reason, message}], more}. The views' sections and the
// timeline's no-trace box show it.

import { el } from "./dom.js";

/**
 * A note for one `empty_sources` entry, or null when no rank is listed (the part has data): "No <label> for rank N",
 * one line per rank naming the file or table, and the sources that feed the part in either export.
 */
export function sourceNote(section, attrs = {}) {
  if (!section || !section.ranks?.length) return null;
  const ranks = section.ranks.map((r) => r.rank).filter((r) => r !== null && r !== undefined);
  const named = ranks.length && ranks.length <= 8 && !section.more;
  const who = named ? ` for rank${ranks.length > 1 ? "s" : ""} ${ranks.join(", ")}` : ranks.length ? " for some ranks" : "";
  return el("div", { class: "v-source-note", ...attrs },
    el("div", { class: "v-source-head" }, `No ${section.label}${who}:`),
    el("ul", {}, section.ranks.map((r) => el("li", { dataset: { rank: r.rank ?? "", reason: r.reason } }, r.message)),
      section.more ? el("li", { class: "v-note" }, `and ${section.more} more ranks`) : null),
    el("div", { class: "v-source-feeds" }, `Read from: ${section.sources.join(" · ")}`));
}

/** The first rank's reason of an entry, as one line (table placeholders, chart notes), or `fallback`. */
export function sourceLine(section, fallback) {
  const first = section?.ranks?.[0];
  return first ? `No ${section.label}: ${first.message}` : fallback;
}
