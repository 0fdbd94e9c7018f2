"""Expert advice: findings over one rank of a run (plus the cross-rank ones), each with the numbers it rests on and
the slices that show it on the timeline.

Contract: :func:`advice` takes a runner (see ``server.queries``), the run id and a rank, and returns ``{"rank",
"ranks", "categories", "findings", "truncated", …}``. A finding is ``{id, category, severity (critical | warning
| info), title, text (one paragraph, with its numbers), rank, step, metrics (the numbers), source (where they
come from: table, src_row, lane), instances, instance_count, instances_truncated}``; an instance is ``{slice_id,
rank, name, ts_ns (epoch ns, string), dur_ns, timeline_url, detail, …}``, its name and times those of the slice
(``slice_id`` is null on a rank without a trace). Lists are capped: at most :data:`MAX_FINDINGS` findings and
:data:`MAX_INSTANCES` instances each, with flags saying so.

The checks (thresholds are the constants below):

* **host_bound** — a step whose Free time (step_trace_time.csv, or the Overlap Analysis lane) is over 10% of
  Computing + Communication(Not Overlapped) + Free: the device waited for the host. Instances: its Free slices.
* **exposed_communication** — a step whose Communication(Not Overlapped) is over 20% of the same total.
  Instances: its Communication(Not Overlapped) slices.
* **slow_rank** — the rank that waits most in collectives (Wait + Synchronization of communication.json) against
  the one that waits least (the one the others wait for); and per transport the link with the lowest bandwidth
  (communication_matrix.json) when it is under half its transport's median or half the typical bandwidth.
* **aicpu** — kernels whose accelerator core is AI_CPU (kernel_details.csv).
* **affinity_api** — consecutive top-level torch ops on one thread that spell an operation torch_npu has a fused
  API for (:data:`AFFINITY_RULES`, the rules as data).
* **fusible** — runs of consecutive small compute kernels on one stream (each under :data:`SMALL_KERNEL_NS`) whose
  name sequence repeats (names compared without their instance numbers: ``trans_TransData_14`` is
  ``trans_TransData``, ``Filter6_MemSet`` is ``Filter_MemSet``): candidates for one fused kernel.
* **dispatch** — every Free gap of :data:`MIN_GAP_NS` or more, attributed by what the host was doing meanwhile:
  *waiting* (a host synchronize call overlaps it, or device wait tasks cover half of it), else *launch* (one CANN
  thread is inside API calls for half of it: the launch itself is slow), else *queue* (CANN is idle most of it: the
  task queue had nothing to launch, the framework side was slow to enqueue). A rank without a CANN lane cannot tell
  launch from queue: its other gaps are *unattributed*.
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlencode

from ascendscope.server.queries import communication as cq
from ascendscope.server.queries import links, ns_str, ratio, serving_advice, sources
from ascendscope.server.queries import summary as sq

MAX_FINDINGS = 300
MAX_INSTANCES = 200
HOST_BOUND_RATIO = sq.FREE_FINDING_RATIO
EXPOSED_COMM_RATIO = sq.EXPOSED_COMM_FINDING_RATIO
CRITICAL_RATIO = 0.30  # a step that loses this much to either is critical, not just a warning
MIN_GAP_NS = 10_000  # shorter gaps are ordinary launch latency
GAP_WARNING_SHARE = 0.05  # a cause of gaps worth this share of the rank's end-to-end time is a warning
SMALL_KERNEL_NS = 20_000
MIN_FUSE_KERNELS = 3
MIN_FUSE_REPEATS = 2
MAX_FUSE_NAMES = 16  # a run longer than this is keyed by its first names and its length
MAX_FUSE_FINDINGS = 10
SLOW_RANK_SPREAD = 0.05  # of the most-waiting rank's elapse time
SLOW_LINK_RATIO = 0.5
TYPICAL_GBPS = {"HCCS": 18.0, "SDMA": 18.0, "RDMA": 12.5, "PCIE": 20.0}  # usual achieved bandwidth per transport
AICPU_WARNING_SHARE = 0.01
MAX_AFFINITY_CANDIDATES = 200_000
COMPUTE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU")
WAIT_TASK_TYPES = ("EVENT_WAIT_SQE", "Notify Wait")
SYNC_API_MARKER = "Synchronize"  # aclrtSynchronizeStream / Device / Event (and *WithTimeout)
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

# Each rule: id, the op names in order (a tuple at a position lists alternatives), the replacement, and what the
# sequence computes. Longer rules are tried first, so a sequence is reported once, under its longest rule.
AFFINITY_RULES = (
    ("rotary_mul", ("aten::mul", "aten::slice", "aten::slice", "aten::neg", "aten::cat", "aten::mul", "aten::add"),
     "torch_npu.npu_rotary_mul", "rotary position embedding, x·cos + rotate_half(x)·sin"),
    ("rms_norm", ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"),
     "torch_npu.npu_rms_norm", "RMSNorm, x·rsqrt(mean(x²) + eps)"),
    ("fusion_attention", (("aten::matmul", "aten::bmm"), ("aten::div", "aten::mul"), ("aten::add", "aten::masked_fill"),
                          ("aten::softmax", "aten::_softmax"), ("aten::matmul", "aten::bmm")),
     "torch_npu.npu_fusion_attention", "attention, softmax(Q·Kᵀ·scale + mask)·V"),
    ("masked_softmax", (("aten::add", "aten::masked_fill"), ("aten::softmax", "aten::_softmax")),
     "torch_npu.npu_scaled_masked_softmax", "softmax over masked scores"),
    ("swiglu", ("aten::silu", "aten::mul"), "torch_npu.npu_swiglu", "SwiGLU, silu(a)·b"),
    ("matmul_add", (("aten::matmul", "aten::mm"), "aten::add"), "torch.addmm (one MatMul with its bias)",
     "a matmul, then a bias add"),
    ("confusion_transpose", (("aten::permute", "aten::transpose"), ("aten::reshape", "aten::view")),
     "torch_npu.npu_confusion_transpose", "a transpose, then a reshape"),
)

RANKS_SQL = "SELECT rank, has_trace FROM ranks ORDER BY rank"
STEP_RANGE_SQL = "SELECT device_start_ns, device_end_ns FROM steps WHERE rank = ? AND step = ?"
STEP_TRACE_ROW_SQL = "SELECT src_row FROM step_trace WHERE rank = ? AND step IS NOT DISTINCT FROM ? LIMIT 1"
HAS_CANN_SQL = "SELECT count(*) > 0 FROM tracks WHERE rank = ? AND kind = 'cann'"
# Overlap Analysis slices of one name in [lo, hi), longest first; the window totals are over all of them.
LANE_SLICES_SQL = """
SELECT s.slice_id, s.name, s.ts_ns, s.dur_ns, count(*) OVER () AS n, sum(s.dur_ns) OVER () AS total_ns
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = ? AND t.kind = 'overlap' AND s.name = ? AND s.ts_ns >= ? AND s.ts_ns < ?
ORDER BY s.dur_ns DESC, s.ts_ns LIMIT ?
"""
SLICES_SQL = """
SELECT s.slice_id, s.rank, s.name, s.ts_ns, s.dur_ns FROM slices s WHERE s.slice_id IN (SELECT unnest(?::BIGINT[]))
"""
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
# Top-level torch ops of each Python thread (no enclosing aten:: op), each with the names that follow it.
AFFINITY_SQL = """
WITH ops AS (
  SELECT s.slice_id, s.track_id, s.ts_ns, s.dur_ns, s.name,
         max(s.ts_ns + s.dur_ns) OVER (PARTITION BY s.track_id ORDER BY s.ts_ns, s.dur_ns DESC, s.slice_id
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS cover_end
  FROM slices s JOIN tracks t ON t.track_id = s.track_id
  WHERE s.rank = ? AND t.kind = 'python' AND starts_with(s.name, 'aten::')
),
top AS (
  SELECT slice_id, track_id, ts_ns, dur_ns, name,
         list(name) OVER nxt AS names, list(slice_id) OVER nxt AS ids, list(ts_ns + dur_ns) OVER nxt AS ends
  FROM ops WHERE cover_end IS NULL OR cover_end <= ts_ns
  WINDOW nxt AS (PARTITION BY track_id ORDER BY ts_ns, slice_id ROWS BETWEEN CURRENT ROW AND ? FOLLOWING)
)
SELECT slice_id, track_id, ts_ns, names, ids, ends FROM top WHERE list_contains(?::VARCHAR[], name)
ORDER BY track_id, ts_ns, slice_id LIMIT ?
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
LINK_OPS_SQL = """
SELECT o.op_name, o.start_ns, o.elapse_time_ns, b.bandwidth_gbps, b.transit_size_mb, b.transit_time_ns,
       count(*) OVER () AS n
FROM comm_bandwidth b JOIN comm_ops o ON o.rank = b.rank AND o.step = b.step AND o.op_key = b.op_key
     AND NOT o.is_total
WHERE b.rank = ? AND b.transport = ? AND NOT b.is_total AND b.transit_size_mb > 0 AND b.transit_time_ns > 0
ORDER BY b.bandwidth_gbps, o.start_ns LIMIT ?
"""
WAIT_OPS_SQL = """
SELECT op_name, start_ns, elapse_time_ns, wait_time_ns, synchronization_time_ns, count(*) OVER () AS n
FROM comm_ops WHERE rank = ? AND NOT is_total AND start_ns IS NOT NULL
ORDER BY coalesce(wait_time_ns, 0) + coalesce(synchronization_time_ns, 0) DESC, start_ns LIMIT ?
"""


def _ms(ns) -> str:
    return f"{(ns or 0) / 1e6:,.3f} ms"


def _us(ns) -> str:
    return f"{(ns or 0) / 1e3:,.1f} µs"


def _pct(x) -> str:
    return f"{100 * (x or 0):.1f}%"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _i(v) -> int:
    return 0 if v is None else int(v)


def timeline_url(run_id: str, rank: int | None, slice_id: int | None, ts_ns: int | None, dur_ns: int | None,
                 has_trace: bool = True) -> str | None:
    """The timeline around an instance with its slice selected (``slice``, ``start_ns``/``end_ns`` and ``rank``:
    the parameters the timeline page reads from its URL); the slice fills the middle half of the view."""
    if not has_trace or ts_ns is None:
        return None
    dur = max(0, int(dur_ns or 0))
    pad = max(links.WINDOW_PAD_NS, dur // 2)
    params = {}
    if rank is not None:
        params["rank"] = int(rank)
    if slice_id is not None:
        params["slice"] = int(slice_id)
    params["start_ns"] = int(ts_ns) - pad
    params["end_ns"] = int(ts_ns) + dur + pad
    return f"/runs/{run_id}/timeline?" + urlencode(params)


class Advisor:
    """Builds the findings of one request: the runner, the run id, the rank and what is known about the ranks."""

    def __init__(self, db, run_id: str, rank: int | None):
        self.db, self.run_id = db, run_id
        self.traced = {int(r): bool(t) for r, t in db.rows(RANKS_SQL)}
        ranks = sorted(self.traced)
        self.rank = rank if rank is not None else (ranks[0] if ranks else None)
        self.findings: list[dict] = []
        self.gaps: dict[int, dict] = {}  # slice_id → its gap row (GAP_COLUMNS), read once by gap_checks
        self._source_names: dict[str, dict[int, str]] = {}

    def source_name(self, table: str, rank: int | None) -> str:
        """The file or table ``table``'s rows of ``rank`` came from (the db export's table for a db run)."""
        if table not in self._source_names:
            self._source_names[table] = sources.source_names(self.db, table)
        names = self._source_names[table]
        return names.get(rank) or sources.TABLE_FEEDS[table].text_name

    # ---- building blocks -----------------------------------------------------------------------------------------
    def instance(self, rank: int, slice_id, name, ts_ns, dur_ns, **extra) -> dict:
        out = {"slice_id": None if slice_id is None else int(slice_id), "rank": int(rank), "name": name,
               "ts_ns": ns_str(ts_ns), "dur_ns": None if dur_ns is None else int(dur_ns)}
        out.update(extra)
        return out

    def add(self, category: str, key: str, severity: str, title: str, text: str, *, rank: int | None,
            metrics: dict, source: dict, instances: list[dict], instance_count: int | None = None,
            step=None) -> None:
        total = len(instances) if instance_count is None else int(instance_count)
        self.findings.append({
            "id": f"{category}:{'all' if rank is None else rank}:{key}", "category": category,
            "severity": severity, "title": title, "text": text, "rank": rank, "step": step,
            "metrics": metrics, "source": source, "instances": instances[:MAX_INSTANCES],
            "instance_count": total, "instances_truncated": total > min(len(instances), MAX_INSTANCES),
        })

    def resolve(self) -> None:
        """Instances take name and times from their slice (so a link shows what the row says) and get their link."""
        ids = sorted({i["slice_id"] for f in self.findings for i in f["instances"] if i["slice_id"] is not None})
        known = {}
        if ids:
            for sid, rank, name, ts, dur in self.db.rows(SLICES_SQL, [ids]):
                known[int(sid)] = (int(rank), name, int(ts), int(dur))
        for f in self.findings:
            for inst in f["instances"]:
                s = known.get(inst["slice_id"]) if inst["slice_id"] is not None else None
                if inst["slice_id"] is not None and s is None:
                    inst["slice_id"] = None
                if s is not None:
                    inst["rank"], inst["name"], inst["ts_ns"], inst["dur_ns"] = s[0], s[1], str(s[2]), s[3]
                ts = None if inst["ts_ns"] is None else int(inst["ts_ns"])
                shown = inst["span_ns"] if inst.get("span_ns") is not None else inst["dur_ns"]
                inst["timeline_url"] = timeline_url(self.run_id, inst["rank"], inst["slice_id"], ts, shown,
                                                    self.traced.get(inst["rank"], False))

    def step_range(self, step) -> tuple[int, int]:
        if step is not None:
            row = self.db.rows(STEP_RANGE_SQL, [self.rank, step])
            if row:
                return int(row[0][0]), int(row[0][1])
        return -(2 ** 63), 2 ** 63 - 1

    def lane_instances(self, name: str, step) -> tuple[list[dict], int, int]:
        lo, hi = self.step_range(step)
        rows = self.db.rows(LANE_SLICES_SQL, [self.rank, name, lo, hi, MAX_INSTANCES])
        n = int(rows[0][4]) if rows else 0
        total = int(rows[0][5] or 0) if rows else 0
        return [self.instance(self.rank, sid, nm, ts, dur) for sid, nm, ts, dur, _, _ in rows], n, total

    # ---- checks ------------------------------------------------------------------------------------------------
    def step_checks(self, rows: list[dict], gaps_by_step: dict) -> None:
        for r in rows:
            step = r["step"]
            where = f"Rank {self.rank}" + ("" if step is None else f", step {step}")
            source = {"table": "step_trace", "file": self.source_name("step_trace", self.rank)} \
                if r["source"] == "step_trace" else {"table": "slices", "lane": "Overlap Analysis"}
            if r["source"] == "step_trace":
                src = self.db.rows(STEP_TRACE_ROW_SQL, [self.rank, step])
                source["src_row"] = int(src[0][0]) if src else None
            e2e = r["e2e_ns"]
            base = {"e2e_ns": e2e, "computing_ns": r["computing_ns"],
                    "communication_not_overlapped_ns": r["communication_not_overlapped_ns"], "free_ns": r["free_ns"]}
            free_ratio = r["free_ratio"] or 0
            if free_ratio > HOST_BOUND_RATIO:
                inst, n, lane_ns = self.lane_instances("Free", step)
                self.note_gap_causes(inst)
                causes = gaps_by_step.get(step, {})
                parts = [f"{_ms(causes[c]['total_ns'])} {GAP_CAUSE_WORDS[c]}" for c in GAP_CAUSES if c in causes]
                split = (" Of the gaps of 10 µs or more, " + ", ".join(parts) + ".") if parts else ""
                self.add("host_bound", f"{step}", "critical" if free_ratio > CRITICAL_RATIO else "warning",
                         f"{where}: the device is free {_pct(free_ratio)} of the step",
                         f"{where}: the device was free (neither computing nor communicating) for "
                         f"{_ms(r['free_ns'])} of {_ms(e2e)} (Computing {_ms(r['computing_ns'])} + Communication(Not "
                         f"Overlapped) {_ms(r['communication_not_overlapped_ns'])} + Free), {_pct(free_ratio)}, over "
                         f"{HOST_BOUND_RATIO:.0%}: the device waited for the host to give it work.{split} "
                         "Speed up the host side: fewer small ops, the task queue (TASK_QUEUE_ENABLE=2), CPU "
                         "binding (CPU_AFFINITY_CONF), no synchronizing calls such as .item() inside the step.",
                         rank=self.rank, step=step, source=source, instances=inst, instance_count=n,
                         metrics={**base, "free_ratio": free_ratio, "free_slices": n, "free_slices_ns": lane_ns,
                                  "gaps": {c: causes[c] for c in GAP_CAUSES if c in causes}})
            comm_ratio = r["communication_ratio"] or 0
            if comm_ratio > EXPOSED_COMM_RATIO:
                inst, n, lane_ns = self.lane_instances("Communication(Not Overlapped)", step)
                self.add("exposed_communication", f"{step}", "critical" if comm_ratio > CRITICAL_RATIO else "warning",
                         f"{where}: {_pct(comm_ratio)} of the step is communication not overlapped",
                         f"{where}: {_ms(r['communication_not_overlapped_ns'])} of communication ran while nothing "
                         f"computed, {_pct(comm_ratio)} of the step's {_ms(e2e)} (over {EXPOSED_COMM_RATIO:.0%}); "
                         f"{_ms(r['overlapped_ns'])} of communication was hidden behind computation. Overlap it with "
                         "compute (e.g. DDP bucketing, prefetching all-gathers), or find the rank the others wait for "
                         "(Slow rank) — a rank that arrives late makes every other rank's communication longer.",
                         rank=self.rank, step=step, source=source, instances=inst, instance_count=n,
                         metrics={**base, "communication_ratio": comm_ratio,
                                  "overlapped_ns": r["overlapped_ns"], "slices": n, "slices_ns": lane_ns})

    def note_gap_causes(self, instances: list[dict]) -> None:
        """Free slices of a host-bound step get the cause of their gap (shorter gaps have none)."""
        for inst in instances:
            g = self.gaps.get(inst["slice_id"])
            inst["cause"] = None if g is None else g["cause"]
            inst["detail"] = f"{g['cause']}: {_gap_detail(g['cause'], g['host_name'], g['cann_ns'], g['dur_ns'])}" \
                if g is not None else f"gap under {_us(MIN_GAP_NS)}"

    def gap_checks(self, e2e: int) -> dict:
        """The dispatch-gap findings (a cause is a warning when its gaps add up to ``GAP_WARNING_SHARE`` of the
        rank's end-to-end time ``e2e``); returns ``{step: {cause: {count, total_ns}}}`` for the host-bound text.
        The gaps are classified by one query (:data:`GAP_ROWS_SQL`); totals, the longest gaps and the causes the
        host-bound findings quote all come from its rows."""
        has_cann = bool(self.db.rows(HAS_CANN_SQL, [self.rank])[0][0])
        params = [self.rank, MIN_GAP_NS, SYNC_API_MARKER, self.rank, SYNC_API_MARKER, list(WAIT_TASK_TYPES),
                  has_cann]
        self.gaps = {int(r[0]): dict(zip(GAP_COLUMNS, r)) for r in self.db.rows(GAP_ROWS_SQL, params)}
        by_step: dict = {}
        totals: dict = {}
        for g in self.gaps.values():
            step = None if g["step"] is None else int(g["step"])
            for bucket in (by_step.setdefault(step, {}), totals):
                t = bucket.setdefault(g["cause"], {"count": 0, "total_ns": 0})
                t["count"] += 1
                t["total_ns"] += int(g["dur_ns"])
        if not totals:
            return by_step
        by_step = {step: dict(sorted(causes.items())) for step, causes in by_step.items()}
        top: dict = {}
        for g in sorted(self.gaps.values(), key=lambda g: (g["cause"], -g["dur_ns"], g["ts_ns"])):
            picked = top.setdefault(g["cause"], [])
            if len(picked) >= MAX_INSTANCES:
                continue
            detail = _gap_detail(g["cause"], g["host_name"], g["cann_ns"], g["dur_ns"])
            picked.append(self.instance(
                self.rank, g["slice_id"], "Free", g["ts_ns"], g["dur_ns"], step=g["step"], cause=g["cause"],
                host_slice_id=g["host_id"], host_name=g["host_name"], sync_ns=_i(g["sync_ns"]),
                device_wait_ns=_i(g["device_wait_ns"]), cann_ns=_i(g["cann_ns"]), detail=detail))
        free_n, free_ns = self.db.rows(FREE_TOTAL_SQL, [self.rank])[0]
        free_ns = _i(free_ns)
        for cause in GAP_CAUSES:
            if cause not in totals:
                continue
            t = totals[cause]
            share = ratio(t["total_ns"], free_ns) or 0
            severity = "warning" if e2e and t["total_ns"] > GAP_WARNING_SHARE * e2e else "info"
            self.add("dispatch", cause, severity,
                     f"Rank {self.rank}: {_count(t['count'], 'gap')}, {_ms(t['total_ns'])} — "
                     f"{GAP_CAUSE_TITLES[cause]}",
                     f"Rank {self.rank}: {_count(t['count'], 'device gap')} of {_us(MIN_GAP_NS)} or more, "
                     f"{_ms(t['total_ns'])} "
                     f"in all ({_pct(share)} of the rank's {_ms(free_ns)} of Free time), {GAP_CAUSE_WORDS[cause]}. "
                     f"{GAP_CAUSE_ADVICE[cause]}",
                     rank=self.rank, source={"table": "slices", "lane": "Overlap Analysis / Free",
                                             "host": "CANN lane, Ascend Hardware wait tasks"},
                     instances=top.get(cause, []), instance_count=t["count"],
                     metrics={"count": t["count"], "total_ns": t["total_ns"], "free_ns": free_ns,
                              "free_slices": int(free_n or 0), "share_of_free": share, "min_gap_ns": MIN_GAP_NS})
        return by_step

    def aicpu(self) -> None:
        rows = self.db.rows(AICPU_SQL, [self.rank, MAX_INSTANCES])
        if not rows:
            return
        n, total = int(rows[0][5]), _i(rows[0][6])
        compute = _i(self.db.rows(COMPUTE_KERNELS_SQL, [self.rank])[0][0])
        share = ratio(total, compute) or 0
        types = self.db.rows(AICPU_TYPES_SQL, [self.rank])
        matches = links.match_slices(self.db, self.rank, [(r[3], r[1]) for r in rows], links.KERNEL_TOLERANCE_NS) \
            if self.traced.get(self.rank) else {}
        where = self.source_name("kernels", self.rank)
        inst = [self.instance(self.rank, matches.get((int(start), name)) if start is not None else None, name, start,
                              dur, src_row=int(src_row), type=typ, detail=f"{typ} · {where} row {src_row}")
                for src_row, name, typ, start, dur, _, _ in rows]
        top = ", ".join(f"{t} ×{c} ({_ms(ns)})" for t, c, ns in types)
        self.add("aicpu", "all", "warning" if share >= AICPU_WARNING_SHARE else "info",
                 f"Rank {self.rank}: {_count(n, 'AI_CPU kernel')}, {_ms(total)}",
                 f"Rank {self.rank}: {_count(n, 'kernel')} ran on the AI CPU for {_ms(total)}, {_pct(share)} of the "
                 f"{_ms(compute)} of computing kernels; the largest: {top}. AI CPU kernels are much slower than AI "
                 "Core ones and break the pipeline: change the dtype or shape that sends the op to the AI CPU (often "
                 "int64 or dynamic shapes), or use an equivalent op that has an AI Core kernel.",
                 rank=self.rank, source={"table": "kernels", "file": self.source_name("kernels", self.rank),
                                         "where": "Accelerator Core = AI_CPU"},
                 instances=inst, instance_count=n,
                 metrics={"count": n, "total_ns": total, "compute_kernels_ns": compute, "share": share,
                          "types": [{"type": t, "count": int(c), "total_ns": _i(ns)} for t, c, ns in types]})

    def affinity(self) -> None:
        rules = [(rid, tuple(_alts(p) for p in seq), repl, what) for rid, seq, repl, what in AFFINITY_RULES]
        rules.sort(key=lambda r: -len(r[1]))
        longest = max(len(r[1]) for r in rules)
        firsts = sorted({name for r in rules for name in r[1][0]})
        rows = self.db.rows(AFFINITY_SQL, [self.rank, longest - 1, firsts, MAX_AFFINITY_CANDIDATES + 1])
        truncated = len(rows) > MAX_AFFINITY_CANDIDATES
        used: set[int] = set()
        hits: dict[str, list] = {}
        for first_id, _track, ts, names, ids, ends in rows[:MAX_AFFINITY_CANDIDATES]:
            if first_id in used:
                continue
            for rid, seq, _, _ in rules:
                if len(names) >= len(seq) and all(names[i] in seq[i] for i in range(len(seq))) \
                        and not used.intersection(ids[:len(seq)]):
                    used.update(ids[:len(seq)])
                    hits.setdefault(rid, []).append((int(ts), int(ends[len(seq) - 1]), list(ids[:len(seq)]),
                                                     list(names[:len(seq)])))
                    break
        for rid, seq, repl, what in rules:
            found = hits.get(rid)
            if not found:
                continue
            host_ns = sum(e - s for s, e, _, _ in found)
            pattern = " → ".join("|".join(sorted(p)) for p in seq)
            inst = [self.instance(self.rank, ids[0], names[0], s, None, end_ns=str(e), span_ns=e - s,
                                  slice_ids=[int(i) for i in ids], ops=names, detail=" → ".join(names))
                    for s, e, ids, names in found]
            self.add("affinity_api", rid, "info",
                     f"Rank {self.rank}: {len(found):,}× {what} → {repl}",
                     f"Rank {self.rank}: {len(found):,} times the torch ops {pattern} run one after another "
                     f"(top-level ops of one thread), {_ms(host_ns)} of host time from the first op's start to the "
                     f"last op's end. Together they compute {what}; {repl} does it in one fused call: fewer "
                     "launches and fewer round trips through device memory." + (
                         " (Only the first candidates were searched.)" if truncated else ""),
                     rank=self.rank, source={"table": "slices", "lane": "Python", "rule": rid},
                     instances=inst, metrics={"count": len(found), "host_span_ns": host_ns, "rule": rid,
                                              "pattern": [sorted(p) for p in seq], "replacement": repl,
                                              "candidates_truncated": truncated})

    def fusible(self) -> None:
        if not self.traced.get(self.rank):
            return
        rows = self.db.rows(FUSIBLE_SQL, [SMALL_KERNEL_NS, self.rank, list(COMPUTE_TASK_TYPES), MIN_FUSE_KERNELS,
                                          MAX_FUSE_NAMES, MIN_FUSE_REPEATS, MAX_FUSE_FINDINGS])
        for key, n, occ, busy, span, first_ids, starts, spans, busy_each, _tracks in rows:
            names = list(key)
            label = " → ".join(names) + (f" → … ({n} kernels)" if n > len(names) else "")
            inst = [self.instance(self.rank, fid, names[0], s, None, end_ns=str(int(s) + int(sp)), span_ns=int(sp),
                                  busy_ns=int(b), kernels=int(n), detail=f"{n} kernels, {_us(b)} busy in {_us(sp)}")
                    for fid, s, sp, b in zip(first_ids, starts, spans, busy_each)]
            self.add("fusible", _digest(names, n), "info",
                     f"Rank {self.rank}: {occ:,}× " + " → ".join(_short(x) for x in names[:4])
                     + (" → …" if n > 4 else "") + f" ({n} small kernels)",
                     f"Rank {self.rank}: the same {n} kernels ({label}), each under {_us(SMALL_KERNEL_NS)}, run back "
                     f"to back on one stream {occ:,} times: {_ms(busy)} of kernel time spread over {_ms(span)}. Each "
                     "launch costs host time and leaves a gap on the device; one fused kernel (a fused torch_npu "
                     "API, or a custom op) would launch once.",
                     rank=self.rank, source={"table": "slices", "lane": "Ascend Hardware"}, instances=inst,
                     metrics={"kernels": int(n), "names": names, "occurrences": int(occ), "busy_ns": _i(busy),
                              "span_ns": _i(span), "small_kernel_ns": SMALL_KERNEL_NS})

    def slow_rank(self) -> None:
        totals = cq.rank_totals(self.db)
        rows = [r for r in totals["rows"] if not r["elapse_only"]]  # a rank of elapse only says nothing of waits
        if len(rows) < 2:
            return
        waits = {r["rank"]: r["wait_time_ns"] + r["synchronization_time_ns"] for r in rows}
        most = max(rows, key=lambda r: (waits[r["rank"]], -r["rank"]))
        least = min(rows, key=lambda r: (waits[r["rank"]], r["rank"]))
        spread = waits[most["rank"]] - waits[least["rank"]]
        if not most["elapse_time_ns"] or spread <= SLOW_RANK_SPREAD * most["elapse_time_ns"]:
            return
        rk = most["rank"]
        ops = self.db.rows(WAIT_OPS_SQL, [rk, MAX_INSTANCES])
        matches = links.match_slices(self.db, rk, [(o[1], o[0]) for o in ops], links.COMM_OP_TOLERANCE_NS,
                                     prefer=("communication", "hardware")) if self.traced.get(rk) else {}
        inst = [self.instance(rk, matches.get((int(s), name)), name, s, el, wait_time_ns=_i(w),
                              synchronization_time_ns=_i(sy), detail=f"wait {_ms(w)} + sync {_ms(sy)}")
                for name, s, el, w, sy, _ in ops]
        share = ratio(spread, most["elapse_time_ns"])
        self.add("slow_rank", "wait", "warning" if share > 4 * SLOW_RANK_SPREAD else "info",
                 f"Rank {least['rank']} is the slow rank: rank {rk} waits {_ms(spread)} more for it",
                 f"In collectives rank {rk} waits the most: Wait {_ms(most['wait_time_ns'])} + Synchronization "
                 f"{_ms(most['synchronization_time_ns'])} over {most['ops']} ops ({_ms(most['elapse_time_ns'])} of "
                 f"communication), against {_ms(waits[least['rank']])} on rank {least['rank']}, which waits the least: "
                 f"the others wait for rank {least['rank']} to arrive ({_ms(spread)}, {_pct(share)} of rank {rk}'s "
                 f"communication time). Look at what rank {least['rank']} does before its collectives (computation, "
                 "host dispatch, data loading).",
                 rank=None, source={"table": "comm_ops", "file": self.source_name("comm_ops", least["rank"])},
                 instances=inst,
                 instance_count=int(ops[0][5]) if ops else 0,
                 metrics={"waiting_rank": rk, "slow_rank": least["rank"], "spread_ns": spread, "share": share,
                          "per_rank": [{"rank": r["rank"], "ops": r["ops"], "elapse_time_ns": r["elapse_time_ns"],
                                        "wait_time_ns": r["wait_time_ns"],
                                        "synchronization_time_ns": r["synchronization_time_ns"]} for r in rows]})

    def slow_links(self) -> None:
        for link in cq.slow_links(self.db):
            t, bw, median = link["transport_type"], link["bandwidth_gbps"], link["median_gbps"]
            typical = TYPICAL_GBPS.get(t)
            below_median = link["links"] > 1 and bw < SLOW_LINK_RATIO * median
            below_typical = typical is not None and bw < SLOW_LINK_RATIO * typical
            if not (below_median or below_typical):
                continue
            src = int(link["src_rank"])
            ops = self.db.rows(LINK_OPS_SQL, [src, t, MAX_INSTANCES]) if src in self.traced else []
            matches = links.match_slices(self.db, src, [(o[1], o[0]) for o in ops], links.COMM_OP_TOLERANCE_NS,
                                         prefer=("communication", "hardware")) if self.traced.get(src) else {}
            inst = [self.instance(src, matches.get((int(s), name)), name, s, el, bandwidth_gbps=b,
                                  transit_size_mb=mb, detail=f"{t} {b:.2f} GB/s, {mb:.2f} MB")
                    for name, s, el, b, mb, _tt, _ in ops]
            against = [f"{bw / median:.0%} of the median {median:.2f} GB/s of {link['links']} {t} links"
                       if link["links"] > 1 else None,
                       f"{bw / typical:.0%} of the typical {typical:.1f} GB/s of {t}" if typical else None]
            self.add("slow_rank", f"link-{t}", "warning",
                     f"Slow {t} link {src} → {link['dst_rank']}: {bw:.2f} GB/s",
                     f"The {t} link from rank {src} to rank {link['dst_rank']} moved {link['transit_size_mb']:.2f} MB "
                     f"in {_ms(link['transit_time_ns'])}: {bw:.2f} GB/s, " + " and ".join(a for a in against if a)
                     + ". Check that link (cabling, contention with other traffic, its NIC or HCCS port); the "
                     f"instances are rank {src}'s ops that used {t}, slowest first.",
                     rank=None, source={"table": "comm_matrix", "file": self.source_name("comm_matrix", src)},
                     instances=inst, instance_count=int(ops[0][6]) if ops else 0,
                     metrics={**link, "typical_gbps": typical, "below_median": below_median,
                              "below_typical": below_typical})

    # ---- the whole answer ------------------------------------------------------------------------------------------
    def run(self) -> dict:
        if self.rank is not None:
            steps = [r for r in sq.breakdown(self.db) if r["rank"] == self.rank]
            gaps_by_step = self.gap_checks(sum(r["e2e_ns"] or 0 for r in steps))
            self.step_checks(steps, gaps_by_step)
            self.aicpu()
            self.affinity()
            self.fusible()
        self.slow_rank()
        self.slow_links()
        self.findings.extend(serving_advice.findings(self.db))
        order = {c: i for i, (c, _, _) in enumerate(CATEGORIES)}
        self.findings.sort(key=lambda f: (order[f["category"]], SEVERITY_ORDER[f["severity"]],
                                          -1 if f["step"] is None else f["step"]))
        truncated = len(self.findings) > MAX_FINDINGS
        self.findings = self.findings[:MAX_FINDINGS]
        self.resolve()
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f["category"]] = counts.get(f["category"], 0) + 1
        return {
            "rank": self.rank, "ranks": sorted(self.traced), "has_trace": self.traced.get(self.rank, False),
            "categories": [{"id": c, "label": label, "description": d, "count": counts.get(c, 0)}
                           for c, label, d in CATEGORIES],
            "findings": self.findings, "truncated": truncated,
            "rules": [{"id": rid, "pattern": [sorted(_alts(p)) for p in seq], "replacement": repl, "what": what}
                      for rid, seq, repl, what in AFFINITY_RULES],
        }


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


def _gap_detail(cause: str, host_name: str | None, cann_ns, dur_ns) -> str:
    """What the host did during a gap, in a few words."""
    busy = f"CANN busy {_pct(ratio(cann_ns, dur_ns))} of it"
    if cause == "waiting":
        return f"waiting in {host_name}" if host_name else "device wait task"
    if cause == "launch":
        return f"{busy}, mostly in {host_name}"
    if cause == "queue":
        return busy + (f" (in {host_name})" if host_name else "")
    return "no CANN lane"


def _short(kernel: str) -> str:
    """A kernel's op type, for titles: the last part of its name (``aclnnMuls_MulAiCore_Mul`` is ``Mul``)."""
    return kernel.rsplit("_", 1)[-1] or kernel


def _digest(names: list[str], n: int) -> str:
    """A stable key for a kernel sequence (Python's own hash of a string changes between processes)."""
    return hashlib.sha1(("\x1f".join(names) + f"\x1e{n}").encode()).hexdigest()[:12]


def _alts(p) -> tuple[str, ...]:
    return (p,) if isinstance(p, str) else tuple(p)


def advice(db, run_id: str, rank: int | None = None) -> dict:
    """Findings of ``rank`` (default: the first rank) and the cross-rank ones (slow rank, slow links)."""
    return Advisor(db, run_id, rank).run()
