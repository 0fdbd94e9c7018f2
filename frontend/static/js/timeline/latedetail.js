// Slice Detail of a collective op: the instance it belongs to across the ranks of its group — the last rank, the
// wait this op spent on it and why that rank was late — with links to the late rank's op and to the Cluster view's
// Late arrivals (GET /api/runs/{id}/late_arrivals/of_slice). Asked only for HCCL op names (hcom_…).

import { apiGet } from "../common/api.js";
import { el } from "../common/dom.js";
import { kernelText, PART_LABELS } from "../common/lateparts.js";
import { formatDuration } from "../common/time.js";
import { runApi, runPage } from "../common/urls.js";

const COLLECTIVE = /^hcom_/i;

function causeWords(inst) {
  const c = inst.cause;
  if (!c.part) return inst.late_source === "trace" ? "no part of its window is longer than the median rank's" : "";
  const kernel = kernelText(c, inst.ref_rank, formatDuration, "; ");
  const share = c.shares && c.shares[c.part] !== undefined ? ` (${(100 * c.shares[c.part]).toFixed(0)}% of its lateness)` : "";
  return `against rank ${inst.ref_rank} (the median arrival): ${PART_LABELS[c.part]} +${formatDuration(c.delta_ns)}${share}${kernel}`;
}

/** The section for slice `d` (a Slice Detail answer), or null when it is no collective matched across ranks. */
export async function lateSection(runId, d, shownRanks) {
  if (!COLLECTIVE.test(d.name || "")) return null;
  const a = await apiGet(runApi(runId, "/late_arrivals/of_slice"), { slice_id: d.slice_id });
  const inst = a.available ? a.instance : null;
  if (!inst) return null;
  const box = el("div", { class: "tl-late", id: "tl-late-detail" }, el("h3", {}, "Late arrival"));
  let text;
  if (!inst.attributed) {
    text = `The ${inst.ranks} ranks arrived within ${formatDuration(inst.lead_ns)} of each other (simultaneous); `
      + `this one waited ${formatDuration(a.wait_ns)}.`;
  } else if (a.rank === inst.last_rank) {
    text = `This rank arrived last, ${formatDuration(inst.lead_ns)} after the next: the other ranks waited `
      + `${formatDuration(inst.wait_caused_ns)} in all for it. ${causeWords(inst)}.`;
  } else {
    text = `Waited ${formatDuration(a.wait_ns)} for rank ${inst.last_rank}, the last of ${inst.ranks} ranks to arrive `
      + `(${formatDuration(inst.lead_ns)} after the next). Rank ${inst.last_rank}: ${causeWords(inst)}.`;
  }
  box.append(el("p", { class: "tl-late-text" }, text));
  const links = el("div", { class: "tl-late-links" });
  if (inst.attributed && a.rank !== inst.last_rank && inst.late_slice_id !== null) {
    const ranks = [...new Set([...shownRanks, inst.last_rank])].sort((x, y) => x - y);
    links.append(el("a", { id: "tl-late-open", href: runPage(runId, "timeline", { slice: inst.late_slice_id,
      ranks: ranks.join(","), overlay: "waits" }) }, `Rank ${inst.last_rank}'s op, with the wait chain`), " · ");
  }
  links.append(el("a", { id: "tl-late-cluster", href: `${runPage(runId, "cluster",
    { late_step: inst.step ?? undefined })}#cl-late` }, "Late arrivals of this step (Cluster view)"));
  box.append(links);
  return box;
}
