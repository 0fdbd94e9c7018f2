"""The per-step checks of the advice (``advice.py`` runs them): **host_bound** and **exposed_communication**, one
finding per step whose Free or Communication(Not Overlapped) share is over its threshold, with the slices of that
lane as instances (a host-bound step's Free slices carry the cause of their gap, from ``advice_gaps``)."""

from __future__ import annotations

from ascendscope.server.queries import summary as sq
from ascendscope.server.queries.advice_core import MAX_INSTANCES, Advisor, fmt_ms, fmt_pct
from ascendscope.server.queries.advice_gaps import GAP_CAUSE_WORDS, GAP_CAUSES, note_gap_causes

HOST_BOUND_RATIO = sq.FREE_FINDING_RATIO
EXPOSED_COMM_RATIO = sq.EXPOSED_COMM_FINDING_RATIO
CRITICAL_RATIO = 0.30  # a step that loses this much to either is critical, not just a warning

STEP_RANGE_SQL = "SELECT device_start_ns, device_end_ns FROM steps WHERE rank = ? AND step = ?"
STEP_TRACE_ROW_SQL = "SELECT src_row FROM step_trace WHERE rank = ? AND step IS NOT DISTINCT FROM ? LIMIT 1"
# Overlap Analysis slices of one name in [lo, hi), longest first; the window totals are over all of them.
LANE_SLICES_SQL = """
SELECT s.slice_id, s.name, s.ts_ns, s.dur_ns, count(*) OVER () AS n, sum(s.dur_ns) OVER () AS total_ns
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = ? AND t.kind = 'overlap' AND s.name = ? AND s.ts_ns >= ? AND s.ts_ns < ?
ORDER BY s.dur_ns DESC, s.ts_ns LIMIT ?
"""


def step_range(a: Advisor, step) -> tuple[int, int]:
    if step is not None:
        row = a.db.rows(STEP_RANGE_SQL, [a.rank, step])
        if row:
            return int(row[0][0]), int(row[0][1])
    return -(2 ** 63), 2 ** 63 - 1


def lane_instances(a: Advisor, name: str, step) -> tuple[list[dict], int, int]:
    lo, hi = step_range(a, step)
    rows = a.db.rows(LANE_SLICES_SQL, [a.rank, name, lo, hi, MAX_INSTANCES])
    n = int(rows[0][4]) if rows else 0
    total = int(rows[0][5] or 0) if rows else 0
    return [a.instance(a.rank, sid, nm, ts, dur) for sid, nm, ts, dur, _, _ in rows], n, total


def step_checks(a: Advisor, rows: list[dict], gaps_by_step: dict) -> None:
    for r in rows:
        step = r["step"]
        where = f"Rank {a.rank}" + ("" if step is None else f", step {step}")
        source = {"table": "step_trace", "file": a.source_name("step_trace", a.rank)} \
            if r["source"] == "step_trace" else {"table": "slices", "lane": "Overlap Analysis"}
        if r["source"] == "step_trace":
            src = a.db.rows(STEP_TRACE_ROW_SQL, [a.rank, step])
            source["src_row"] = int(src[0][0]) if src else None
        e2e = r["e2e_ns"]
        base = {"e2e_ns": e2e, "computing_ns": r["computing_ns"],
                "communication_not_overlapped_ns": r["communication_not_overlapped_ns"], "free_ns": r["free_ns"]}
        free_ratio = r["free_ratio"] or 0
        if free_ratio > HOST_BOUND_RATIO:
            inst, n, lane_ns = lane_instances(a, "Free", step)
            note_gap_causes(a, inst)
            causes = gaps_by_step.get(step, {})
            parts = [f"{fmt_ms(causes[c]['total_ns'])} {GAP_CAUSE_WORDS[c]}" for c in GAP_CAUSES if c in causes]
            split = (" Of the gaps of 10 µs or more, " + ", ".join(parts) + ".") if parts else ""
            a.add("host_bound", f"{step}", "critical" if free_ratio > CRITICAL_RATIO else "warning",
                  f"{where}: the device is free {fmt_pct(free_ratio)} of the step",
                  f"{where}: the device was free (neither computing nor communicating) for "
                  f"{fmt_ms(r['free_ns'])} of {fmt_ms(e2e)} (Computing {fmt_ms(r['computing_ns'])} + Communication(Not "
                  f"Overlapped) {fmt_ms(r['communication_not_overlapped_ns'])} + Free), {fmt_pct(free_ratio)}, over "
                  f"{HOST_BOUND_RATIO:.0%}: the device waited for the host to give it work.{split} "
                  "Speed up the host side: fewer small ops, the task queue (TASK_QUEUE_ENABLE=2), CPU "
                  "binding (CPU_AFFINITY_CONF), no synchronizing calls such as .item() inside the step.",
                  rank=a.rank, step=step, source=source, instances=inst, instance_count=n,
                  metrics={**base, "free_ratio": free_ratio, "free_slices": n, "free_slices_ns": lane_ns,
                           "gaps": {c: causes[c] for c in GAP_CAUSES if c in causes}})
        comm_ratio = r["communication_ratio"] or 0
        if comm_ratio > EXPOSED_COMM_RATIO:
            inst, n, lane_ns = lane_instances(a, "Communication(Not Overlapped)", step)
            a.add("exposed_communication", f"{step}", "critical" if comm_ratio > CRITICAL_RATIO else "warning",
                  f"{where}: {fmt_pct(comm_ratio)} of the step is communication not overlapped",
                  f"{where}: {fmt_ms(r['communication_not_overlapped_ns'])} of communication ran while nothing "
                  f"computed, {fmt_pct(comm_ratio)} of the step's {fmt_ms(e2e)} (over {EXPOSED_COMM_RATIO:.0%}); "
                  f"{fmt_ms(r['overlapped_ns'])} of communication was hidden behind computation. Overlap it with "
                  "compute (e.g. DDP bucketing, prefetching all-gathers), or find the rank the others wait for "
                  "(Slow rank) — a rank that arrives late makes every other rank's communication longer.",
                  rank=a.rank, step=step, source=source, instances=inst, instance_count=n,
                  metrics={**base, "communication_ratio": comm_ratio,
                           "overlapped_ns": r["overlapped_ns"], "slices": n, "slices_ns": lane_ns})
