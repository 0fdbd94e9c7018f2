"""Synthesise the trace-event staging table ``{p}ev_t`` from the staged db-export tables (``{p}d_*``).

The staged tables hold the rows of every rank of a stage (a ``rank`` column first), so each statement below makes
the events of all of them at once, every join, window and order within a rank: each rank's events are those it
would give alone. What a rank's SQL needed as constants (the host's pid, the device, which PYTORCH_API column
holds the shapes) is a row of ``{p}d_ranks``.

The events are the ones the text export's trace_view.json would hold, so ``ingest.trace`` derives tracks,
nesting, flows, counters and steps unchanged:

    Python            PYTORCH_API (raw OS pid, one thread per globalTid; cat cpu_op / enqueue / dequeue /
                      python_function), args from the row, Call stack from PYTORCH_CALLCHAINS
    Python GC         GC_RECORD
    CANN              CANN_API, named ``<Level>@<name>`` (AscendCL@…, Node@…) as the text export does
    Ascend Hardware   TASK, one thread per stream; named by COMPUTE_TASK_INFO.name, else by the task type (the
                      parent row of an FFTS+ task is left out: its subtasks are there, as in the text export)
    HCCL              per group: a thread of COMMUNICATION_OP ("Group <index> Communication", the group's name in
                      the op slices' args), then one per plane of COMMUNICATION_TASK_INFO tasks
    Overlap Analysis  OVERLAP_ANALYSIS when the db has it (else the reader derives one)
    MsprofTx          MSTX_EVENTS
    counters          NPU MEM, HBM, LLC, Acc PMU, Stars Soc Info, AI Core Freq

Device lanes use the profiler's pid packing, ``(pid << 10) | (sort_index << 5) | device`` (FORMATS.md §3.3),
with the sort indexes of the samples' CANN version.

Every lane is built into one table ``{p}lanes`` (event columns plus ``tname``/``tsort`` for thread metadata,
``conn`` and ``role`` for the flows, ``rank``, ``k`` the lane's number), copied into ``{p}ev_t`` rank by rank and
lane by lane with its metadata events, and kept until the flows are made (``dbflows``, which read the lanes they
need as views ``{p}lane_<name>``). Rows without a start or end time are not events: ``dbflows`` counts them per
table.
"""

from __future__ import annotations

MASK = 4294967295
SEP = "';' || chr(13) || chr(10)"  # torch_npu's list separator inside one arg

# process -> (sort index, label: "CPU" or "NPU" + device) as in the samples (CANN 8.0)
PROCESSES = {
    "Python": (0, "CPU"), "Python GC": (1, "CPU"), "CANN": (7, "CPU"), "Ascend Hardware": (13, "NPU"),
    "AI Core Freq": (14, "NPU"), "HCCL": (15, "NPU"), "HBM": (17, "NPU"), "LLC": (18, "NPU"),
    "NPU MEM": (19, "NPU"), "Stars Soc Info": (20, "NPU"), "Acc PMU": (21, "NPU"), "Overlap Analysis": (23, "NPU"),
    "MsprofTx": (24, "CPU"),
}
OVERLAP_NAMES = ["Computing", "Communication", "Communication(Not Overlapped)", "Free"]
API_LEVEL_PREFIX = {"acl": "AscendCL", "runtime": "Runtime", "node": "Node", "model": "Model", "hccl": "Hccl"}


def pack(pid_sql: str, process: str, device_sql: str) -> str:
    return f"((CAST({pid_sql} AS BIGINT) << 10) | ({PROCESSES[process][0]} << 5) | (CAST({device_sql} AS BIGINT) & 31))"


class Json(str):
    """SQL that is already a JSON value (``json_args`` does not wrap it in ``to_json``)."""


def json_args(pairs: list[tuple[str, str]]) -> str:
    """A JSON object of the pairs (key, SQL value) whose value is not NULL (the text export omits absent args), in
    the text ``to_json`` gives a map of them; made by ``concat_ws``, which skips NULLs (a map built from a filtered
    list cost four times as much). The keys are plain words: nothing in them needs escaping. (Its braces are
    doubled: the lanes' SQL is a template, formatted with the stage's prefix.)"""
    entries = ", ".join(f"""'"{k}":' || {v if isinstance(v, Json) else f'to_json({v})'}""" for k, v in pairs)
    return f"CAST('{{{{' || concat_ws(',', {entries}) || '}}}}' AS JSON)"


def _num(sql: str) -> Json:
    """A DOUBLE that holds a whole number, as a JSON integer (``4097000``, not ``4097000.0``)."""
    return Json(f"CASE WHEN {sql} = floor({sql}) AND abs({sql}) < 9e18 THEN to_json(CAST({sql} AS BIGINT)) "
                f"ELSE to_json({sql}) END")


def _str(alias: str, id_sql: str, of: str) -> str:
    """The string of id ``id_sql`` of the rank of the row ``of`` (an alias)."""
    return f"LEFT JOIN {{p}}d_string_ids {alias} ON {alias}.rank = {of}.rank AND {alias}.id = {id_sql}"


def _enum(table: str, alias: str, id_sql: str, of: str) -> str:
    return f"LEFT JOIN {{p}}d_{table} {alias} ON {alias}.rank = {of}.rank AND {alias}.id = {id_sql}"


def _ri(of: str) -> str:
    """The rank's constants (``ri.host_pid``, ``ri.dev``, ``ri.swapped``) beside the row ``of``."""
    return f"JOIN {{p}}d_ranks ri ON ri.rank = {of}.rank"


LANE_COLUMNS = ("ph VARCHAR, name VARCHAR, cat VARCHAR, pid BIGINT, tid BIGINT, ts_ns BIGINT, dur_ns BIGINT, "
                "args JSON, tname VARCHAR, tsort BIGINT, conn BIGINT, role VARCHAR, rank INTEGER")

# each rank's constants: the host's pid (the usual pid of its tasks, else of its API threads), its device, and
# which PYTORCH_API column holds the input shapes: some torch_npu versions write types into inputShapes and shapes
# into inputDtypes. Types are words (float, ScalarList), shapes are numbers, so letters decide
RANKS = """
CREATE OR REPLACE TABLE {p}d_ranks AS
WITH r(rank) AS (VALUES {ranks}),
shapes AS (
    SELECT a.rank, count(*) FILTER (WHERE regexp_matches(sh.value, '[A-Za-z]')) AS in_shapes,
           count(*) FILTER (WHERE regexp_matches(dt.value, '[A-Za-z]')) AS in_dtypes
    FROM {p}d_pytorch_api a LEFT JOIN {p}d_string_ids sh ON sh.rank = a.rank AND sh.id = a.input_shapes
    LEFT JOIN {p}d_string_ids dt ON dt.rank = a.rank AND dt.id = a.input_dtypes
    GROUP BY a.rank)
SELECT CAST(r.rank AS INTEGER) AS rank,
       coalesce((SELECT mode(global_pid) FROM {p}d_task x WHERE x.rank = r.rank),
                (SELECT mode(global_tid >> 32) FROM {p}d_pytorch_api x WHERE x.rank = r.rank),
                (SELECT mode(global_tid >> 32) FROM {p}d_cann_api x WHERE x.rank = r.rank), 0) AS host_pid,
       coalesce((SELECT min(device_id) FROM {p}d_task x WHERE x.rank = r.rank),
                (SELECT min(device_id) FROM {p}d_rank_device_map x WHERE x.rank = r.rank), 0) AS dev,
       coalesce(s.in_shapes > s.in_dtypes, false) AS swapped
FROM r LEFT JOIN shapes s ON s.rank = r.rank
ORDER BY r.rank
"""

PYTHON = f"""
WITH api AS (
    SELECT rowid AS rid, *, TRY_CAST(start_t AS BIGINT) AS ts, TRY_CAST(end_t AS BIGINT) AS te
    FROM {{p}}d_pytorch_api),
cs AS (
    SELECT c.rank, c.id, string_agg(s.value, {SEP} ORDER BY c.stack_depth) AS stack
    FROM {{p}}d_pytorch_callchains c {_str('s', 'c.stack', 'c')} GROUP BY c.rank, c.id),
q AS (SELECT rank, id, min(connection_id) AS cid FROM {{p}}d_connection_ids GROUP BY rank, id),
r AS (
    SELECT a.*, n.value AS name_s, dims.value AS dims, types.value AS types, cs.stack,
           coalesce(a.global_tid >> 32, ri.host_pid) AS os_pid, coalesce(a.global_tid & {MASK}, 0) AS os_tid,
           CASE WHEN a.type = 50002 THEN CASE WHEN starts_with(coalesce(n.value, ''), 'Dequeue') THEN 'dequeue'
                                              ELSE 'enqueue' END
                WHEN a.type = 50003 THEN 'trace' WHEN a.type = 50004 THEN 'mstx' ELSE 'op' END AS role
    FROM api a {_ri('a')} {_str('n', 'a.name', 'a')}
    {_str('dims', 'CASE WHEN ri.swapped THEN a.input_dtypes ELSE a.input_shapes END', 'a')}
    {_str('types', 'CASE WHEN ri.swapped THEN a.input_shapes ELSE a.input_dtypes END', 'a')}
    LEFT JOIN cs ON cs.rank = a.rank AND cs.id = a.callchain_id
    WHERE a.ts IS NOT NULL AND a.te IS NOT NULL)
SELECT 'X' AS ph, name_s AS name,
       CASE role WHEN 'op' THEN 'cpu_op' WHEN 'trace' THEN 'python_function' ELSE role END AS cat,
       os_pid AS pid, os_tid AS tid, ts AS ts_ns, te - ts AS dur_ns,
       CASE WHEN role IN ('enqueue', 'dequeue') THEN {json_args([('connection_id', 'q.cid')])}
            WHEN role IN ('op', 'mstx') THEN {json_args([('Sequence number', 'sequence_number'),
                                                          ('Fwd thread id', 'fwd_thread_id'),
                                                          ('Input Dims', 'dims'), ('Input type', 'types'),
                                                          ('Call stack', 'stack')])} END AS args,
       'Thread ' || os_tid AS tname,
       -- the task-queue consumer (dequeue) thread sorts last, as in the text export
       CASE WHEN bool_or(role = 'dequeue') OVER (PARTITION BY r.rank, os_pid, os_tid)
            THEN max(os_tid) OVER (PARTITION BY r.rank, os_pid) + 1 ELSE os_tid END AS tsort,
       r.connection_id AS conn, role, r.rank
FROM r LEFT JOIN q ON q.rank = r.rank AND q.id = r.connection_id AND r.role IN ('enqueue', 'dequeue')
ORDER BY r.rank, ts, te DESC, rid
"""

PYTHON_GC = f"""
SELECT 'X' AS ph, 'GC' AS name, 'GC' AS cat,
       {pack('coalesce(g.global_tid >> 32, ri.host_pid)', 'Python GC', 'ri.dev')} AS pid,
       coalesce(g.global_tid & {MASK}, 0) AS tid, g.start_ns AS ts_ns, g.end_ns - g.start_ns AS dur_ns, NULL AS args,
       'Python GC' AS tname, NULL AS tsort, NULL AS conn, 'gc' AS role, g.rank
FROM {{p}}d_gc_record g {_ri('g')} WHERE g.start_ns IS NOT NULL AND g.end_ns IS NOT NULL
ORDER BY g.rank, g.start_ns, g.end_ns DESC, g.rowid
"""

_LEVEL = ("CASE e.name " + " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in API_LEVEL_PREFIX.items())
          + " ELSE coalesce(e.name, CAST(a.type AS VARCHAR), 'API') END")
CANN = f"""
SELECT 'X' AS ph, {_LEVEL} || '@' || coalesce(n.value, '') AS name, NULL AS cat,
       {pack('coalesce(a.global_tid >> 32, ri.host_pid)', 'CANN', 'ri.dev')} AS pid,
       coalesce(a.global_tid & {MASK}, 0) AS tid, a.start_ns AS ts_ns, a.end_ns - a.start_ns AS dur_ns,
       {json_args([('Thread Id', f'a.global_tid & {MASK}'), ('level', 'e.name'), ('id', 'n.value'),
                   ('connection_id', 'a.connection_id')])} AS args,
       'Thread ' || coalesce(a.global_tid & {MASK}, 0) AS tname, coalesce(a.global_tid & {MASK}, 0) AS tsort,
       a.connection_id AS conn, 'api' AS role, a.rank
FROM {{p}}d_cann_api a {_ri('a')} {_enum('enum_api_type', 'e', 'a.type', 'a')} {_str('n', 'a.name', 'a')}
WHERE a.start_ns IS NOT NULL AND a.end_ns IS NOT NULL
ORDER BY a.rank, a.start_ns, a.end_ns DESC, a.rowid
"""

# an FFTS+ task is written twice: the parent (no context id) and its subtasks (same stream and task id, a context
# id each, within the parent's span). The text export shows the subtasks only; so does this lane.
FFTS_PARENTS = f"""
SELECT t.rank, t.global_task_id FROM {{p}}d_task t
WHERE t.context_id = {MASK} AND EXISTS (
    SELECT 1 FROM {{p}}d_task s
    WHERE s.rank = t.rank AND s.stream_id = t.stream_id AND s.task_id = t.task_id
      AND s.device_id IS NOT DISTINCT FROM t.device_id AND s.context_id <> {MASK}
      AND s.start_ns BETWEEN t.start_ns AND t.end_ns)
"""

HARDWARE = f"""
WITH ci AS (SELECT * FROM {{p}}d_compute_task_info
            QUALIFY row_number() OVER (PARTITION BY rank, global_task_id ORDER BY rowid) = 1),
comm AS (SELECT DISTINCT rank, global_task_id FROM {{p}}d_communication_task_info),
parents AS ({FFTS_PARENTS})
SELECT 'X' AS ph, coalesce(cn.value, tt.value, 'Task') AS name, NULL AS cat,
       {pack('coalesce(t.global_pid, ri.host_pid)', 'Ascend Hardware', 'coalesce(t.device_id, ri.dev)')} AS pid,
       coalesce(t.stream_id, 0) AS tid, t.start_ns AS ts_ns, t.end_ns - t.start_ns AS dur_ns,
       {json_args([('Model Id', 't.model_id'), ('Task Type', 'tt.value'), ('Stream Id', 't.stream_id'),
                   ('Task Id', 't.task_id'), ('Subtask Id', 't.context_id'), ('connection_id', 't.connection_id'),
                   ('Accelerator Core', 'ct.value')])} AS args,
       'Stream ' || coalesce(t.stream_id, 0) AS tname, coalesce(t.stream_id, 0) AS tsort, t.connection_id AS conn,
       CASE WHEN ci.global_task_id IS NOT NULL THEN 'compute' WHEN comm.global_task_id IS NOT NULL THEN 'comm'
            ELSE 'task' END AS role, t.rank
FROM {{p}}d_task t {_ri('t')}
LEFT JOIN ci ON ci.rank = t.rank AND ci.global_task_id = t.global_task_id
LEFT JOIN comm ON comm.rank = t.rank AND comm.global_task_id = t.global_task_id
{_str('tt', 't.task_type', 't')} {_str('cn', 'ci.name', 't')} {_str('ct', 'ci.task_type', 't')}
WHERE t.start_ns IS NOT NULL AND t.end_ns IS NOT NULL
  -- (as `global_task_id NOT IN parents`: a parent without an id hides every task of its rank)
  AND (t.global_task_id IS NULL
       OR (NOT EXISTS (SELECT 1 FROM parents x WHERE x.rank = t.rank AND x.global_task_id = t.global_task_id)
           AND NOT EXISTS (SELECT 1 FROM parents x WHERE x.rank = t.rank AND x.global_task_id IS NULL)))
ORDER BY t.rank, t.start_ns, t.end_ns DESC, t.rowid
"""

# thread layout per device, as msprof writes it: each group's op thread, then one thread per plane
COMM_GROUPS = f"""
CREATE OR REPLACE TABLE {{p}}comm_groups AS
WITH members AS (
    SELECT o.rank, coalesce(o.device_id, ri.dev) AS device, o.group_name AS gid, o.start_ns AS ts, -1 AS plane
    FROM {{p}}d_communication_op o {_ri('o')}
    UNION ALL
    SELECT c.rank, coalesce(t.device_id, ri.dev), c.group_name, t.start_ns, coalesce(c.plane_id, 0)
    FROM {{p}}d_communication_task_info c
    JOIN {{p}}d_task t ON t.rank = c.rank AND t.global_task_id = c.global_task_id {_ri('c')}),
g AS (SELECT rank, device, gid, min(ts) AS first_ts, max(plane) AS max_plane FROM members
      GROUP BY rank, device, gid)
SELECT rank, device, gid,
       coalesce(sum(2 + max_plane) OVER (PARTITION BY rank, device ORDER BY first_ts NULLS LAST, gid
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS base,
       row_number() OVER (PARTITION BY rank, device ORDER BY first_ts NULLS LAST, gid) - 1 AS idx
FROM g
"""

COMMUNICATION = f"""
SELECT * EXCLUDE (part, rid) FROM (
SELECT 'X' AS ph, n.value AS name, NULL AS cat,
       {pack('ri.host_pid', 'HCCL', 'g.device')} AS pid, g.base AS tid, o.start_ns AS ts_ns,
       o.end_ns - o.start_ns AS dur_ns,
       {json_args([('connection_id', 'o.connection_id'), ('data_type', 'dt.name'), ('alg_type', 'alg.value'),
                   ('count', _num('o.count')), ('relay', 'o.relay'), ('retry', 'o.retry'),
                   ('group', 'coalesce(gn.value, CAST(o.group_name AS VARCHAR))')])}
           AS args,
       -- the lane is named by the group's index, as the text export names it ("Group 0 Communication"): the db's
       -- group name is an HCCL comm name or a 19-digit hash; it stays in the slices' args ("group")
       'Group ' || g.idx || ' Communication' AS tname,
       g.base AS tsort, o.connection_id AS conn, 'op' AS role, o.rank, 0 AS part, o.rowid AS rid
FROM {{p}}d_communication_op o {_ri('o')}
JOIN {{p}}comm_groups g ON g.rank = o.rank AND g.device = coalesce(o.device_id, ri.dev)
                        AND g.gid IS NOT DISTINCT FROM o.group_name
{_enum('enum_data_type', 'dt', 'o.data_type', 'o')} {_str('n', 'o.op_name', 'o')} {_str('alg', 'o.alg_type', 'o')}
{_str('gn', 'o.group_name', 'o')}
WHERE o.start_ns IS NOT NULL AND o.end_ns IS NOT NULL
UNION ALL
SELECT 'X', ty.value, NULL, {pack('ri.host_pid', 'HCCL', 'g.device')}, g.base + 1 + coalesce(c.plane_id, 0),
       t.start_ns, t.end_ns - t.start_ns,
       {json_args([('notify_id', 'c.notify_id'), ('stream id', 't.stream_id'), ('task id', 't.task_id'),
                   ('context id', 't.context_id'), ('task type', 'ty.value'), ('src rank', 'c.src_rank'),
                   ('dst rank', 'c.dst_rank'), ('transport type', 'tr.name'), ('size(Byte)', _num('c.size')),
                   ('data type', 'dt.name'), ('link type', 'lk.name'), ('rdma type', 'rd.name'),
                   ('bandwidth(GB/s)', 'c.bandwidth'), ('model id', 't.model_id'), ('op name', 'opn.value')])},
       'Plane ' || coalesce(c.plane_id, 0), g.base + 1 + coalesce(c.plane_id, 0), t.connection_id, 'plane', c.rank,
       1, c.rowid
FROM {{p}}d_communication_task_info c
JOIN {{p}}d_task t ON t.rank = c.rank AND t.global_task_id = c.global_task_id {_ri('c')}
JOIN {{p}}comm_groups g ON g.rank = c.rank AND g.device = coalesce(t.device_id, ri.dev)
                        AND g.gid IS NOT DISTINCT FROM c.group_name
{_enum('enum_data_type', 'dt', 'c.data_type', 'c')} {_enum('enum_link_type', 'lk', 'c.link_type', 'c')}
{_enum('enum_transport_type', 'tr', 'c.transport_type', 'c')} {_enum('enum_rdma_type', 'rd', 'c.rdma_type', 'c')}
{_str('ty', 'c.task_type', 'c')} {_str('opn', 'c.name', 'c')}
WHERE t.start_ns IS NOT NULL AND t.end_ns IS NOT NULL)
ORDER BY rank, ts_ns, dur_ns DESC, part, rid
"""

OVERLAP = f"""
SELECT 'X' AS ph, list_extract({OVERLAP_NAMES}, x.type + 1) AS name, NULL AS cat,
       {pack('ri.host_pid', 'Overlap Analysis', 'coalesce(x.device_id, ri.dev)')} AS pid, x.type AS tid,
       x.start_ns AS ts_ns, x.end_ns - x.start_ns AS dur_ns, NULL AS args,
       list_extract({OVERLAP_NAMES}, x.type + 1) AS tname, x.type AS tsort, NULL AS conn, 'overlap' AS role, x.rank
FROM {{p}}d_overlap_analysis x {_ri('x')}
WHERE x.start_ns IS NOT NULL AND x.end_ns IS NOT NULL AND x.type BETWEEN 0 AND 3
ORDER BY x.rank, x.start_ns, x.end_ns DESC, x.rowid
"""

MSTX = f"""
SELECT 'X' AS ph, coalesce(m.value, 'mstx') AS name, 'mstx' AS cat,
       {pack('coalesce(x.global_tid >> 32, ri.host_pid)', 'MsprofTx', 'ri.dev')} AS pid,
       coalesce(x.global_tid & {MASK}, 0) AS tid, x.start_ns AS ts_ns,
       coalesce(x.end_ns, x.start_ns) - x.start_ns AS dur_ns,
       {json_args([('event type', 'et.name'), ('range id', 'x.range_id'), ('category', 'cat.value'),
                   ('domain', 'dom.value'), ('connection_id', 'x.connection_id')])} AS args,
       'Thread ' || coalesce(x.global_tid & {MASK}, 0) AS tname, coalesce(x.global_tid & {MASK}, 0) AS tsort,
       x.connection_id AS conn, 'mstx' AS role, x.rank
FROM {{p}}d_mstx_events x {_ri('x')} {_enum('enum_mstx_event_type', 'et', 'x.event_type', 'x')}
{_str('m', 'x.message', 'x')} {_str('cat', 'x.category', 'x')} {_str('dom', 'x.domain_id', 'x')}
WHERE x.start_ns IS NOT NULL
ORDER BY x.rank, x.start_ns, x.rowid
"""


def _counter(process: str, parts: list[tuple[str, str, str]], rows: str) -> str:
    """C events of one counter process: per source row (``rows``: a subquery with the row's ``rid``), each (name
    SQL, series key SQL, value SQL); the rows of a rank in their order, part after part."""
    pid = pack("ri.host_pid", process, "coalesce(device_id, ri.dev)")
    selects = [f"""SELECT 'C' AS ph, {name} AS name, NULL AS cat, {pid} AS pid, 0 AS tid, timestamp_ns AS ts_ns,
                          NULL AS dur_ns, json_object({key}, {value}) AS args, NULL AS tname, NULL AS tsort,
                          NULL AS conn, 'counter' AS role, c.rank, {i} AS part, rid
                   FROM {rows} c {_ri('c')} WHERE timestamp_ns IS NOT NULL"""
               for i, (name, key, value) in enumerate(parts)]
    return "SELECT * EXCLUDE (part, rid) FROM (\n" + "\nUNION ALL\n".join(selects) + ") ORDER BY rank, part, rid"


def _cap(sql: str) -> str:
    return f"(upper(left({sql}, 1)) || lower(substr({sql}, 2)))"


NPU_MEM_ROWS = ("(SELECT n.rowid AS rid, n.*, CASE lower(s.value) WHEN 'app' THEN 'APP' WHEN 'device' THEN 'Device' "
                "ELSE coalesce(s.value, CAST(n.type AS VARCHAR)) END AS kind "
                "FROM {p}d_npu_mem n LEFT JOIN {p}d_string_ids s ON s.rank = n.rank AND s.id = n.type)")
HBM_ROWS = ("(SELECT h.rowid AS rid, h.*, coalesce(" + _cap("s.value") + ", CAST(h.type AS VARCHAR)) AS dir "
            "FROM {p}d_hbm h LEFT JOIN {p}d_string_ids s ON s.rank = h.rank AND s.id = h.type)")
LLC_ROWS = ("(SELECT l.rowid AS rid, l.*, coalesce(" + _cap("s.value") + ", CAST(l.mode AS VARCHAR)) AS dir "
            "FROM {p}d_llc l LEFT JOIN {p}d_string_ids s ON s.rank = l.rank AND s.id = l.mode)")


def _rows(table: str) -> str:
    return f"(SELECT rowid AS rid, * FROM {{p}}d_{table})"


# (process, SQL of its C events): values stay in the db's units (named in the series key) except NPU MEM's bytes,
# given in KB as the text export does
COUNTERS = [
    ("NPU MEM", _counter("NPU MEM", [("kind || '/DDR'", "'KB'", "ddr / 1024"), ("kind || '/HBM'", "'KB'", "hbm / 1024"),
                                     ("kind || '/Memory'", "'KB'", "(ddr + hbm) / 1024")], NPU_MEM_ROWS)),
    ("HBM", _counter("HBM", [("'HBM ' || hbm_id || '/' || dir", "dir || '(B/s)'", "bandwidth")], HBM_ROWS)),
    ("LLC", _counter("LLC", [("'LLC ' || llc_id || ' ' || dir || '/Hit Rate'", "'Hit Rate(%)'", "hit_rate"),
                             ("'LLC ' || llc_id || ' ' || dir || '/Throughput'", "'Throughput(B/s)'", "throughput")],
                     LLC_ROWS)),
    ("Acc PMU", _counter("Acc PMU", [(f"'{n}'", "'value'", f"{c}, 'acc_id', acc_id")
                                     for n, c in (("read_bandwidth", "read_bw_level"),
                                                  ("write_band_width", "write_bw_level"),
                                                  ("read_ost", "read_ost_level"), ("write_ost", "write_ost_level"))],
                         _rows("acc_pmu"))),
    ("Stars Soc Info", _counter("Stars Soc Info",
                                [("'L2 Buffer Bw Level'", "'L2 Buffer Bw Level'", "l2_buffer_bw_level"),
                                 ("'Mata Bw Level'", "'Mata Bw Level'", "mata_bw_level")],
                                _rows("soc_bandwidth_level"))),
    ("AI Core Freq", _counter("AI Core Freq", [("'AI Core Freq'", "'MHz'", "freq")], _rows("aicore_freq"))),
]

# slice lanes: (lane table, process, SQL)
LANES = [("python", "Python", PYTHON), ("gc", "Python GC", PYTHON_GC), ("cann", "CANN", CANN),
         ("hw", "Ascend Hardware", HARDWARE), ("comm", "HCCL", COMMUNICATION), ("mstx", "MsprofTx", MSTX)]

# the lanes the flows read, by their number in {p}lanes (their place in LANES)
LANE_VIEWS = {name: k for k, (name, _, _) in enumerate(LANES) if name in ("python", "cann", "hw", "comm")}

# every lane's events into {p}ev_t, rank by rank and lane by lane in their order, each lane followed by its
# metadata events; {lanes}: the lanes' rows (LANE_COLUMNS, k, and r: their order within a lane); {info}: (k,
# process, sort index, CPU or not) of each lane
LANE_EVENTS = """
INSERT INTO {p}ev_t BY NAME
WITH info(k, process, sort, cpu) AS (VALUES {info}),
procs AS (SELECT DISTINCT rank, k, pid FROM {lanes}),
threads AS (SELECT rank, k, pid, tid, any_value(tname) AS tname, any_value(tsort) AS tsort FROM {lanes}
            GROUP BY rank, k, pid, tid),
rows AS (
    SELECT ph, name, cat, pid, tid, ts_ns, dur_ns, args, rank, k, 0 AS part, r FROM {lanes}
    UNION ALL
    SELECT 'M', 'process_name', NULL, pid, 0, NULL, NULL, json_object('name', i.process), rank, k, 1, 0
    FROM procs JOIN info i USING (k)
    UNION ALL
    SELECT 'M', 'process_labels', NULL, pid, 0, NULL, NULL,
           json_object('labels', CASE WHEN i.cpu THEN 'CPU' ELSE 'NPU ' || (pid & 31) END), rank, k, 1, 0
    FROM procs JOIN info i USING (k)
    UNION ALL
    SELECT 'M', 'process_sort_index', NULL, pid, 0, NULL, NULL, json_object('sort_index', i.sort), rank, k, 1, 0
    FROM procs JOIN info i USING (k)
    UNION ALL
    SELECT 'M', 'thread_name', NULL, pid, tid, NULL, NULL, json_object('name', tname), rank, k, 1, 0
    FROM threads WHERE tname IS NOT NULL
    UNION ALL
    SELECT 'M', 'thread_sort_index', NULL, pid, tid, NULL, NULL, json_object('sort_index', tsort), rank, k, 1, 0
    FROM threads WHERE tsort IS NOT NULL)
SELECT * EXCLUDE (k, part, r) FROM rows ORDER BY rank, k, part, r
"""
