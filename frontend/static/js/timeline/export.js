// The toolbar's "Export" link: the window in view, of the selected rank (or every loaded rank), as Chrome trace
// JSON for Perfetto / chrome://tracing (GET …/export/timeline.json). The link is rebuilt just before it is followed,
// from the view range the timeline keeps on its root element (absolute epoch ns).

import { currentRank } from "../common/nav.js";
import { runApi, withQuery } from "../common/urls.js";

export function attachExport(root, link) {
  if (!link) return;
  const update = () => {
    const rank = currentRank();
    link.href = withQuery(runApi(root.dataset.runId, "/export/timeline.json"), {
      start_ns: root.dataset.viewStartNs || undefined,
      end_ns: root.dataset.viewEndNs || undefined,
      ranks: rank === null ? undefined : rank,
    });
  };
  link.addEventListener("pointerenter", update);
  link.addEventListener("pointerdown", update);
  link.addEventListener("focus", update);
  link.addEventListener("click", update);
  update();
}
