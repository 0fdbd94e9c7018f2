"""Expert advice: findings over one rank of a run (plus the cross-rank ones), each with the numbers it rests on and
the slices that show it on the timeline.

Contract: :func:`advice` takes a runner (see ``server.queries``), the run id and a rank, and returns ``{"rank",
"ranks", "categories", "findings", "truncated", …}``. A finding is ``{id, category, severity (critical | warning
| info), title, text (one paragraph, with its numbers), rank, step, metrics (the numbers), source (where they
come from: table, src_row, lane), instances, instance_count, instances_truncated}``; an instance is ``{slice_id,
rank, name, ts_ns (epoch ns, string), dur_ns, timeline_url, detail, …}``, its name and times those of the slice
(``slice_id`` is null on a rank without a trace). Lists are capped: at most :data:`MAX_FINDINGS` findings and
:data:`MAX_INSTANCES` instances each, with flags saying so.

The checks (each in its own module, thresholds the constants there; this one runs them and orders the answer):

* **host_bound** (``advice_steps``) — a step whose Free time (step_trace_time.csv, or the Overlap Analysis lane) is
  over 10% of Computing + Communication(Not Overlapped) + Free: the device waited for the host. Instances: its Free
  slices.
* **exposed_communication** (``advice_steps``) — a step whose Communication(Not Overlapped) is over 20% of the same
  total. Instances: its Communication(Not Overlapped) slices.
* **slow_rank** (``advice_ranks``) — the rank that waits most in collectives (Wait + Synchronization of
  communication.json) against the one that waits least (the one the others wait for); and per transport the link
  with the lowest bandwidth (communication_matrix.json) when it is under half its transport's median or half the
  typical bandwidth.
* **aicpu** (``advice_kernels``) — kernels whose accelerator core is AI_CPU (kernel_details.csv).
* **affinity_api** (``advice_affinity``) — consecutive top-level torch ops on one thread that spell an operation
  torch_npu has a fused API for (:data:`AFFINITY_RULES`, the rules as data).
* **fusible** (``advice_kernels``) — runs of consecutive small compute kernels on one stream (each under
  :data:`SMALL_KERNEL_NS`) whose name sequence repeats (names compared without their instance numbers:
  ``trans_TransData_14`` is ``trans_TransData``, ``Filter6_MemSet`` is ``Filter_MemSet``): candidates for one fused
  kernel.
* **dispatch** (``advice_gaps``) — every Free gap of :data:`MIN_GAP_NS` or more, attributed by what the host was
  doing meanwhile: *waiting* (a host synchronize call overlaps it, or device wait tasks cover half of it), else
  *launch* (one CANN thread is inside API calls for half of it: the launch itself is slow), else *queue* (CANN is
  idle most of it: the task queue had nothing to launch, the framework side was slow to enqueue). A rank without a
  CANN lane cannot tell launch from queue: its other gaps are *unattributed*.
"""

from __future__ import annotations

from ascendscope.server.queries import serving_advice
from ascendscope.server.queries import summary as sq
from ascendscope.server.queries.advice_affinity import AFFINITY_RULES, MAX_AFFINITY_CANDIDATES, affinity, alternatives
from ascendscope.server.queries.advice_core import MAX_INSTANCES, Advisor, timeline_url
from ascendscope.server.queries.advice_gaps import GAPS_CTE, MIN_GAP_NS, SYNC_API_MARKER, WAIT_TASK_TYPES, gap_checks
from ascendscope.server.queries.advice_kernels import (
    COMPUTE_TASK_TYPES,
    MAX_FUSE_FINDINGS,
    MAX_FUSE_NAMES,
    MIN_FUSE_KERNELS,
    MIN_FUSE_REPEATS,
    SMALL_KERNEL_NS,
    aicpu,
    fusible,
)
from ascendscope.server.queries.advice_ranks import SLOW_LINK_RATIO, SLOW_RANK_SPREAD, slow_links, slow_rank
from ascendscope.server.queries.advice_steps import EXPOSED_COMM_RATIO, HOST_BOUND_RATIO, step_checks

__all__ = ["AFFINITY_RULES", "CATEGORIES", "COMPUTE_TASK_TYPES", "EXPOSED_COMM_RATIO", "GAPS_CTE", "HOST_BOUND_RATIO",
           "MAX_AFFINITY_CANDIDATES", "MAX_FINDINGS", "MAX_FUSE_FINDINGS", "MAX_FUSE_NAMES", "MAX_INSTANCES",
           "MIN_FUSE_KERNELS", "MIN_FUSE_REPEATS", "MIN_GAP_NS", "SLOW_LINK_RATIO", "SLOW_RANK_SPREAD",
           "SMALL_KERNEL_NS", "SYNC_API_MARKER", "WAIT_TASK_TYPES", "Advisor", "advice", "timeline_url"]

MAX_FINDINGS = 300
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

CATEGORIES = (
    ("host_bound", "Host-bound steps", "Steps where the device sat idle (Free) waiting for the host"),
    ("exposed_communication", "Exposed communication", "Communication not hidden behind computation"),
    ("slow_rank", "Slow rank / slow link", "The rank the others wait for; links below their transport's speed"),
    ("aicpu", "AICPU operators", "Kernels that run on the AI CPU instead of the AI Core"),
    ("affinity_api", "Affinity APIs", "Torch op sequences that one fused torch_npu API replaces"),
    ("fusible", "Fusible op sequences", "Repeated runs of small kernels on one stream"),
    ("dispatch", "Dispatch gaps", "Device idle time attributed to launch, queue or waiting"),
    serving_advice.CATEGORY,
)


def run(a: Advisor) -> dict:
    """Every check over the advisor's rank (the cross-rank ones whatever the rank), then the answer: findings in
    category and severity order, capped at :data:`MAX_FINDINGS`, their instances resolved to slices."""
    if a.rank is not None:
        steps = [r for r in sq.breakdown(a.db) if r["rank"] == a.rank]
        gaps_by_step = gap_checks(a, sum(r["e2e_ns"] or 0 for r in steps))
        step_checks(a, steps, gaps_by_step)
        aicpu(a)
        affinity(a)
        fusible(a)
    slow_rank(a)
    slow_links(a)
    a.findings.extend(serving_advice.findings(a.db))
    order = {c: i for i, (c, _, _) in enumerate(CATEGORIES)}
    a.findings.sort(key=lambda f: (order[f["category"]], SEVERITY_ORDER[f["severity"]],
                                   -1 if f["step"] is None else f["step"]))
    truncated = len(a.findings) > MAX_FINDINGS
    a.findings = a.findings[:MAX_FINDINGS]
    a.resolve()
    counts: dict[str, int] = {}
    for f in a.findings:
        counts[f["category"]] = counts.get(f["category"], 0) + 1
    return {
        "rank": a.rank, "ranks": sorted(a.traced), "has_trace": a.traced.get(a.rank, False),
        # the serving category is offered only to a run that has serving data
        "categories": [{"id": c, "label": label, "description": d, "count": counts.get(c, 0)}
                       for c, label, d in CATEGORIES
                       if c != serving_advice.CATEGORY[0] or serving_advice.sv.has_serving(a.db)],
        "findings": a.findings, "truncated": truncated,
        "rules": [{"id": rid, "pattern": [sorted(alternatives(p)) for p in seq], "replacement": repl, "what": what}
                  for rid, seq, repl, what in AFFINITY_RULES],
    }


def advice(db, run_id: str, rank: int | None = None) -> dict:
    """Findings of ``rank`` (default: the first rank) and the cross-rank ones (slow rank, slow links)."""
    return run(Advisor(db, run_id, rank))
