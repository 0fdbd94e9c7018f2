"""The kernel checks of the advice (``advice.py`` runs them): **aicpu** (kernels on the AI CPU) and **fusible**
(repeated runs of small compute kernels on one stream)."""

from __future__ import annotations

import hashlib

from ascendscope.server.queries import links, ratio
from ascendscope.server.queries.advice_core import MAX_INSTANCES, Advisor, as_int, fmt_count, fmt_ms, fmt_pct, fmt_us

SMALL_KERNEL_NS = 20_000
MIN_FUSE_KERNELS = 3
MIN_FUSE_REPEATS = 2
MAX_FUSE_NAMES = 16  # a run longer than this is keyed by its first names and its length
MAX_FUSE_FINDINGS = 10
AICPU_WARNING_SHARE = 0.01
COMPUTE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU")

AICPU_SQL = """
SELECT src_row, name, type, start_ns, duration_ns, count(*) OVER () AS n, sum(duration_ns) OVER () AS total_ns
FROM kernels WHERE rank = ? AND accelerator_core = 'AI_CPU'
ORDER BY duration_ns DESC NULLS LAST, start_ns, src_row LIMIT ?
"""
AICPU_TYPES_SQL = """
SELECT coalesce(type, name) AS type, count(*) AS n, sum(duration_ns) AS total_ns
FROM kernels WHERE rank = ? AND accelerator_core = 'AI_CPU' GROUP BY ALL ORDER BY total_ns DESC NULLS LAST, type
LIMIT 5
"""
COMPUTE_KERNELS_SQL = """
SELECT sum(duration_ns) FROM kernels
WHERE rank = ? AND NOT (coalesce(accelerator_core, '') IN ('HCCL', 'COMMUNICATION')
                        OR starts_with(lower(coalesce(name, '')), 'hcom'))
"""
# Maximal runs of consecutive small compute kernels per stream; runs of the same name sequence grouped.
FUSIBLE_SQL = """
WITH k AS (
  SELECT s.slice_id, s.track_id, s.ts_ns, s.dur_ns, s.dur_ns < ? AS small,
         regexp_replace(regexp_replace(s.name, '_[0-9]+$', ''), '([A-Za-z])[0-9]+_', '\\1_', 'g') AS name
  FROM slices s JOIN tracks t ON t.track_id = s.track_id
  WHERE s.rank = ? AND t.kind = 'hardware' AND s.depth = 0
    AND list_contains(?::VARCHAR[], json_extract_string(s.args, '$."Task Type"'))
),
r AS (
  SELECT *, sum(CASE WHEN small THEN 0 ELSE 1 END) OVER (PARTITION BY track_id ORDER BY ts_ns, slice_id
                                                         ROWS UNBOUNDED PRECEDING) AS run
  FROM k
),
runs AS (
  SELECT track_id, run, list(name ORDER BY ts_ns, slice_id) AS names, count(*) AS n, min(ts_ns) AS ts_ns,
         max(ts_ns + dur_ns) AS end_ns, sum(dur_ns) AS busy_ns, arg_min(slice_id, ts_ns) AS first_id
  FROM r WHERE small GROUP BY track_id, run HAVING count(*) >= ?
)
SELECT list_slice(names, 1, ?) AS key, n, count(*) AS occurrences, sum(busy_ns) AS busy_ns,
       sum(end_ns - ts_ns) AS span_ns, list(first_id ORDER BY ts_ns) AS first_ids,
       list(ts_ns ORDER BY ts_ns) AS starts, list(end_ns - ts_ns ORDER BY ts_ns) AS spans,
       list(busy_ns ORDER BY ts_ns) AS busy, list(DISTINCT track_id) AS tracks
FROM runs GROUP BY key, n HAVING count(*) >= ?
ORDER BY busy_ns DESC, occurrences DESC, n DESC LIMIT ?
"""


def aicpu(a: Advisor) -> None:
    rows = a.db.rows(AICPU_SQL, [a.rank, MAX_INSTANCES])
    if not rows:
        return
    n, total = int(rows[0][5]), as_int(rows[0][6])
    compute = as_int(a.db.rows(COMPUTE_KERNELS_SQL, [a.rank])[0][0])
    share = ratio(total, compute) or 0
    types = a.db.rows(AICPU_TYPES_SQL, [a.rank])
    matches = links.match_slices(a.db, a.rank, [(r[3], r[1]) for r in rows], links.KERNEL_TOLERANCE_NS) \
        if a.traced.get(a.rank) else {}
    where = a.source_name("kernels", a.rank)
    inst = [a.instance(a.rank, matches.get((int(start), name)) if start is not None else None, name, start,
                       dur, src_row=int(src_row), type=typ, detail=f"{typ} · {where} row {src_row}")
            for src_row, name, typ, start, dur, _, _ in rows]
    top = ", ".join(f"{t} ×{c} ({fmt_ms(ns)})" for t, c, ns in types)
    a.add("aicpu", "all", "warning" if share >= AICPU_WARNING_SHARE else "info",
          f"Rank {a.rank}: {fmt_count(n, 'AI_CPU kernel')}, {fmt_ms(total)}",
          f"Rank {a.rank}: {fmt_count(n, 'kernel')} ran on the AI CPU for {fmt_ms(total)}, {fmt_pct(share)} of the "
          f"{fmt_ms(compute)} of computing kernels; the largest: {top}. AI CPU kernels are much slower than AI "
          "Core ones and break the pipeline: change the dtype or shape that sends the op to the AI CPU (often "
          "int64 or dynamic shapes), or use an equivalent op that has an AI Core kernel.",
          rank=a.rank, source={"table": "kernels", "file": a.source_name("kernels", a.rank),
                               "where": "Accelerator Core = AI_CPU"},
          instances=inst, instance_count=n,
          metrics={"count": n, "total_ns": total, "compute_kernels_ns": compute, "share": share,
                   "types": [{"type": t, "count": int(c), "total_ns": as_int(ns)} for t, c, ns in types]})


def fusible(a: Advisor) -> None:
    if not a.traced.get(a.rank):
        return
    rows = a.db.rows(FUSIBLE_SQL, [SMALL_KERNEL_NS, a.rank, list(COMPUTE_TASK_TYPES), MIN_FUSE_KERNELS,
                                   MAX_FUSE_NAMES, MIN_FUSE_REPEATS, MAX_FUSE_FINDINGS])
    for key, n, occ, busy, span, first_ids, starts, spans, busy_each, _tracks in rows:
        names = list(key)
        label = " → ".join(names) + (f" → … ({n} kernels)" if n > len(names) else "")
        inst = [a.instance(a.rank, fid, names[0], s, None, end_ns=str(int(s) + int(sp)), span_ns=int(sp),
                           busy_ns=int(b), kernels=int(n), detail=f"{n} kernels, {fmt_us(b)} busy in {fmt_us(sp)}")
                for fid, s, sp, b in zip(first_ids, starts, spans, busy_each)]
        a.add("fusible", _digest(names, n), "info",
              f"Rank {a.rank}: {occ:,}× " + " → ".join(_short(x) for x in names[:4])
              + (" → …" if n > 4 else "") + f" ({n} small kernels)",
              f"Rank {a.rank}: the same {n} kernels ({label}), each under {fmt_us(SMALL_KERNEL_NS)}, run back "
              f"to back on one stream {occ:,} times: {fmt_ms(busy)} of kernel time spread over {fmt_ms(span)}. Each "
              "launch costs host time and leaves a gap on the device; one fused kernel (a fused torch_npu "
              "API, or a custom op) would launch once.",
              rank=a.rank, source={"table": "slices", "lane": "Ascend Hardware"}, instances=inst,
              metrics={"kernels": int(n), "names": names, "occurrences": int(occ), "busy_ns": as_int(busy),
                       "span_ns": as_int(span), "small_kernel_ns": SMALL_KERNEL_NS})


def _short(kernel: str) -> str:
    """A kernel's op type, for titles: the last part of its name (``aclnnMuls_MulAiCore_Mul`` is ``Mul``)."""
    return kernel.rsplit("_", 1)[-1] or kernel


def _digest(names: list[str], n: int) -> str:
    """A stable key for a kernel sequence (Python's own hash of a string changes between processes)."""
    return hashlib.sha1(("\x1f".join(names) + f"\x1e{n}").encode()).hexdigest()[:12]
