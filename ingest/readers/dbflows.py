"""The flow events of a db export's stage, and the per-rank counts of what its events leave out.

Flows (``bp: e``), keyed by connection id, from the lanes ``dbevents`` built (views ``{p}lane_<name>``), every
rank's at once (each within its rank):

    HostToDevice      CANN_API -> each task with its connectionId (a communication task's flow goes to its
                      COMMUNICATION_OP, as in the text export)
    async_npu         torch op -> CONNECTION_IDS -> the same tasks
    async_task_queue  Enqueue -> Dequeue sharing a connection id
    fwdbwd            a connection id shared by torch ops and no task: the earliest op -> the later ones

The flow ends go into ``{p}ev_t`` in one order whatever the ranks staged beside: by rank, category, connection
id, start before finish, time, then lane (pid, tid): two finishes of one id at one time, on two lanes, are
paired in lane order.
"""

from __future__ import annotations

from .dbevents import FFTS_PARENTS

TARGETS = """
CREATE OR REPLACE TABLE {p}flow_targets AS
SELECT rank, conn AS cid, pid, tid, ts_ns FROM {p}lane_hw WHERE role <> 'comm' AND conn IS NOT NULL
UNION ALL
SELECT rank, conn, pid, tid, ts_ns FROM {p}lane_comm WHERE role = 'op' AND conn IS NOT NULL
"""

# torch ops (and their mstx marks) with each connection id of their CONNECTION_IDS group
OP_LINKS = """
CREATE OR REPLACE TABLE {p}op_links AS
SELECT o.rank, o.pid, o.tid, o.ts_ns, o.role, c.connection_id AS cid
FROM {p}lane_python o JOIN {p}d_connection_ids c ON c.rank = o.rank AND c.id = o.conn
WHERE c.connection_id IS NOT NULL
"""

FLOWS = """
INSERT INTO {p}ev_t BY NAME
WITH apis AS (SELECT DISTINCT rank, conn AS cid FROM {p}lane_cann WHERE conn IS NOT NULL),
tgt AS (SELECT DISTINCT rank, cid FROM {p}flow_targets),
ops AS (SELECT * FROM {p}op_links WHERE role IN ('op', 'mstx')),
fb AS (SELECT *, row_number() OVER (PARTITION BY rank, cid ORDER BY ts_ns, pid, tid) AS k,
              count(*) OVER (PARTITION BY rank, cid) AS n
       FROM ops o WHERE NOT EXISTS (SELECT 1 FROM tgt WHERE tgt.rank = o.rank AND tgt.cid = o.cid)),
ends AS (
    SELECT 's' AS ph, 'HostToDevice' AS cat, 'HostToDevice' || conn AS name, pid, tid, ts_ns, conn AS cid, rank
    FROM {p}lane_cann c WHERE EXISTS (SELECT 1 FROM tgt WHERE tgt.rank = c.rank AND tgt.cid = c.conn)
    UNION ALL
    SELECT 'f', 'HostToDevice', 'HostToDevice' || cid, pid, tid, ts_ns, cid, rank
    FROM {p}flow_targets f WHERE EXISTS (SELECT 1 FROM apis WHERE apis.rank = f.rank AND apis.cid = f.cid)
    UNION ALL
    SELECT 's', 'async_npu', 'torch_to_npu', pid, tid, ts_ns, cid, rank
    FROM ops o WHERE EXISTS (SELECT 1 FROM tgt WHERE tgt.rank = o.rank AND tgt.cid = o.cid)
    UNION ALL
    SELECT 'f', 'async_npu', 'torch_to_npu', pid, tid, ts_ns, cid, rank
    FROM {p}flow_targets f WHERE EXISTS (SELECT 1 FROM ops WHERE ops.rank = f.rank AND ops.cid = f.cid)
    UNION ALL
    SELECT CASE WHEN role = 'enqueue' THEN 's' ELSE 'f' END, 'async_task_queue', 'enqueue_to_dequeue', pid, tid,
           ts_ns, cid, rank
    FROM {p}op_links WHERE role IN ('enqueue', 'dequeue')
    UNION ALL
    SELECT CASE WHEN k = 1 THEN 's' ELSE 'f' END, 'fwdbwd', 'fwdbwd', pid, tid, ts_ns, cid, rank FROM fb WHERE n > 1)
SELECT ph, name, cat, pid, tid, ts_ns, CAST(cid AS VARCHAR) AS flow_key, 'e' AS bp, rank FROM ends
ORDER BY rank, cat, cid, ph DESC, ts_ns, pid, tid
"""

# per rank (each SELECT gives rank, n): whether PYTORCH_API's shape columns are swapped (``dbevents.RANKS``), FFTS+
# parents not drawn, connection ids of torch ops that lead nowhere in
# the db (no task, no other op), and the rows that are not events (no start or end time, or no TASK row)
SWAPPED = "SELECT rank, 1 AS n FROM {p}d_ranks WHERE swapped"
FFTS_PARENT_COUNT = f"SELECT rank, count(*) AS n FROM ({FFTS_PARENTS}) GROUP BY rank"
LONELY_OPS = """
SELECT o.rank, count(DISTINCT o.cid) AS n FROM {p}op_links o
WHERE o.role IN ('op', 'mstx')
  AND NOT EXISTS (SELECT 1 FROM {p}flow_targets f WHERE f.rank = o.rank AND f.cid = o.cid)
  AND EXISTS (SELECT 1 FROM (SELECT rank, cid FROM {p}op_links WHERE role IN ('op', 'mstx') GROUP BY rank, cid
                             HAVING count(*) = 1) one WHERE one.rank = o.rank AND one.cid = o.cid)
GROUP BY o.rank
"""
UNUSABLE = {
    "PYTORCH_API": "SELECT rank, count(*) AS n FROM {p}d_pytorch_api WHERE TRY_CAST(start_t AS BIGINT) IS NULL "
                   "OR TRY_CAST(end_t AS BIGINT) IS NULL GROUP BY rank",
    "GC_RECORD": "SELECT rank, count(*) AS n FROM {p}d_gc_record WHERE start_ns IS NULL OR end_ns IS NULL "
                 "GROUP BY rank",
    "CANN_API": "SELECT rank, count(*) AS n FROM {p}d_cann_api WHERE start_ns IS NULL OR end_ns IS NULL GROUP BY rank",
    "TASK": "SELECT rank, count(*) AS n FROM {p}d_task WHERE start_ns IS NULL OR end_ns IS NULL GROUP BY rank",
    "COMMUNICATION_OP": "SELECT rank, count(*) AS n FROM {p}d_communication_op WHERE start_ns IS NULL "
                        "OR end_ns IS NULL GROUP BY rank",
    "OVERLAP_ANALYSIS": "SELECT rank, count(*) AS n FROM {p}d_overlap_analysis WHERE start_ns IS NULL "
                        "OR end_ns IS NULL OR type IS NULL OR type NOT BETWEEN 0 AND 3 GROUP BY rank",
    "MSTX_EVENTS": "SELECT rank, count(*) AS n FROM {p}d_mstx_events WHERE start_ns IS NULL GROUP BY rank",
}
UNMATCHED = {
    # a communication task (or a plane) needs its TASK row for its times
    "COMMUNICATION_TASK_INFO": "SELECT c.rank, count(*) AS n FROM {p}d_communication_task_info c WHERE NOT EXISTS "
                               "(SELECT 1 FROM {p}d_task t WHERE t.rank = c.rank AND t.global_task_id = "
                               "c.global_task_id) GROUP BY c.rank",
}


def counts_per_rank(queries: list[str]) -> str:
    """One statement (each costs milliseconds) of several per-rank counts: rows (rank, query number, count) of
    the counts that are not 0 (a union: joining the counts to the ranks cost twice as much to plan)."""
    return " UNION ALL ".join(f"SELECT rank, {i} AS q, n FROM ({q.strip()})" for i, q in enumerate(queries))
