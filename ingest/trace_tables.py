"""Tables from the trace for a rank whose output lacks them, so the views show what the timeline holds instead of
"no data"; each such rank gets a warning naming the missing file and what the trace cannot give.

Kernels, for a rank with a timeline but no kernel table (no ``kernel_details.csv``, no db export, no msprof
``op_summary``: a trace-only rank): the Operator, Summary, Advice and Compare views then count the tasks the System
View counts. Rows, as kernel_details.csv would give them (FORMATS.md §4.1), numbered by start:

* each Ascend Hardware compute task (``Task Type`` one of :data:`COMPUTE_TASK_TYPES`, or a task that names its
  ``Accelerator Core``): ``name`` = the task's name, ``accelerator_core`` = its Accelerator Core or Task Type,
  ``type`` NULL (the trace does not name the operator type), ``stream_id`` / ``task_id`` from the lane and args;
* each communication operator (the ``Group … Communication`` lanes, not the planes) as accelerator core ``HCCL``;
* ``wait_time_ns`` by the CSV's rule (start minus the end of the previous row in start order, never below 0),
  ``step_id`` = the step whose device range holds the start.

Communication ops, for a rank whose timeline has communication operators but which has no communication rows
(Level0 writes no communication.json): one ``comm_ops`` row per operator with its Elapse (the slice's duration),
step and group (from the lane, ``Group <id> Communication``, or the db export's ``group`` arg); Transit, Wait,
Synchronization and Idle stay NULL, and there is no bandwidth or matrix: CANN's communication analysis computes
them, and only communication.json / analysis.db carry them.
"""

from __future__ import annotations

COMPUTE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE")
P2P_PREFIXES = ("hcom_send", "hcom_receive", "hcom_batchsendrecv")  # FORMATS.md §5
# every warning about rows made here starts so, under the file the rank lacked (the server finds the ranks by it)
MISSING = "not in this rank's output"
TRACE_WARNING_FILES = {"kernels": "kernel_details.csv", "comm_ops": "communication.json"}

# traced ranks with no row in a table
LACKING_SQL = """
SELECT r.rank FROM ranks r
WHERE r.has_trace AND NOT EXISTS (SELECT 1 FROM {table} x WHERE x.rank = r.rank)
ORDER BY r.rank
"""
# the rank's communication operators: the slices of its group lanes (the planes hold their tasks)
COMM_OP_SLICES = """FROM slices s JOIN tracks tr ON tr.track_id = s.track_id
    WHERE s.rank = $rank AND tr.kind = 'communication' AND s.depth = 0
      AND NOT starts_with(coalesce(tr.thread_name, ''), 'Plane')"""
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
    """ + COMM_OP_SLICES + """),
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


COMM_OPS_SQL = """
WITH o AS (
    SELECT s.name, s.ts_ns, s.dur_ns,
           coalesce(s.args->>'group', nullif(regexp_extract(tr.thread_name, '^Group (.*) Communication$', 1), ''))
               AS group_id,
           (SELECT max(st.step) FROM steps st
            WHERE st.rank = $rank AND s.ts_ns >= st.device_start_ns AND s.ts_ns < st.device_end_ns) AS step_id,
           EXISTS (SELECT 1 FROM steps st WHERE st.rank = $rank) AS has_steps
    """ + COMM_OP_SLICES + """)
SELECT CAST($rank AS INTEGER) AS rank,
       CASE WHEN step_id IS NOT NULL THEN 'step' || step_id WHEN NOT has_steps THEN 'step' END AS step, step_id,
       CASE WHEN list_has_any([starts_with(lower(name), p) FOR p IN $p2p], [true]) THEN 'p2p' ELSE 'collective' END
           AS comm_type,
       name || '@' || coalesce(group_id, '') AS op_key, name AS op_name, group_id, false AS is_total,
       ts_ns AS start_ns, dur_ns AS elapse_time_ns
FROM o ORDER BY ts_ns, name
"""


def fill_from_trace(con) -> list[tuple[int, str, str]]:
    """Add the kernels and communication ops of the ranks that lack them; return the warnings
    ``(rank, file, message)``."""
    return add_trace_kernels(con) + add_trace_comm_ops(con)


def add_trace_comm_ops(con) -> list[tuple[int, str, str]]:
    """Fill ``comm_ops`` (elapse only) for each traced rank without any; return the warnings."""
    notes = []
    for (rank,) in con.execute(LACKING_SQL.format(table='comm_ops')).fetchall():
        n = con.execute("INSERT INTO comm_ops BY NAME " + COMM_OPS_SQL,
                        {"rank": rank, "p2p": list(P2P_PREFIXES)}).fetchone()[0]
        if n:
            notes.append((rank, TRACE_WARNING_FILES["comm_ops"],
                          f"{MISSING}: the Communication view lists the trace's {n} communication operators with "
                          "their elapse only; transit, wait, synchronization, bandwidth and the link matrix need "
                          "communication.json or the db export's analysis.db (a Level0 export writes neither)"))
    return notes


def add_trace_kernels(con) -> list[tuple[int, str, str]]:
    """Fill ``kernels`` for each traced rank without any; return the warnings ``(rank, file, message)``."""
    ranks = [r for (r,) in con.execute(LACKING_SQL.format(table='kernels')).fetchall()]
    if not ranks:
        return []
    have = {c for (c,) in con.execute(COLUMNS_SQL).fetchall()}
    cols = [c for c in ROW_COLUMNS if c in have]
    notes = []
    for rank in ranks:
        params = {"rank": rank, "types": list(COMPUTE_TASK_TYPES)}
        # counted from the rows made (the kernels table of a damaged CSV may lack accelerator_core)
        tasks, comm = con.execute("SELECT count(*) FILTER (WHERE accelerator_core <> 'HCCL'), "
                                  f"count(*) FILTER (WHERE accelerator_core = 'HCCL') FROM ({ROWS_SQL})",
                                  params).fetchone()
        con.execute(f"INSERT INTO kernels ({', '.join(cols)}) SELECT {', '.join(cols)} FROM ({ROWS_SQL})", params)
        if tasks or comm:
            notes.append((rank, TRACE_WARNING_FILES["kernels"],
                          f"{MISSING}: its kernels are the trace's {tasks} Ascend Hardware compute "
                          f"tasks and {comm} communication operators (named as in the trace; no operator type, "
                          "shapes or PMU metrics)"))
    return notes
