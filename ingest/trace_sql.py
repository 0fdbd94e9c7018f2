"""The SQL that derives a staged trace's tracks, slices, flow ends, flows, counters and steps (run by
``ingest.trace.TraceLoad.derive``, in this order; ``ingest.nesting`` computes order, depth, parents and flow pairs
between them). Every statement is per rank: one stage may hold several ranks, each derived as if it were alone.
"""

from __future__ import annotations

KIND_ORDER = ["python", "cann", "hardware", "communication", "overlap", "counter", "other"]

# Every staged row carries its ``rank``: one staging database may hold several ranks (a group of small ranks
# read together, ``TraceGroup``); each is derived on its own, exactly as if it were alone. ``local_track`` (and
# a slice's ``local_id``, a flow's ``local_flow``) number the tracks (slices, flows) of the whole stage, rank by
# rank; ``rank_track`` numbers a rank's own tracks from 1. The writers turn them into the run's ids per rank.
# (The eight phases of a thread's events are ORs: DuckDB makes ``ph IN (…)`` of that many a join, 0.10 s at 5 M
# events against 0.07.)
TRACKS = """
CREATE OR REPLACE TABLE {p}tracks AS
WITH procs AS (
    SELECT rank, pid,
           max(CASE WHEN name = 'process_name' THEN args->>'name' END) AS process_name,
           max(CASE WHEN name = 'process_labels' THEN args->>'labels' END) AS label,
           max(CASE WHEN name = 'process_sort_index' THEN TRY_CAST(args->>'sort_index' AS INTEGER) END) AS psort
    FROM {p}ev WHERE ph = 'M' GROUP BY rank, pid),
threads AS (
    SELECT rank, pid, tid,
           max(CASE WHEN name = 'thread_name' THEN args->>'name' END) AS thread_name,
           max(CASE WHEN name = 'thread_sort_index' THEN TRY_CAST(args->>'sort_index' AS INTEGER) END) AS tsort
    FROM {p}ev WHERE ph = 'M' AND name IN ('thread_name', 'thread_sort_index') GROUP BY rank, pid, tid),
thread_keys AS (
    SELECT rank, pid, tid, min(tid_text) AS tid_text FROM (
        SELECT rank, pid, tid, tid_text FROM {p}ev
        WHERE ph = 'X' OR ph = 'B' OR ph = 'E' OR ph = 'i' OR ph = 'I' OR ph = 's' OR ph = 'f' OR ph = 't'
        UNION ALL
        SELECT rank, pid, tid, NULL FROM threads)
    GROUP BY rank, pid, tid),
keys AS (
    SELECT rank, pid, tid, NULL::VARCHAR AS counter_name, tid_text FROM thread_keys
    UNION ALL
    SELECT DISTINCT rank, pid, 0, coalesce(name, ''), NULL FROM {p}ev WHERE ph = 'C'),
named AS (
    SELECT k.rank, k.pid, k.tid, k.counter_name,
           coalesce(p.process_name, 'Process ' || k.pid) AS process_name,
           CASE WHEN k.counter_name IS NOT NULL THEN k.counter_name
                ELSE coalesce(t.thread_name, CASE WHEN k.tid_text IS NOT NULL AND TRY_CAST(k.tid_text AS BIGINT) IS NULL
                                                  THEN k.tid_text ELSE 'Thread ' || k.tid END) END AS thread_name,
           p.label, p.psort AS process_sort_index, t.tsort AS thread_sort_index,
           CASE WHEN k.counter_name IS NOT NULL THEN 'counter'
                WHEN p.process_name IN ('Python', 'Python GC', 'MindSpore', 'CPU OP') THEN 'python'
                WHEN p.process_name = 'CANN' THEN 'cann'
                WHEN p.process_name = 'Ascend Hardware' THEN 'hardware'
                WHEN p.process_name IN ('HCCL', 'Communication') THEN 'communication'
                WHEN p.process_name = 'Overlap Analysis' THEN 'overlap'
                {extra_kinds}
                ELSE 'other' END AS kind
    FROM keys k LEFT JOIN procs p ON p.rank = k.rank AND p.pid = k.pid
                LEFT JOIN threads t ON t.rank = k.rank AND t.pid = k.pid AND t.tid = k.tid AND k.counter_name IS NULL),
ordered AS (
    SELECT row_number() OVER (PARTITION BY rank ORDER BY list_position({kinds}, kind), process_sort_index NULLS LAST,
                                                         pid, thread_sort_index NULLS LAST, tid, counter_name)
               AS rank_track, *
    FROM named)
SELECT row_number() OVER (ORDER BY rank, rank_track) AS local_track, * FROM ordered
"""

# Every slice with its wide columns (name, cat, args: a B/E pair's from its B event, or its E event), stored in the
# nesting's order (track, start, longer first, file order): a range of tracks (or of one track's starts) is read by a
# scan that its zone maps prune, in that order, and the nesting's rows, appended in the same order, are written
# beside them (trace_write.WRITE_SLICES: a positional join, no sort of the wide rows)
_SLICES = """
CREATE OR REPLACE TABLE {{p}}{table} AS
WITH be AS (
    SELECT e.seq, e.rank, e.pid, e.tid, e.ts_ns, e.ph{wide_e},
           sum(CASE WHEN ph = 'B' THEN 1 ELSE -1 END)
               OVER (PARTITION BY rank, pid, tid ORDER BY ts_ns, seq ROWS UNBOUNDED PRECEDING) AS level_after
    FROM {{p}}ev e WHERE ph IN ('B', 'E') AND ts_ns IS NOT NULL),
lv AS (SELECT *, CASE WHEN ph = 'B' THEN level_after ELSE level_after + 1 END AS lvl FROM be),
num AS (SELECT *, row_number() OVER (PARTITION BY rank, pid, tid, lvl, ph ORDER BY ts_ns, seq) AS k FROM lv),
pairs AS (
    SELECT b.seq, b.rank, b.pid, b.tid, b.ts_ns, e.ts_ns - b.ts_ns AS dur_ns, 'B' AS ph,
           e.seq IS NULL AS unclosed{wide_pair}
    FROM num b LEFT JOIN num e ON e.ph = 'E' AND e.rank = b.rank AND e.pid = b.pid AND e.tid = b.tid
                                AND e.lvl = b.lvl AND e.k = b.k
    WHERE b.ph = 'B'),
all_slices AS (
    SELECT seq, rank, pid, tid, ts_ns, CASE WHEN ph = 'X' THEN dur_ns ELSE 0 END AS dur_ns, ph, false AS unclosed{wide}
    FROM {{p}}ev WHERE ph IN ('X', 'i', 'I') AND ts_ns IS NOT NULL
    UNION ALL
    SELECT * FROM pairs)
SELECT {select}
FROM all_slices a JOIN {{p}}tracks t ON t.rank = a.rank AND t.pid = a.pid AND t.tid = a.tid AND t.counter_name IS NULL
{order}
"""
RAW_SLICES = _SLICES.format(
    table="x", wide_e=", e.name, e.cat, e.args", wide=",\n           name, cat, args",
    wide_pair=",\n           coalesce(b.name, e.name) AS name, coalesce(b.cat, e.cat) AS cat, "
              "coalesce(b.args, e.args) AS args",
    select="a.seq, t.local_track, a.ts_ns, greatest(coalesce(a.dur_ns, 0), 0) AS dur_ns, a.ph,\n"
           "       a.dur_ns < 0 AS negative_dur, a.unclosed, a.name, a.cat, a.args, a.rank",
    order="ORDER BY t.local_track, a.ts_ns, greatest(coalesce(a.dur_ns, 0), 0) DESC, a.seq")
# The same slices, only where they are (track, start, duration as stored), in no particular order: what a big
# rank's overview (ingest.overview) needs, made straight from the events, without the wide rows' sort (nor any:
# the overview puts a lane's slices in start order itself, and they mostly come so)
SPANS = "ov"
SLICE_SPANS = _SLICES.format(
    table=SPANS, wide_e="", wide="", wide_pair="",
    select="t.local_track, a.ts_ns, greatest(coalesce(a.dur_ns, 0), 0) AS dur_ns", order="")
# how many slices the rank's events make (RAW_SLICES' count, without making them)
SLICES_COUNTED = "count(*) FILTER (WHERE ph IN ('X', 'i', 'I', 'B') AND ts_ns IS NOT NULL)"
SLICE_COUNT = f"SELECT {SLICES_COUNTED} FROM {{p}}ev"

COUNTERS = """
CREATE OR REPLACE TABLE {p}counters AS
WITH kv AS (
    SELECT e.seq, e.rank, e.pid, coalesce(e.name, '') AS name, e.ts_ns,
           unnest(map_entries(json_transform(e.args, '"MAP(VARCHAR, VARCHAR)"'))) AS entry
    FROM {p}ev e WHERE e.ph = 'C' AND e.ts_ns IS NOT NULL AND json_type(e.args) = 'OBJECT')
SELECT t.local_track, kv.name, entry.key AS series, kv.ts_ns, TRY_CAST(entry.value AS DOUBLE) AS value, kv.rank
FROM kv JOIN {p}tracks t ON t.rank = kv.rank AND t.pid = kv.pid AND t.counter_name = kv.name
ORDER BY kv.rank, t.local_track, series, kv.ts_ns, kv.seq
"""

# a step is a ProfilerStep#N slice on a framework lane: torch_npu names it so; MindSpore's framework lane writes
# the same record as Python::PythonObserved::ProfilerStep#N (module::event::name of its framework records)
STEP_NAME = "(name LIKE 'ProfilerStep#%' OR name LIKE 'Python::PythonObserved::ProfilerStep#%')"
STEPS = """
CREATE OR REPLACE TABLE {p}steps AS
WITH named AS (SELECT seq, name FROM {p}x WHERE """ + STEP_NAME + """),
st AS (
    SELECT t.rank, n.local_id, named.name, TRY_CAST(regexp_extract(named.name, '#(-?[0-9]+)$', 1) AS BIGINT) AS step,
           n.ts_ns AS host_start_ns, n.ts_ns + n.dur_ns AS host_end_ns
    FROM named JOIN {p}nest n USING (seq) JOIN {p}tracks t USING (local_track)
    WHERE t.kind = 'python'
    QUALIFY row_number() OVER (PARTITION BY t.rank, named.name ORDER BY n.depth, n.ts_ns) = 1),
dev AS (
    SELECT st.local_id, min(k.ts_ns) AS k_start, max(k.ts_ns + k.dur_ns) AS k_end
    FROM st JOIN {p}flows f ON f.rank = st.rank AND f.cat = 'async_npu'
                           AND f.src_ts_ns BETWEEN st.host_start_ns AND st.host_end_ns
    JOIN {p}nest k ON k.local_id = f.dst_local
    GROUP BY st.local_id)
SELECT st.rank, st.step, st.name, st.local_id, st.host_start_ns, st.host_end_ns,
       coalesce(dev.k_start, st.host_start_ns) AS device_start_ns,
       greatest(coalesce(dev.k_end, st.host_end_ns), st.host_end_ns) AS device_end_ns
FROM st LEFT JOIN dev USING (local_id) ORDER BY st.rank, st.host_start_ns
"""

NEST_TABLE = """
CREATE OR REPLACE TABLE {p}nest (local_id BIGINT, seq BIGINT, local_track BIGINT, ts_ns BIGINT, dur_ns BIGINT,
                                 depth INTEGER, parent_local BIGINT)
"""
# the first start of each part of a track nested a part at a time: about PART_SLICES slices each, never splitting
# the slices of one start
PART_STARTS = """
SELECT DISTINCT first FROM (
    SELECT min(ts_ns) AS first FROM (
        SELECT ts_ns, row_number() OVER (ORDER BY ts_ns) - 1 AS r FROM {p}x WHERE local_track = ?)
    GROUP BY r // {part})
ORDER BY first
"""
def kinds_literal() -> str:
    return "[" + ", ".join(f"'{k}'" for k in KIND_ORDER) + "]"
