"""The per-rank, per-step time breakdown, shared by ingest (``cluster_steps``) and the server (Summary, Advice,
Compare): one definition, owned by ingest, because ``ingest/`` never imports ``server/``.

The breakdown comes from ``step_trace`` (the profiler's ``step_trace_time.csv``, or analysis.db's
``StepTraceTime``) when a rank has it, otherwise it is derived from the Overlap Analysis slices exactly as
torch_npu does (FORMATS.md §6.1):

* each slice named Computing / Communication / Communication(Not Overlapped) / Free is assigned to the step whose
  device range ``[device_start_ns, device_end_ns)`` contains its start, and its whole duration is added;
* communication op slices named ``hcom_receive*`` add to Bubble;
* Overlapped = Communication − Communication(Not Overlapped);
  Communication(Not Overlapped and Exclude Receive) = max(Communication(Not Overlapped) − Bubble, 0);
  Stage = (last end − first start of the step's slices) − Bubble;
  Preparing = first Computing/Communication start − the step's host start (the first torch op without steps);
* msprof's iterations (steps named ``Iteration <n>``, ``ingest.readers.msproftimeline``) are measured as msprof
  measures them: by their range (its Iteration Time). msprof bounds an iteration's Overlap Analysis lane by its
  first and last task, some µs inside the range, and its Free is the bounds less compute ∪ communication, so an
  iteration's Free = its range − Computing − Communication(Not Overlapped) (the lane's Free plus the idle time
  before the first and after the last task), and it has no Preparing (no host step starts it).

Every function takes a *runner*: anything with ``dicts(sql, params)`` and ``rows(sql, params)`` (the server's
request runner, or :class:`ConnRunner` over a plain DuckDB connection).
"""

from __future__ import annotations

E2E_PARTS = ("computing_ns", "communication_not_overlapped_ns", "free_ns")
CATEGORIES = ("computing_ns", "communication_not_overlapped_ns", "overlapped_ns", "communication_ns", "free_ns",
              "preparing_ns", "stage_ns", "bubble_ns", "communication_not_overlapped_and_exclude_receive_ns")

# only the step_trace the query reads: a sharded run's connection attaches other databases holding one too
STEP_TRACE_COLUMNS_SQL = """
SELECT column_name FROM duckdb_columns()
WHERE table_name = 'step_trace' AND database_name = current_database() AND schema_name = current_schema()
"""
STEP_TRACE_SQL = """
SELECT rank, step, computing_ns, communication_not_overlapped_ns, overlapped_ns, communication_ns, free_ns,
       {preparing} AS preparing_ns, stage_ns, bubble_ns, communication_not_overlapped_and_exclude_receive_ns
FROM step_trace ORDER BY rank, step NULLS FIRST
"""
OVERLAP_EVENTS_CTE = """
WITH ev AS (
  SELECT s.rank, s.name AS cat, s.ts_ns, s.dur_ns
  FROM slices s JOIN tracks t ON t.track_id = s.track_id
  WHERE t.kind = 'overlap' AND s.name IN ('Computing', 'Communication', 'Communication(Not Overlapped)', 'Free')
  UNION ALL
  SELECT s.rank, 'Bubble' AS cat, s.ts_ns, s.dur_ns
  FROM slices s JOIN tracks t ON t.track_id = s.track_id
  WHERE t.kind = 'communication' AND starts_with(s.name, 'hcom_receive')
)"""
DERIVED_AGG = """
  sum(dur_ns) FILTER (WHERE cat = 'Computing') AS computing_ns,
  sum(dur_ns) FILTER (WHERE cat = 'Communication(Not Overlapped)') AS communication_not_overlapped_ns,
  sum(dur_ns) FILTER (WHERE cat = 'Communication') AS communication_ns,
  sum(dur_ns) FILTER (WHERE cat = 'Free') AS free_ns,
  sum(dur_ns) FILTER (WHERE cat = 'Bubble') AS bubble_ns,
  max(ts_ns + dur_ns) - min(ts_ns) AS span_ns,
  min(ts_ns) FILTER (WHERE cat IN ('Computing', 'Communication')) AS first_task_ns"""
# Ranks with steps: each slice goes to the step whose device range holds its start.
DERIVED_STEPS_SQL = OVERLAP_EVENTS_CTE + """,
a AS (
  SELECT st.rank, st.step, st.host_start_ns, ev.cat, ev.ts_ns, ev.dur_ns,
         CASE WHEN starts_with(st.name, 'Iteration ') THEN st.device_end_ns - st.device_start_ns END AS iteration_ns
  FROM ev JOIN steps st ON st.rank = ev.rank AND ev.ts_ns >= st.device_start_ns AND ev.ts_ns < st.device_end_ns
)
SELECT rank, step, any_value(host_start_ns) AS host_start_ns, any_value(iteration_ns) AS iteration_ns, """ + \
    DERIVED_AGG + """
FROM a GROUP BY rank, step ORDER BY rank, step
"""
# Ranks without steps: one row over everything; Preparing counts from the first torch op.
DERIVED_NO_STEPS_SQL = OVERLAP_EVENTS_CTE + """
SELECT ev.rank, NULL::BIGINT AS step, NULL::BIGINT AS iteration_ns,
       (SELECT min(s.ts_ns) FROM slices s JOIN tracks t ON t.track_id = s.track_id
        WHERE t.kind = 'python' AND s.rank = ev.rank AND s.cat = 'cpu_op') AS host_start_ns, """ + DERIVED_AGG + """
FROM ev WHERE ev.rank NOT IN (SELECT rank FROM steps) GROUP BY ev.rank ORDER BY ev.rank
"""


class ConnRunner:
    """A runner over a DuckDB connection."""

    def __init__(self, conn):
        self.conn = conn

    def rows(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        return self.conn.execute(sql, list(params)).fetchall()

    def dicts(self, sql: str, params: list | tuple = ()) -> list[dict]:
        cur = self.conn.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]


def _int(v) -> int | None:
    return None if v is None else int(round(v))


def _ratio(part, whole) -> float | None:
    return None if not whole else float(part or 0) / float(whole)


RANK_IDS_SQL = "SELECT rank FROM ranks"


def step_trace_rows(db) -> list[dict]:
    """The rows of ``step_trace`` (the profiler's own numbers), each with ``source`` = ``step_trace``."""
    cols = {r[0] for r in db.rows(STEP_TRACE_COLUMNS_SQL)}
    preparing = "preparing_ns" if "preparing_ns" in cols else "NULL::BIGINT"
    rows = db.dicts(STEP_TRACE_SQL.format(preparing=preparing))
    for r in rows:
        r["source"] = "step_trace"
    return rows


def derived_rows(db) -> list[dict]:
    """The breakdown recomputed from the Overlap Analysis slices (every rank that has them)."""
    out = []
    for r in db.dicts(DERIVED_STEPS_SQL) + db.dicts(DERIVED_NO_STEPS_SQL):
        comm = int(r["communication_ns"] or 0)
        cno = int(r["communication_not_overlapped_ns"] or 0)
        bubble = int(r["bubble_ns"] or 0)
        host = r["host_start_ns"]
        first = r["first_task_ns"]
        free = int(r["free_ns"] or 0)
        if r["iteration_ns"] is not None:  # an msprof iteration: its range is its time (module note)
            free = max(int(r["iteration_ns"]) - int(r["computing_ns"] or 0) - cno, 0)
            host = None
        out.append({
            "rank": int(r["rank"]), "step": r["step"],
            "computing_ns": int(r["computing_ns"] or 0),
            "communication_not_overlapped_ns": cno,
            "overlapped_ns": comm - cno,
            "communication_ns": comm,
            "free_ns": free,
            "preparing_ns": None if host is None or first is None else int(first) - int(host),
            "stage_ns": int(r["span_ns"] or 0) - bubble,
            "bubble_ns": bubble,
            "communication_not_overlapped_and_exclude_receive_ns": max(cno - bubble, 0),
            "source": "overlap",
        })
    out.sort(key=lambda r: (r["rank"], -1 if r["step"] is None else r["step"]))
    return out


def _complete(row: dict) -> bool:
    """Whether the three parts of a step (Computing, Communication(Not Overlapped), Free) are all known."""
    return all(row.get(k) is not None for k in E2E_PARTS)


def breakdown(db, source: str = "auto") -> list[dict]:
    """Rows per (rank, step). ``source``: ``step_trace``, ``overlap`` or ``auto`` (step_trace where a rank has it,
    the Overlap Analysis slices otherwise, and instead of a step row missing a part of e2e when the rank has the
    lane). Each row has the CATEGORIES (ns), ``e2e_ns`` = Computing + Communication(Not Overlapped) + Free,
    ``computing_not_overlapped_ns`` and the three ratios of e2e; a row missing one of those parts is
    ``incomplete``, with e2e and the ratios None."""
    if source == "step_trace":
        rows = step_trace_rows(db)
    elif source == "overlap":
        rows = derived_rows(db)
    else:
        rows = step_trace_rows(db)
        have = {r["rank"] for r in rows}
        # the derivation scans every Overlap Analysis slice: only when a rank lacks its step table or a value in it
        lacking = any(not _complete(r) for r in rows) or any(r[0] not in have for r in db.rows(RANK_IDS_SQL))
        derived = derived_rows(db) if lacking else []
        # a rank whose step table misses a value (a cell that was not a number) is derived from its lane instead,
        # when it has one: an empty Computing or Free would make its ratios and findings wrong
        lane_ranks = {r["rank"] for r in derived}
        replaced = {r["rank"] for r in rows if not _complete(r) and r["rank"] in lane_ranks}
        rows = [r for r in rows if r["rank"] not in replaced]
        have = {r["rank"] for r in rows}
        rows += [r for r in derived if r["rank"] not in have]
        rows.sort(key=lambda r: (r["rank"], -1 if r["step"] is None else r["step"]))
    for r in rows:
        for k in CATEGORIES:
            r[k] = _int(r.get(k))
        r["step"] = None if r["step"] is None else int(r["step"])
        r["incomplete"] = not _complete(r)
        e2e = None if r["incomplete"] else \
            r["computing_ns"] + r["communication_not_overlapped_ns"] + r["free_ns"]
        r["e2e_ns"] = e2e
        r["computing_not_overlapped_ns"] = None if r["computing_ns"] is None else \
            r["computing_ns"] - (r["overlapped_ns"] or 0)
        r["computing_ratio"] = _ratio(r["computing_ns"], e2e)
        r["communication_ratio"] = _ratio(r["communication_not_overlapped_ns"], e2e)
        r["free_ratio"] = _ratio(r["free_ns"], e2e)
    return rows
