"""The dispatch-gap check of the advice (``advice.py`` runs it): every Free gap of :data:`MIN_GAP_NS` or more,
classified by one query (:data:`GAP_ROWS_SQL`) by what the host did meanwhile (waiting, launch, queue, or
unattributed on a rank without a CANN lane), one **dispatch** finding per cause."""

from __future__ import annotations

from ascendscope.server.queries import ratio
from ascendscope.server.queries.advice_core import MAX_INSTANCES, Advisor, as_int, fmt_count, fmt_ms, fmt_pct, fmt_us

MIN_GAP_NS = 10_000  # shorter gaps are ordinary launch latency
GAP_WARNING_SHARE = 0.05  # a cause of gaps worth this share of the rank's end-to-end time is a warning
WAIT_TASK_TYPES = ("EVENT_WAIT_SQE", "Notify Wait")
SYNC_API_MARKER = "Synchronize"  # aclrtSynchronizeStream / Device / Event (and *WithTimeout)

GAP_CAUSES = ("launch", "queue", "waiting", "unattributed")
GAP_CAUSE_TITLES = {"launch": "slow launch (host in CANN API)", "queue": "task queue idle",
                    "waiting": "synchronization or event wait", "unattributed": "no CANN lane to attribute them"}
GAP_CAUSE_WORDS = {"launch": "with the host inside CANN API calls (slow launch)",
                   "queue": "with CANN idle (the task queue had nothing to launch)",
                   "waiting": "after a synchronization or during an event wait",
                   "unattributed": "that cannot be attributed (no CANN lane)"}
GAP_CAUSE_ADVICE = {
    "launch": "The host spent the gap inside CANN calls: look at the named API in the instances (operator "
              "compilation such as aclopCompileAndExecute, workspace queries, memory copies) and keep ops on "
              "pre-compiled aclnn kernels with static shapes.",
    "queue": "CANN had nothing to launch: the framework side (Python, torch op dispatch, data loading) did not enqueue "
             "work fast enough. Reduce Python overhead per op, enable the second-level task queue "
             "(TASK_QUEUE_ENABLE=2), bind CPU cores (CPU_AFFINITY_CONF=1).",
    "waiting": "The host blocked on the device (a synchronize call: .item(), .cpu(), printing a tensor) or the "
               "stream waited on an event, so nothing was queued ahead: remove synchronizations from the step or "
               "move them to its end.",
    "unattributed": "This rank's trace has no CANN lane (Level0), so the host side of these gaps is unknown; "
                    "profile at Level1 to attribute them.",
}

HAS_CANN_SQL = "SELECT count(*) > 0 FROM tracks WHERE rank = ? AND kind = 'cann'"
# Free gaps with the host activity that overlaps them (per kind, the thread covering most of the gap; slices of one
# thread at one depth never overlap, so a thread's sum is its coverage).
GAPS_CTE = """
WITH gaps AS (
  SELECT s.slice_id, s.ts_ns, s.dur_ns, s.ts_ns + s.dur_ns AS end_ns, st.step
  FROM slices s JOIN tracks t ON t.track_id = s.track_id
  LEFT JOIN steps st ON st.rank = s.rank AND s.ts_ns >= st.device_start_ns AND s.ts_ns < st.device_end_ns
  WHERE s.rank = ? AND t.kind = 'overlap' AND s.name = 'Free' AND s.dur_ns >= ?
),
host AS (
  SELECT s.track_id, s.slice_id, s.name, s.ts_ns, s.ts_ns + s.dur_ns AS end_ns,
         CASE WHEN t.kind = 'hardware' THEN 'device_wait' WHEN contains(s.name, ?) THEN 'sync' ELSE 'cann' END AS kind
  FROM slices s JOIN tracks t ON t.track_id = s.track_id
  WHERE s.rank = ? AND s.dur_ns > 0
    AND ((t.kind = 'cann' AND (s.depth = 0 OR contains(s.name, ?)))
      OR (t.kind = 'hardware' AND list_contains(?::VARCHAR[], json_extract_string(s.args, '$."Task Type"'))))
),
cover AS (
  SELECT g.slice_id, h.kind, h.track_id,
         sum(least(g.end_ns, h.end_ns) - greatest(g.ts_ns, h.ts_ns)) AS ns,
         arg_max(h.slice_id, least(g.end_ns, h.end_ns) - greatest(g.ts_ns, h.ts_ns)) AS top_id,
         arg_max(h.name, least(g.end_ns, h.end_ns) - greatest(g.ts_ns, h.ts_ns)) AS top_name
  FROM gaps g JOIN host h ON h.ts_ns < g.end_ns AND h.end_ns > g.ts_ns
  GROUP BY g.slice_id, h.kind, h.track_id
),
best AS (
  SELECT slice_id, kind, max(ns) AS ns, arg_max(top_id, ns) AS top_id, arg_max(top_name, ns) AS top_name
  FROM cover GROUP BY slice_id, kind
),
classified AS (
  SELECT g.slice_id, g.ts_ns, g.dur_ns, g.step,
         coalesce(sy.ns, 0) AS sync_ns, coalesce(dw.ns, 0) AS device_wait_ns, coalesce(ca.ns, 0) AS cann_ns,
         CASE WHEN sy.ns > 0 OR 2 * dw.ns >= g.dur_ns THEN 'waiting'
              WHEN NOT ? THEN 'unattributed'
              WHEN 2 * ca.ns >= g.dur_ns THEN 'launch' ELSE 'queue' END AS cause,
         CASE WHEN sy.ns > 0 THEN sy.top_id WHEN 2 * dw.ns >= g.dur_ns THEN dw.top_id ELSE ca.top_id END AS host_id,
         CASE WHEN sy.ns > 0 THEN sy.top_name WHEN 2 * dw.ns >= g.dur_ns THEN dw.top_name ELSE ca.top_name END
           AS host_name
  FROM gaps g
  LEFT JOIN best sy ON sy.slice_id = g.slice_id AND sy.kind = 'sync'
  LEFT JOIN best dw ON dw.slice_id = g.slice_id AND dw.kind = 'device_wait'
  LEFT JOIN best ca ON ca.slice_id = g.slice_id AND ca.kind = 'cann'
)"""
# every gap of the rank with its cause, once per request: the totals, the longest per cause and the cause of any
# Free slice a finding lists are all read from these rows
GAP_ROWS_SQL = GAPS_CTE + """
SELECT slice_id, ts_ns, dur_ns, step, sync_ns, device_wait_ns, cann_ns, cause, host_id, host_name FROM classified"""
GAP_COLUMNS = ("slice_id", "ts_ns", "dur_ns", "step", "sync_ns", "device_wait_ns", "cann_ns", "cause", "host_id",
               "host_name")
FREE_TOTAL_SQL = """
SELECT count(*), sum(s.dur_ns) FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = ? AND t.kind = 'overlap' AND s.name = 'Free'
"""


def _gap_detail(cause: str, host_name: str | None, cann_ns, dur_ns) -> str:
    """What the host did during a gap, in a few words."""
    busy = f"CANN busy {fmt_pct(ratio(cann_ns, dur_ns))} of it"
    if cause == "waiting":
        return f"waiting in {host_name}" if host_name else "device wait task"
    if cause == "launch":
        return f"{busy}, mostly in {host_name}"
    if cause == "queue":
        return busy + (f" (in {host_name})" if host_name else "")
    return "no CANN lane"


def note_gap_causes(a: Advisor, instances: list[dict]) -> None:
    """Free slices of a host-bound step get the cause of their gap (shorter gaps have none)."""
    for inst in instances:
        g = a.gaps.get(inst["slice_id"])
        inst["cause"] = None if g is None else g["cause"]
        inst["detail"] = f"{g['cause']}: {_gap_detail(g['cause'], g['host_name'], g['cann_ns'], g['dur_ns'])}" \
            if g is not None else f"gap under {fmt_us(MIN_GAP_NS)}"


def gap_checks(a: Advisor, e2e: int) -> dict:
    """The dispatch-gap findings (a cause is a warning when its gaps add up to ``GAP_WARNING_SHARE`` of the
    rank's end-to-end time ``e2e``); returns ``{step: {cause: {count, total_ns}}}`` for the host-bound text.
    The gaps are classified by one query (:data:`GAP_ROWS_SQL`); totals, the longest gaps and the causes the
    host-bound findings quote all come from its rows."""
    has_cann = bool(a.db.rows(HAS_CANN_SQL, [a.rank])[0][0])
    params = [a.rank, MIN_GAP_NS, SYNC_API_MARKER, a.rank, SYNC_API_MARKER, list(WAIT_TASK_TYPES),
              has_cann]
    a.gaps = {int(r[0]): dict(zip(GAP_COLUMNS, r)) for r in a.db.rows(GAP_ROWS_SQL, params)}
    by_step: dict = {}
    totals: dict = {}
    for g in a.gaps.values():
        step = None if g["step"] is None else int(g["step"])
        for bucket in (by_step.setdefault(step, {}), totals):
            t = bucket.setdefault(g["cause"], {"count": 0, "total_ns": 0})
            t["count"] += 1
            t["total_ns"] += int(g["dur_ns"])
    if not totals:
        return by_step
    by_step = {step: dict(sorted(causes.items())) for step, causes in by_step.items()}
    top: dict = {}
    for g in sorted(a.gaps.values(), key=lambda g: (g["cause"], -g["dur_ns"], g["ts_ns"])):
        picked = top.setdefault(g["cause"], [])
        if len(picked) >= MAX_INSTANCES:
            continue
        detail = _gap_detail(g["cause"], g["host_name"], g["cann_ns"], g["dur_ns"])
        picked.append(a.instance(
            a.rank, g["slice_id"], "Free", g["ts_ns"], g["dur_ns"], step=g["step"], cause=g["cause"],
            host_slice_id=g["host_id"], host_name=g["host_name"], sync_ns=as_int(g["sync_ns"]),
            device_wait_ns=as_int(g["device_wait_ns"]), cann_ns=as_int(g["cann_ns"]), detail=detail))
    free_n, free_ns = a.db.rows(FREE_TOTAL_SQL, [a.rank])[0]
    free_ns = as_int(free_ns)
    for cause in GAP_CAUSES:
        if cause not in totals:
            continue
        t = totals[cause]
        share = ratio(t["total_ns"], free_ns) or 0
        severity = "warning" if e2e and t["total_ns"] > GAP_WARNING_SHARE * e2e else "info"
        a.add("dispatch", cause, severity,
              f"Rank {a.rank}: {fmt_count(t['count'], 'gap')}, {fmt_ms(t['total_ns'])} — "
              f"{GAP_CAUSE_TITLES[cause]}",
              f"Rank {a.rank}: {fmt_count(t['count'], 'device gap')} of {fmt_us(MIN_GAP_NS)} or more, "
              f"{fmt_ms(t['total_ns'])} "
              f"in all ({fmt_pct(share)} of the rank's {fmt_ms(free_ns)} of Free time), {GAP_CAUSE_WORDS[cause]}. "
              f"{GAP_CAUSE_ADVICE[cause]}",
              rank=a.rank, source={"table": "slices", "lane": "Overlap Analysis / Free",
                                   "host": "CANN lane, Ascend Hardware wait tasks"},
              instances=top.get(cause, []), instance_count=t["count"],
              metrics={"count": t["count"], "total_ns": t["total_ns"], "free_ns": free_ns,
                       "free_slices": int(free_n or 0), "share_of_free": share, "min_gap_ns": MIN_GAP_NS})
    return by_step
