// The words for the parts of a late rank's window (server/queries/late_arrivals.py PARTS, plus its later start),
// shared by the Cluster view's Late arrivals and the timeline's Slice Detail.

export const PART_LABELS = { late_start: "started later", computing: "computing", other_comm: "other collectives",
  launch_bound: "launch-bound idle", free: "idle, nothing queued", preparing: "before the first computation" };
