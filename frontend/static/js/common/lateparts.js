// The words for the parts of a late rank's window (server/queries/late_arrivals.py PARTS, plus its later start),
// shared by the Cluster view's Late arrivals and the timeline's Slice Detail.

export const PART_LABELS = { late_start: "started later", computing: "computing", other_comm: "other collectives",
  launch_bound: "launch-bound idle", free: "idle, nothing queued", preparing: "before the first computation" };

/** The kernels of a cause that is computing: the one with the largest excess over the reference rank (the one that
 * made the rank late), then, labelled, the one with the most time in the window; "" for another cause. */
export function kernelText(c, refRank, fmt, sep = " · ") {
  if (c.part !== "computing") return "";
  let out = "";
  if (c.excess_kernel) {
    const what = c.excess_kernel_by === "type" ? "kernel type" : "kernel";
    out += `${sep}${what} ${c.excess_kernel} +${c.excess_kernel_bound ? "≥" : ""}${fmt(c.excess_kernel_ns)} over rank ${refRank}`;
  }
  if (c.top_kernel) out += `${sep}most time: ${c.top_kernel} ${fmt(c.top_kernel_ns)}`;
  return out;
}
