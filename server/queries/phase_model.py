"""The arithmetic of the Phases view over plain rows: busy and idle time, the deciding chain, pipeline bubbles.

Every function takes phases as dicts with ``rank``, ``role``, ``iteration``, ``phase``, ``microbatch``, ``start_ns``
and ``end_ns`` (ints) and returns JSON-ready values; no database here, so tests can feed it rows by hand.

Definitions (docs/phases.md says the same for users):

* an iteration's *window* is [the earliest start, the latest end] of its phases over every rank; its *wall* time
  the window's length;
* a rank's *busy* time in a window is the length of the union of its phases there; its *idle* time the window
  minus that; its *gaps* the stretches of the window no phase of the rank covers;
* the *deciding chain* starts at the phase that ends last (ties: the lowest rank) and steps back, each time, to
  the phase (of any rank) that ended latest at or before the current one started; it stops when none did. On a
  schedule where each phase waits for the previous ones to finish everywhere, it is the chain of stragglers;
* a pipeline stage's *bubble* is its window minus its busy time, its *bubble ratio* bubble / window; the
  schedule's theoretical ratio for 1F1B is (p − 1) / (m + p − 1) for p stages and m microbatches. The stage that
  *sets the step* is the busiest (least bubble; ties: the lowest rank).
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict

MAX_CHAIN = 500
MAX_GAPS_PER_RANK = 50  # the longest ones; the count says how many there were
PP_FORWARD = ("forward_step", "forward_step_with_model_graph", "forward_step_no_model_graph")
PP_BACKWARD = ("backward_step", "backward_step_with_model_graph")
PP_OVERLAP = ("forward_backward_overlaping", "forward_backward_overlapping")
PP_WEIGHT = ("WeightGradStore.pop", "WeightGradStore_pop")
PP_KIND = {**{n: "forward" for n in PP_FORWARD}, **{n: "backward" for n in PP_BACKWARD},
           **{n: "overlap" for n in PP_OVERLAP}, **{n: "weight" for n in PP_WEIGHT}}


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sorted, merged union of [start, end) intervals."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def busy_and_gaps(intervals: list[tuple[int, int]], lo: int, hi: int) -> tuple[int, list[tuple[int, int]]]:
    """Busy ns of ``intervals`` clipped to [lo, hi], and the gaps of the window they leave."""
    merged = [(max(s, lo), min(e, hi)) for s, e in union(intervals) if e > lo and s < hi]
    busy = sum(e - s for s, e in merged)
    gaps, at = [], lo
    for s, e in merged:
        if s > at:
            gaps.append((at, s))
        at = max(at, e)
    if at < hi:
        gaps.append((at, hi))
    return busy, gaps


def chain(rows: list[dict]) -> list[dict]:
    """The deciding chain of one iteration's phases (see the module note), first phase first."""
    if not rows:
        return []
    by_end = sorted(rows, key=lambda r: (r["end_ns"], -r["rank"]))
    cur = by_end[-1]
    ends = [r["end_ns"] for r in by_end]
    out = [cur]
    while len(out) < MAX_CHAIN:
        i = bisect.bisect_right(ends, cur["start_ns"])
        if i == 0:
            break
        cur = by_end[i - 1]  # among equal ends the lowest rank: by_end puts it last of them
        out.append(cur)
    return out[::-1]


def by_iteration(rows: list[dict]):
    """(iteration, its rows, window start, window end) per iteration, in order (no iteration last)."""
    groups: dict = defaultdict(list)
    for r in rows:
        groups[r["iteration"]].append(r)
    for it in sorted(groups, key=lambda k: (k is None, k)):
        group = groups[it]
        yield it, group, min(r["start_ns"] for r in group), max(r["end_ns"] for r in group)


def iterations(rows: list[dict]) -> list[dict]:
    """Per iteration: window, wall time, deciding chain, per rank busy / idle / gaps, per role busy / idle, and
    the iteration × phase table (min / median / max over ranks, the straggler)."""
    out = []
    for it, group, lo, hi in by_iteration(rows):
        per_rank: dict = defaultdict(list)
        roles_of: dict = defaultdict(set)
        per_role_rank: dict = defaultdict(list)
        per_phase_rank: dict = defaultdict(int)
        for r in group:
            per_rank[r["rank"]].append((r["start_ns"], r["end_ns"]))
            roles_of[r["rank"]].add(r["role"])
            per_role_rank[(r["role"], r["rank"])].append((r["start_ns"], r["end_ns"]))
            per_phase_rank[(r["phase"], r["rank"])] += r["end_ns"] - r["start_ns"]
        workers = []
        idle_of = {}
        for rank in sorted(per_rank):
            busy, gaps = busy_and_gaps(per_rank[rank], lo, hi)
            idle_of[rank] = hi - lo - busy
            longest = sorted(gaps, key=lambda g: g[0] - g[1])[:MAX_GAPS_PER_RANK]
            workers.append({"rank": rank, "roles": sorted(x for x in roles_of[rank] if x is not None),
                            "busy_ns": busy, "idle_ns": hi - lo - busy, "gap_count": len(gaps),
                            "gaps": [{"start_ns": str(s), "end_ns": str(e), "dur_ns": e - s}
                                     for s, e in sorted(longest)]})
        roles: dict = defaultdict(lambda: {"busy_ns": 0, "idle_ns": 0, "ranks": 0})
        for (role, rank), ivs in per_role_rank.items():
            busy, _ = busy_and_gaps(ivs, lo, hi)
            acc = roles[role]
            acc["busy_ns"] += busy
            acc["idle_ns"] += idle_of[rank]
            acc["ranks"] += 1
        table: dict = defaultdict(dict)
        for (phase, rank), dur in per_phase_rank.items():
            table[phase][rank] = dur
        first_start = {}
        for r in group:
            first_start[r["phase"]] = min(first_start.get(r["phase"], r["start_ns"]), r["start_ns"])
        phases = []
        for phase in sorted(table, key=lambda p: (first_start[p], p)):
            durs = table[phase]
            straggler = max(sorted(durs), key=lambda k: durs[k])
            phases.append({"phase": phase, "ranks": len(durs), "min_ns": min(durs.values()),
                           "median_ns": int(statistics.median(durs.values())), "max_ns": durs[straggler],
                           "straggler": straggler, "start_ns": str(first_start[phase])})
        out.append({
            "iteration": it, "start_ns": str(lo), "end_ns": str(hi), "wall_ns": hi - lo,
            "chain": [{"rank": c["rank"], "role": c["role"], "phase": c["phase"], "slice_id": c["slice_id"],
                       "start_ns": str(c["start_ns"]), "end_ns": str(c["end_ns"]),
                       "dur_ns": c["end_ns"] - c["start_ns"]} for c in chain(group)],
            "roles": [{"role": role, **v} for role, v in sorted(roles.items(), key=lambda kv: str(kv[0]))],
            "workers": workers, "phases": phases,
        })
    return out


def pipeline(rows: list[dict], pp_type: str | None, microbatches: int | None) -> list[dict]:
    """Per iteration of the pipeline-parallel phases (those with msprof-analyze's names): per stage (rank) its
    busy time, bubble and bubble ratio, the theoretical ratio, and the stage that sets the step."""
    out = []
    for it, group, lo, hi in by_iteration([r for r in rows if r["phase"] in PP_KIND]):
        stages = sorted({r["rank"] for r in group})
        p = len(stages)
        forwards = defaultdict(set)
        for r in group:
            if PP_KIND[r["phase"]] in ("forward", "overlap"):
                forwards[r["rank"]].add(r["microbatch"] if r["microbatch"] is not None else (r["start_ns"],))
        m = microbatches or max((len(v) for v in forwards.values()), default=0)
        kind = (pp_type or ("dualpipev" if any(PP_KIND[r["phase"]] in ("overlap", "weight") for r in group)
                            else "1f1b")).lower()
        theory = (p - 1) / (m + p - 1) if kind == "1f1b" and m + p - 1 > 0 else None
        per_rank: dict = defaultdict(list)
        counts: dict = defaultdict(lambda: {"forward": 0, "backward": 0, "overlap": 0, "weight": 0})
        for r in group:
            per_rank[r["rank"]].append((r["start_ns"], r["end_ns"]))
            counts[r["rank"]][PP_KIND[r["phase"]]] += 1
        rows_out = []
        for rank in stages:
            busy, _ = busy_and_gaps(per_rank[rank], lo, hi)
            rows_out.append({"rank": rank, "busy_ns": busy, "bubble_ns": hi - lo - busy,
                             "bubble_ratio": (hi - lo - busy) / (hi - lo) if hi > lo else None, **counts[rank]})
        setter = max(rows_out, key=lambda s: (s["busy_ns"], -s["rank"]))["rank"] if rows_out else None
        out.append({"iteration": it, "start_ns": str(lo), "end_ns": str(hi), "step_ns": hi - lo, "pp_type": kind,
                    "stages": p, "microbatches": m, "theory_bubble_ratio": theory, "setter": setter,
                    "per_stage": rows_out})
    return out
