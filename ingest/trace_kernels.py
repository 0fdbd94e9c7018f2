"""Kernel rows from the trace, for a rank that has a timeline but no kernel table (no ``kernel_details.csv``, no
db export, no msprof ``op_summary``): the Operator, Summary, Advice and Compare views then count the tasks the
System View counts, instead of saying "no kernels".

Rows, as kernel_details.csv would give them (FORMATS.md §4.1), numbered by start:

* each Ascend Hardware compute task (``Task Type`` one of :data:`COMPUTE_TASK_TYPES`, or a task that names its
  ``Accelerator Core``): ``name`` = the task's name, ``accelerator_core`` = its Accelerator Core or Task Type,
  ``type`` NULL (the trace does not name the operator type), ``stream_id`` / ``task_id`` from the lane and args;
* each communication operator (the ``Group … Communication`` lanes, not the planes) as accelerator core ``HCCL``;
* ``wait_time_ns`` by the CSV's rule (start minus the end of the previous row in start order, never below 0),
  ``step_id`` = the step whose device range holds the start.

One warning per such rank (file ``kernel_details.csv``) says where its kernels came from and what they lack.
"""

from __future__ import annotations

COMPUTE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE")
WARNING_FILE = "kernel_details.csv"

RANKS_SQL = """
SELECT r.rank FROM ranks r
WHERE r.has_trace AND NOT EXISTS (SELECT 1 FROM kernels k WHERE k.rank = r.rank)
ORDER BY r.rank
"""
ROWS_SQL = """
WITH t AS (
    SELECT s.ts_ns AS start_ns, s.dur_ns AS duration_ns, s.name,
           coalesce(nullif(s.args->>'Accelerator Core', 'N/A'), s.args->>'Task Type') AS accelerator_core,
           tr.tid AS stream_id, TRY_CAST(s.args->>'Task Id' AS BIGINT) AS task_id, 0 AS part, s.slice_id
    FROM slices s JOIN tracks tr ON tr.track_id = s.track_id
    WHERE s.rank = $rank AND tr.kind = 'hardware'
      AND (list_contains($types, s.args->>'Task Type') OR s.args->>'Accelerator Core' IS NOT NULL)
    UNION ALL
    SELECT s.ts_ns, s.dur_ns, s.name, 'HCCL', NULL, NULL, 1, s.slice_id
    FROM slices s JOIN tracks tr ON tr.track_id = s.track_id
    WHERE s.rank = $rank AND tr.kind = 'communication' AND s.depth = 0
      AND NOT starts_with(coalesce(tr.thread_name, ''), 'Plane')),
k AS (
    SELECT *, greatest(start_ns - coalesce(lag(start_ns + duration_ns) OVER w, start_ns), 0) AS wait_time_ns,
           row_number() OVER w AS src_row
    FROM t WINDOW w AS (ORDER BY start_ns, part, slice_id))
SELECT CAST($rank AS INTEGER) AS rank, CAST(src_row AS INTEGER) AS src_row,
       (SELECT max(st.step) FROM steps st
        WHERE st.rank = $rank AND k.start_ns BETWEEN st.device_start_ns AND st.device_end_ns) AS step_id,
       name, NULL::VARCHAR AS type, accelerator_core, start_ns, duration_ns, wait_time_ns, stream_id, task_id
FROM k ORDER BY src_row
"""
COLUMNS_SQL = "SELECT column_name FROM duckdb_columns() WHERE table_name = 'kernels' AND schema_name = 'main'"
ROW_COLUMNS = ("rank", "src_row", "step_id", "name", "type", "accelerator_core", "start_ns", "duration_ns",
               "wait_time_ns", "stream_id", "task_id")


def add_trace_kernels(con) -> list[tuple[int, str, str]]:
    """Fill ``kernels`` for each traced rank without any; return the warnings ``(rank, file, message)``."""
    ranks = [r for (r,) in con.execute(RANKS_SQL).fetchall()]
    if not ranks:
        return []
    have = {c for (c,) in con.execute(COLUMNS_SQL).fetchall()}
    cols = [c for c in ROW_COLUMNS if c in have]
    notes = []
    for rank in ranks:
        con.execute(f"INSERT INTO kernels ({', '.join(cols)}) SELECT {', '.join(cols)} FROM ({ROWS_SQL})",
                    {"rank": rank, "types": list(COMPUTE_TASK_TYPES)})
        tasks, comm = con.execute("SELECT count(*) FILTER (WHERE accelerator_core <> 'HCCL'), "
                                  "count(*) FILTER (WHERE accelerator_core = 'HCCL') FROM kernels WHERE rank = ?",
                                  [rank]).fetchone()
        if tasks or comm:
            notes.append((rank, WARNING_FILE, f"not in this rank's output: its kernels are the trace's {tasks} "
                                              f"Ascend Hardware compute tasks and {comm} communication operators "
                                              "(named as in the trace; no operator type, shapes or PMU metrics)"))
    return notes
