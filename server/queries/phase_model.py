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
    """Busy ns of ``intervals`` clipped to [lo, hi], and the gaps of the window they leave. One pass over the
    intervals by start (the rows come ordered so; sorted here otherwise): the same as clipping :func:`union`."""
    if any(intervals[k][0] > intervals[k + 1][0] for k in range(len(intervals) - 1)):
        intervals = sorted(intervals)
    busy, gaps, at = 0, [], lo  # at: the end of what is covered so far (never before lo)
    for s, e in intervals:
        if e <= at or s >= hi:
            continue
        if s > at:
            gaps.append((at, s))
            at = s
        end = e if e < hi else hi
        busy += end - at
        at = end
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
    groups: dict = {}
    for r in rows:
        it = r["iteration"]
        g = groups.get(it)
        if g is None:
            groups[it] = [[r], r["start_ns"], r["end_ns"]]
        else:
            g[0].append(r)
            if r["start_ns"] < g[1]:
                g[1] = r["start_ns"]
            if r["end_ns"] > g[2]:
                g[2] = r["end_ns"]
    for it in sorted(groups, key=lambda k: (k is None, k)):
        group, lo, hi = groups[it]
        yield it, group, lo, hi


def iterations(rows: list[dict], known: dict | None = None) -> list[dict]:
    """Per iteration: window, wall time, deciding chain, per rank busy / idle / gaps, per role busy / idle, and
    the iteration × phase table (min / median / max over ranks, the straggler). ``known``, when given, is filled
    with each (iteration, rank)'s (window, phase count, busy ns) for :func:`pipeline` to reuse."""
    out = []
    for it, group, lo, hi in by_iteration(rows):
        # one pass over the rows (the summary's cost at 10^4–10^5 phases): intervals per rank, roles per rank,
        # time per (phase, rank), each phase's first start; intervals per (role, rank) only for ranks of 2+ roles
        per_rank: dict = {}
        roles_of: dict = {}
        per_phase_rank: dict = {}
        first_start: dict = {}
        for r in group:
            rank, s, e, phase = r["rank"], r["start_ns"], r["end_ns"], r["phase"]
            ivs = per_rank.get(rank)
            if ivs is None:
                per_rank[rank] = [(s, e)]
                roles_of[rank] = {r["role"]}
            else:
                ivs.append((s, e))
                roles_of[rank].add(r["role"])
            key = (phase, rank)
            per_phase_rank[key] = per_phase_rank.get(key, 0) + e - s
            if s < first_start.get(phase, s + 1):
                first_start[phase] = s
        per_role_rank: dict = defaultdict(list)
        for rank, roles_here in roles_of.items():
            if len(roles_here) == 1:
                per_role_rank[(next(iter(roles_here)), rank)] = per_rank[rank]
        for r in group:
            if len(roles_of[r["rank"]]) > 1:
                per_role_rank[(r["role"], r["rank"])].append((r["start_ns"], r["end_ns"]))
        workers = []
        idle_of = {}
        for rank in sorted(per_rank):
            busy, gaps = busy_and_gaps(per_rank[rank], lo, hi)
            idle_of[rank] = hi - lo - busy
            if known is not None:
                known[(it, rank)] = (lo, hi, len(per_rank[rank]), busy)
            longest = sorted(gaps, key=lambda g: g[0] - g[1])[:MAX_GAPS_PER_RANK]
            workers.append({"rank": rank, "roles": sorted(x for x in roles_of[rank] if x is not None),
                            "busy_ns": busy, "idle_ns": hi - lo - busy, "gap_count": len(gaps),
                            "gaps": [{"start_ns": str(s), "end_ns": str(e), "dur_ns": e - s}
                                     for s, e in sorted(longest)]})
        roles: dict = defaultdict(lambda: {"busy_ns": 0, "idle_ns": 0, "ranks": 0})
        for (role, rank), ivs in per_role_rank.items():
            # a rank of one role (most): the role's busy time is the rank's
            busy = hi - lo - idle_of[rank] if len(roles_of[rank]) == 1 else busy_and_gaps(ivs, lo, hi)[0]
            acc = roles[role]
            acc["busy_ns"] += busy
            acc["idle_ns"] += idle_of[rank]
            acc["ranks"] += 1
        table: dict = defaultdict(dict)
        for (phase, rank), dur in per_phase_rank.items():
            table[phase][rank] = dur
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


def pipeline(rows: list[dict], pp_type: str | None, microbatches: int | None, known: dict | None = None) -> list[dict]:
    """Per iteration of the pipeline-parallel phases (those with msprof-analyze's names): per stage (rank) its
    busy time, bubble and bubble ratio, the theoretical ratio, and the stage that sets the step. ``known``: what
    :func:`iterations` filled; a stage whose phases are all pipeline phases in the same window reuses its busy
    time (the usual case: a pipeline run marks nothing else)."""
    out = []
    for it, group, lo, hi in by_iteration([r for r in rows if r["phase"] in PP_KIND]):
        # one pass: each stage's intervals, op counts by kind, and forward microbatches (an overlapped block's
        # microbatch is its forward's)
        per_rank: dict = {}
        counts: dict = {}
        forwards: dict = {}
        for r in group:
            rank, kind_of = r["rank"], PP_KIND[r["phase"]]
            ivs = per_rank.get(rank)
            if ivs is None:
                ivs = per_rank[rank] = []
                counts[rank] = {"forward": 0, "backward": 0, "overlap": 0, "weight": 0}
                forwards[rank] = set()
            ivs.append((r["start_ns"], r["end_ns"]))
            counts[rank][kind_of] += 1
            if kind_of == "forward" or kind_of == "overlap":
                forwards[rank].add(r["microbatch"] if r["microbatch"] is not None else (r["start_ns"],))
        stages = sorted(per_rank)
        p = len(stages)
        m = microbatches or max((len(v) for v in forwards.values()), default=0)
        kind = (pp_type or ("dualpipev" if any(c["overlap"] or c["weight"] for c in counts.values())
                            else "1f1b")).lower()
        theory = (p - 1) / (m + p - 1) if kind == "1f1b" and m + p - 1 > 0 else None
        rows_out = []
        for rank in stages:
            same = (known or {}).get((it, rank))
            if same is not None and same[:3] == (lo, hi, len(per_rank[rank])):
                busy = same[3]
            else:
                busy, _ = busy_and_gaps(per_rank[rank], lo, hi)
            rows_out.append({"rank": rank, "busy_ns": busy, "bubble_ns": hi - lo - busy,
                             "bubble_ratio": (hi - lo - busy) / (hi - lo) if hi > lo else None, **counts[rank]})
        setter = max(rows_out, key=lambda s: (s["busy_ns"], -s["rank"]))["rank"] if rows_out else None
        out.append({"iteration": it, "start_ns": str(lo), "end_ns": str(hi), "step_ns": hi - lo, "pp_type": kind,
                    "stages": p, "microbatches": m, "theory_bubble_ratio": theory, "setter": setter,
                    "per_stage": rows_out})
    return out
