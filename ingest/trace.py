"""Load one rank's trace_view.json into staging tables and derive tracks, slice depth, flows and counters.

Everything runs inside DuckDB: the trace is read by ``read_json`` straight into typed columns (``ts`` as text,
converted exactly to ns by ``us_to_ns``), so memory stays bounded whatever the file size. Staging tables are
named ``{prefix}…`` and use rank-local ids; ``ingest.pipeline`` turns them into the global tables.

Derivations: slice order, depth and parent, which slice each flow end binds to, and which ``s`` each ``f``
pairs with (by ``(cat, id)``) are computed by ``ingest.nesting`` (numpy; slices one batch of whole tracks at a
time; its docstring states each definition). The rest is set-wise SQL.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import duckdb
import numpy as np

from . import jsonfile, nesting, tracefile
from .columns import arrow_table

KIND_ORDER = ["python", "cann", "hardware", "communication", "overlap", "counter", "other"]

# ts (µs text with ns decimals) is parsed by the reader straight into DECIMAL(19, 3), exact and cheaper than
# keeping the text; dur is small enough for a double to round to the exact ns. pid/tid are read as BIGINT
# (torch_npu and msprof write numbers). A trace where any of these does not convert (string pids or tids from
# other producers, a ts that is not a number) fails the fast read and is read again with pid, tid and ts as
# text, converted value by value (a ts that is not a number then becomes NULL and is reported). A dur that is
# not a number, or NaN, infinite or beyond the int64 range of ns, fails the fast read's strict cast too; the
# text read then marks its X event ``bad_dur`` and gives it no ts, so it is skipped (and reported) like an
# event without a usable ts.
EVENT_COLUMNS = ("{{ph: 'VARCHAR', name: 'VARCHAR', cat: 'VARCHAR', pid: 'BIGINT', tid: 'BIGINT', "
                 "ts: 'DECIMAL(19, 3)', dur: 'DOUBLE', id: 'VARCHAR', bp: 'VARCHAR', args: 'JSON'}}")

# a row's place in the file is its rowid (see EV_VIEW): cheaper than numbering the rows with a window
READ_EVENTS = f"""
CREATE OR REPLACE TABLE {{p}}ev_t AS
SELECT ph, name, cat, pid, tid, NULL::VARCHAR AS tid_text,
       TRY_CAST(ts * 1000 AS BIGINT) AS ts_ns, CAST(round(dur * 1000) AS BIGINT) AS dur_ns, id AS flow_key, bp,
       args, false AS bad_dur, {{rank}} AS rank
FROM read_json(?, format = 'array', columns = {EVENT_COLUMNS}{{many}})
"""

READ_EVENTS_TEXT_IDS = f"""
CREATE OR REPLACE TABLE {{p}}ev_t AS
SELECT ph, name, cat, pid, tid, tid_text, CASE WHEN NOT bad_dur THEN ts_ns END AS ts_ns, dur_ns, flow_key, bp,
       args, bad_dur, {{rank}} AS rank
FROM (SELECT *, coalesce(ph = 'X' AND dur IS NOT NULL AND dur_ns IS NULL, false) AS bad_dur
      FROM (SELECT ph, name, cat,
                   coalesce(TRY_CAST(pid AS BIGINT), -1 - CAST(hash(pid) % 2147483647 AS BIGINT)) AS pid,
                   coalesce(TRY_CAST(tid AS BIGINT), -1 - CAST(hash(tid) % 2147483647 AS BIGINT)) AS tid,
                   CASE WHEN json_type(tid) = 'VARCHAR' THEN tid->>'$' END AS tid_text,
                   us_to_ns(ts) AS ts_ns, dur, TRY_CAST(round(TRY_CAST(dur AS DOUBLE) * 1000) AS BIGINT) AS dur_ns,
                   id AS flow_key, bp, args{{filename}}
            FROM read_json(?, format = 'array',
                           columns = {EVENT_COLUMNS.replace("pid: 'BIGINT', tid: 'BIGINT'", "pid: 'JSON', tid: 'JSON'")
                                                   .replace("ts: 'DECIMAL(19, 3)'", "ts: 'VARCHAR'")
                                                   .replace("dur: 'DOUBLE'", "dur: 'VARCHAR'")}{{many}})))
"""

# a multi-file read: the rank of each event's file (the ranks, the files, then read_json's files are bound)
RANK_OF_FILE = "CAST(list_extract(?::INTEGER[], list_position(?::VARCHAR[], filename)) AS INTEGER)"

# a time is usable within ±2^62 ns (146 years around the epoch), so that the interval between any two fits in
# an int64 (a B/E pair's dur is E - B); beyond, it is skipped like a ts that is not a number
TS_LIMIT = 1 << 62
UNUSABLE_TS = f"UPDATE {{p}}ev_t SET ts_ns = NULL WHERE ts_ns <= -{TS_LIMIT} OR ts_ns >= {TS_LIMIT}"
# a negative time is before 1970: no profiler writes one (times are epoch ns, or a device clock counting up from
# boot); one such event would stretch the run over decades, so it is skipped like an unusable ts
NEGATIVE_TS = ["CREATE OR REPLACE TABLE {p}neg AS SELECT coalesce(rank, ?) AS rank, rowid AS seq FROM {p}ev_t "
               "WHERE ts_ns < 0",
               "UPDATE {p}ev_t SET ts_ns = NULL WHERE ts_ns < 0"]
NEGATIVE_TS_COUNT = "SELECT rank, count(*), min(seq) FROM {p}neg GROUP BY rank"
# an X event ending past the int64 range of ns cannot be placed on the timeline: skipped like a bad dur
MARK_OVERFLOWING_ENDS = """
UPDATE {p}ev_t SET bad_dur = true, ts_ns = NULL
WHERE ph = 'X' AND ts_ns > 0 AND dur_ns > 9223372036854775807 - ts_ns
"""
INT64_MAX = (1 << 63) - 1

# events in file order (the table is written in read order, so rowid = place in the file); derived rows are
# appended to {p}ev_t after them
EV_VIEW = "CREATE OR REPLACE VIEW {p}ev AS SELECT rowid AS seq, * FROM {p}ev_t"

# Every staged row carries its ``rank``: one staging database may hold several ranks (a group of small ranks
# read together, ``TraceGroup``); each is derived on its own, exactly as if it were alone. ``local_track`` (and
# a slice's ``local_id``, a flow's ``local_flow``) number the tracks (slices, flows) of the whole stage, rank by
# rank; ``rank_track`` numbers a rank's own tracks from 1. The writers turn them into the run's ids per rank.
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
        SELECT rank, pid, tid, tid_text FROM {p}ev WHERE ph IN ('X', 'B', 'E', 'i', 'I', 's', 'f', 't')
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

# narrow: the wide columns (name, cat, args) are joined back once, in STAGED_SLICES; B/E pairs carry their own
RAW_SLICES = """
CREATE OR REPLACE TABLE {p}x AS
WITH be AS (
    SELECT e.seq, e.rank, e.pid, e.tid, e.ts_ns, e.ph, e.name, e.cat, e.args,
           sum(CASE WHEN ph = 'B' THEN 1 ELSE -1 END)
               OVER (PARTITION BY rank, pid, tid ORDER BY ts_ns, seq ROWS UNBOUNDED PRECEDING) AS level_after
    FROM {p}ev e WHERE ph IN ('B', 'E') AND ts_ns IS NOT NULL),
lv AS (SELECT *, CASE WHEN ph = 'B' THEN level_after ELSE level_after + 1 END AS lvl FROM be),
num AS (SELECT *, row_number() OVER (PARTITION BY rank, pid, tid, lvl, ph ORDER BY ts_ns, seq) AS k FROM lv),
pairs AS (
    SELECT b.seq, b.rank, b.pid, b.tid, b.ts_ns, e.ts_ns - b.ts_ns AS dur_ns, 'B' AS ph, e.seq IS NULL AS unclosed,
           coalesce(b.name, e.name) AS name_o, coalesce(b.cat, e.cat) AS cat_o, coalesce(b.args, e.args) AS args_o
    FROM num b LEFT JOIN num e ON e.ph = 'E' AND e.rank = b.rank AND e.pid = b.pid AND e.tid = b.tid
                                AND e.lvl = b.lvl AND e.k = b.k
    WHERE b.ph = 'B'),
all_slices AS (
    SELECT seq, rank, pid, tid, ts_ns, CASE WHEN ph = 'X' THEN dur_ns ELSE 0 END AS dur_ns, ph, false AS unclosed,
           NULL::VARCHAR AS name_o, NULL::VARCHAR AS cat_o, NULL::JSON AS args_o
    FROM {p}ev WHERE ph IN ('X', 'i', 'I') AND ts_ns IS NOT NULL
    UNION ALL
    SELECT * FROM pairs)
SELECT a.seq, t.local_track, a.ts_ns, greatest(coalesce(a.dur_ns, 0), 0) AS dur_ns, a.ph,
       a.dur_ns < 0 AS negative_dur, a.unclosed, a.name_o, a.cat_o, a.args_o, a.rank
FROM all_slices a JOIN {p}tracks t ON t.rank = a.rank AND t.pid = a.pid AND t.tid = a.tid AND t.counter_name IS NULL
"""

# flow ends; ``fkey`` numbers the distinct (rank, cat, id) of the ends, for ingest.nesting.pair_flows
FLOW_ENDS = """
CREATE OR REPLACE TABLE {p}fe AS
WITH e AS (
    SELECT e.seq, e.ph, coalesce(e.cat, '') AS cat, e.name, coalesce(e.flow_key, '') AS flow_key, t.local_track,
           e.ts_ns, coalesce(e.bp, '') = 'e' AS bind_enclosing, e.rank
    FROM {p}ev e JOIN {p}tracks t ON t.rank = e.rank AND t.pid = e.pid AND t.tid = e.tid AND t.counter_name IS NULL
    WHERE e.ph IN ('s', 'f') AND e.ts_ns IS NOT NULL),
keys AS (SELECT rank, cat, flow_key, row_number() OVER () AS fkey FROM (SELECT DISTINCT rank, cat, flow_key FROM e))
SELECT e.*, keys.fkey FROM e JOIN keys USING (rank, cat, flow_key)
"""

# the pairs (from ingest.nesting.pair_flows, with their bound slices) and the ends' names
FLOWS = ["""
CREATE OR REPLACE TABLE {p}half AS
SELECT p.*, src.cat, src.name AS src_name, src.flow_key, src.rank FROM {p}pairs p JOIN {p}fe src ON src.seq = p.src_seq
""", """
CREATE OR REPLACE TABLE {p}flows AS
SELECT h.local_flow, h.cat, coalesce(h.src_name, dst.name) AS name, h.flow_key,
       h.src_track, h.src_ts_ns, nullif(h.src_local, 0) AS src_local,
       h.dst_track, h.dst_ts_ns, nullif(h.dst_local, 0) AS dst_local, h.rank
FROM {p}half h JOIN {p}fe dst ON dst.seq = h.dst_seq
ORDER BY h.local_flow
""", "DROP TABLE {p}half"]  # (one join per statement, as PAIRS: it runs beside the slices' write, in one limit)

# per rank and flow category: ends whose (cat, id) has no end of the other kind, and flows whose ends bound to no
# slice
FLOW_STATS = """
WITH per_key AS (
    SELECT any_value(rank) AS rank, any_value(cat) AS cat, count(*) FILTER (WHERE ph = 's') AS starts,
           count(*) FILTER (WHERE ph = 'f') AS fins
    FROM {p}fe GROUP BY fkey),
lonely AS (
    SELECT rank, cat, sum(CASE WHEN fins = 0 THEN starts ELSE 0 END) AS lonely_starts,
           sum(CASE WHEN starts = 0 THEN fins ELSE 0 END) AS lonely_finishes
    FROM per_key GROUP BY rank, cat),
lanes AS (SELECT DISTINCT local_track FROM {p}nest),
unbound AS (
    SELECT rank, cat, count(*) FILTER (WHERE src_local IS NULL) AS unbound_src,
           count(*) FILTER (WHERE dst_local IS NULL) AS unbound_dst,
           -- of the unbound starts, those on a lane with no slices at all (e.g. CANN API slices pruned at Level0)
           count(*) FILTER (WHERE src_local IS NULL AND src_track NOT IN (SELECT local_track FROM lanes))
               AS unbound_src_empty
    FROM {p}flows GROUP BY rank, cat)
SELECT rank, cat, lonely_starts, lonely_finishes, coalesce(unbound_src, 0), coalesce(unbound_dst, 0),
       coalesce(unbound_src_empty, 0)
FROM lonely LEFT JOIN unbound USING (rank, cat) ORDER BY rank, cat
"""

COUNTERS = """
CREATE OR REPLACE TABLE {p}counters AS
WITH kv AS (
    SELECT e.rank, e.pid, coalesce(e.name, '') AS name, e.ts_ns,
           unnest(map_entries(json_transform(e.args, '"MAP(VARCHAR, VARCHAR)"'))) AS entry
    FROM {p}ev e WHERE e.ph = 'C' AND e.ts_ns IS NOT NULL AND json_type(e.args) = 'OBJECT')
SELECT t.local_track, kv.name, entry.key AS series, kv.ts_ns, TRY_CAST(entry.value AS DOUBLE) AS value, kv.rank
FROM kv JOIN {p}tracks t ON t.rank = kv.rank AND t.pid = kv.pid AND t.counter_name = kv.name
ORDER BY t.local_track, series, kv.ts_ns
"""

# a step is a ProfilerStep#N slice on a framework lane: torch_npu names it so; MindSpore's framework lane writes
# the same record as Python::PythonObserved::ProfilerStep#N (module::event::name of its framework records)
STEP_NAME = "(name LIKE 'ProfilerStep#%' OR name LIKE 'Python::PythonObserved::ProfilerStep#%')"
STEPS = """
CREATE OR REPLACE TABLE {p}steps AS
WITH named AS (
    SELECT seq, name FROM {p}ev WHERE """ + STEP_NAME + """ AND ph IN ('X', 'i', 'I')
    UNION ALL
    SELECT seq, name_o FROM {p}x WHERE ph = 'B' AND """ + STEP_NAME.replace("name", "name_o") + """),
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

# Per rank of the stage, what turns its staged numbers into the run's ids (filled by the writer, see
# ``write_offsets``): ``rank_id`` is the rank the rows are stored under, ``*_delta`` are added to the stage's
# ``local_track`` / ``local_id`` / ``local_flow``.
OFFSETS = "{p}offsets"

# the ranks' final rows, appended to the run's tables with their id offsets; the wide columns of a slice
# (name, cat, args) come straight from the events (from its B event, or its E event, for a B/E pair)
WRITE_SLICES = ["""
INSERT INTO tracks
SELECT t.local_track + o.track_delta, o.rank_id, t.pid, t.tid, t.process_name, t.thread_name, t.kind, t.label,
       t.process_sort_index, t.thread_sort_index, t.rank_track, t.counter_name,
       coalesce(s.n, 0), s.max_depth, s.max_dur, s.min_ts, s.max_end, t.pid = {derived_pid}
FROM {p}tracks t JOIN {p}offsets o USING (rank) LEFT JOIN (
    SELECT local_track, count(*) AS n, max(depth) AS max_depth, max(dur_ns) AS max_dur,
           min(ts_ns) AS min_ts, max(ts_ns + dur_ns) AS max_end
    FROM {p}nest GROUP BY local_track) s USING (local_track)
ORDER BY t.local_track
""", """
INSERT INTO slices
SELECT n.local_id + o.slice_delta, n.local_track + o.track_delta, o.rank_id, n.ts_ns, n.dur_ns, n.depth,
       nullif(n.parent_local, 0) + o.slice_delta, coalesce(b.name_o, e.name), coalesce(b.cat_o, e.cat), e.ph,
       coalesce(b.args_o, e.args)
FROM {p}nest n JOIN {p}ev e USING (seq) JOIN {p}offsets o ON o.rank = e.rank
LEFT JOIN (SELECT seq, name_o, cat_o, args_o FROM {p}x WHERE ph = 'B') b USING (seq)
ORDER BY n.local_id
"""]

WRITE_REST = ["""
INSERT INTO flows
SELECT f.local_flow + o.flow_delta, o.rank_id, f.cat, f.name, f.flow_key, f.src_track + o.track_delta, f.src_ts_ns,
       f.src_local + o.slice_delta, f.dst_track + o.track_delta, f.dst_ts_ns, f.dst_local + o.slice_delta
FROM {p}flows f JOIN {p}offsets o USING (rank) ORDER BY f.local_flow
""", """
INSERT INTO counters
SELECT c.local_track + o.track_delta, o.rank_id, c.name, c.series, c.ts_ns, c.value
FROM {p}counters c JOIN {p}offsets o USING (rank) ORDER BY c.local_track, c.series, c.ts_ns
""", """
INSERT INTO steps
SELECT o.rank_id, s.step, s.name, s.local_id + o.slice_delta, s.host_start_ns, s.host_end_ns, s.device_start_ns,
       s.device_end_ns
FROM {p}steps s JOIN {p}offsets o USING (rank) ORDER BY s.rank, s.host_start_ns
"""]

# per rank: tracks, slices and flows staged, and where its numbers start (for the offsets)
STAGED_COUNTS = """
SELECT t.rank, t.n_tracks, t.track_base, coalesce(s.n_slices, 0), coalesce(s.slice_base, 0),
       {flow_columns}
FROM (SELECT rank, count(*) AS n_tracks, min(local_track) - 1 AS track_base FROM {p}tracks GROUP BY rank) t
LEFT JOIN (SELECT t.rank, count(*) AS n_slices, min(n.local_id) - 1 AS slice_base
           FROM {p}nest n JOIN {p}tracks t USING (local_track) GROUP BY t.rank) s USING (rank)
{flow_join}
ORDER BY t.rank
"""
FLOW_COUNTS = ("coalesce(f.n_flows, 0), coalesce(f.flow_base, 0)",
               "LEFT JOIN (SELECT rank, count(*) AS n_flows, min(local_flow) - 1 AS flow_base FROM {p}flows "
               "GROUP BY rank) f USING (rank)")

STAGE_TABLES = ("ev_t", "x", "nest", "fe", "pairs", "bound", "matched", "ends_b", "half", "tracks", "flows",
                "counters", "steps", "offsets", "neg")


def staged_counts(cur, prefix: str, flows: bool = True) -> dict[int, tuple[int, int, int, int, int, int]]:
    """rank -> (tracks, track base, slices, slice base, flows, flow base) of the stage: a rank's staged numbers
    are base + 1 .. base + count (``flows``: the flows are derived already; else they count 0)."""
    columns, join = FLOW_COUNTS if flows else ("0, 0", "")
    sql = STAGED_COUNTS.format(p=prefix, flow_columns=columns, flow_join=join.format(p=prefix))
    return {int(r[0]): tuple(int(v) for v in r[1:]) for r in cur.execute(sql).fetchall()}


def write_offsets(cur, prefix: str, rows: list[tuple[int, int, int, int, int]]) -> None:
    """The offsets table of the stage: (staged rank, rank stored, track delta, slice delta, flow delta) per rank."""
    cur.execute(f"CREATE OR REPLACE TABLE {OFFSETS.format(p=prefix)} (rank INTEGER, rank_id INTEGER, "
                "track_delta BIGINT, slice_delta BIGINT, flow_delta BIGINT)")
    if rows:
        cur.execute(f"INSERT INTO {OFFSETS.format(p=prefix)} SELECT * FROM (VALUES "
                    + ", ".join("(?, ?, ?, ?, ?)" for _ in rows) + ")", [v for row in rows for v in row])


def write_slices(cur, prefix: str, derived_pid: int) -> None:
    """Append the nested ranks' tracks and slices to the run's tables (ids from ``{prefix}offsets``)."""
    for sql in WRITE_SLICES:
        cur.execute(sql.format(p=prefix, derived_pid=derived_pid))


def write_rest(cur, prefix: str) -> None:
    """Append the derived ranks' flows, counters and steps (ids from ``{prefix}offsets``)."""
    for sql in WRITE_REST:
        cur.execute(sql.format(p=prefix))


def unwrite(cur, ranks: list[int]) -> None:
    """Remove what write_slices/write_rest appended for ``ranks`` (a trace failed part way)."""
    for table in ("tracks", "slices", "flows", "counters", "steps"):
        cur.execute(f"DELETE FROM {table} WHERE list_contains(?, rank)", [list(ranks)])


def drop_stage(cur, prefix: str) -> None:
    cur.execute(f"DROP VIEW IF EXISTS {prefix}ev")
    for t in STAGE_TABLES:
        cur.execute(f"DROP TABLE IF EXISTS {prefix}{t}")


NEST_TABLES = """
CREATE OR REPLACE TABLE {p}nest (local_id BIGINT, seq BIGINT, local_track BIGINT, ts_ns BIGINT, dur_ns BIGINT,
                                 depth INTEGER, parent_local BIGINT);
CREATE OR REPLACE TABLE {p}bound (seq BIGINT, local_id BIGINT);
CREATE OR REPLACE TABLE {p}matched (src_seq BIGINT, dst_seq BIGINT);
"""
# the flows, numbered rank by rank in pair_flows' order (start ts, start seq, finish seq), with the slices their
# ends bound to (0: none)
PAIRS = ["""
CREATE OR REPLACE TABLE {p}ends_b AS
SELECT f.seq, f.rank, f.local_track, f.ts_ns, coalesce(b.local_id, 0) AS local_id
FROM {p}fe f LEFT JOIN {p}bound b USING (seq)
""", """
CREATE OR REPLACE TABLE {p}half AS
SELECT m.src_seq, m.dst_seq, s.rank, s.local_track AS src_track, s.ts_ns AS src_ts_ns, s.local_id AS src_local
FROM {p}matched m JOIN {p}ends_b s ON s.seq = m.src_seq
""", """
CREATE OR REPLACE TABLE {p}pairs AS
SELECT row_number() OVER (ORDER BY h.rank, h.src_ts_ns, h.src_seq, h.dst_seq) AS local_flow, h.src_seq, h.dst_seq,
       h.src_track, h.src_ts_ns, h.src_local, d.local_track AS dst_track, d.ts_ns AS dst_ts_ns, d.local_id AS dst_local
FROM {p}half h JOIN {p}ends_b d ON d.seq = h.dst_seq
"""]  # (one join per statement: four hash tables built at once needed more than a 1 GB limit on a 10 GB trace)
# the first start of each part of a track nested a part at a time: about PART_SLICES slices each, never splitting
# the slices of one start
PART_STARTS = """
SELECT DISTINCT first FROM (
    SELECT min(ts_ns) AS first FROM (
        SELECT ts_ns, row_number() OVER (ORDER BY ts_ns) - 1 AS r FROM {p}x WHERE local_track = ?)
    GROUP BY r // {part})
ORDER BY first
"""
PAIR_BATCH_ENDS = 1_000_000  # flow ends paired at a time (whole (cat, id) keys): numpy memory stays bounded
# contiguous ranges of flow keys (fkey numbers them 1..) of about PAIR_BATCH_ENDS ends each: a key's batch is the
# number of ends before it over the limit, so a batch holds at most the limit plus its last key's ends
KEY_BATCHES = """
WITH per_key AS (SELECT fkey, count(*) AS n FROM {p}fe GROUP BY fkey),
before AS (SELECT fkey, sum(n) OVER (ORDER BY fkey ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - n AS b
           FROM per_key)
SELECT min(fkey), max(fkey) FROM before GROUP BY b // {limit} ORDER BY 1
"""

# args nested deeper than this are not kept (profilers write 2-3 levels): a recursive JSON parser or encoder in a
# view would fail on them. Candidates: at least this many openers ('[' or '{', counted by two single-character
# replaces: cheap on every event), then a chain of this many openers (a regular expression, on those only, in a
# CASE so that it runs after the count); the depth itself is then measured exactly. Both tests are necessary
# conditions of the depth, so no deep value is missed whatever its spacing
MAX_ARGS_DEPTH = 64
_ARGS_TEXT = "CAST(args AS VARCHAR)"
DEEP_ARGS_CANDIDATES = (
    f"SELECT rowid, {_ARGS_TEXT} FROM {{p}}ev_t WHERE CASE WHEN strlen({_ARGS_TEXT}) > {2 * MAX_ARGS_DEPTH} "
    f"AND strlen({_ARGS_TEXT}) - strlen(replace(replace({_ARGS_TEXT}, '[', ''), '{{{{', '')) >= {MAX_ARGS_DEPTH} "
    f"THEN regexp_matches(args, '([\\[{{{{][^\\]}}}}]*){{{{{MAX_ARGS_DEPTH}}}}}') ELSE false END")
DEEP_ARGS_NOTE = f'{{"args": "not loaded: nested deeper than {MAX_ARGS_DEPTH} levels"}}'
# DuckDB's JSON reader holds one object in a buffer of maximum_object_size (16 MiB by default): a larger event is
# cut out (an event of torch_npu or msprof is a few hundred bytes; one of MBs is damage or an attack)
MAX_EVENT_BYTES = (16 << 20) - (64 << 10)
_RECORD_AT = re.compile(r"in record/value (\d+)")
_DUPLICATE_KEY = re.compile(r'has duplicate key "([^"]*)"')


class TraceLoad:
    """Loads one trace (of rank ``rank``) into ``{prefix}`` staging tables; ``warnings`` collects what was not loaded
    as-is. ``derive`` derives every rank staged under the prefix (``ingest.tracegroup`` reads several traces into
    one stage); what it finds about another rank than ``rank`` goes to ``notes[rank]``."""

    READ_SHARE = 0.6  # of a trace's load time, roughly, goes to reading the JSON; the rest to derivations
    UNDERSTOOD_KEYS = frozenset({"displayTimeUnit"})  # top-level keys beside traceEvents that are used
    EXTRA_KINDS = ""  # more "WHEN <condition> THEN '<kind>'" rules for lanes no Ascend process name matches

    def __init__(self, cur: duckdb.DuckDBPyConnection, prefix: str, path: Path, workdir: Path, display: str,
                 on_progress=None, on_nested=None, split_read: bool = False, rank: int = 0):
        """``split_read``: read a big file as two halves in parallel (worth it when a core would idle)."""
        self.cur, self.p, self.path, self.workdir, self.display = cur, prefix, path, workdir, display
        self.rank = int(rank)
        self.warnings: list[str] = []
        self.notes: dict[int, list[str]] = {}  # derive()'s findings about the other ranks of the stage
        self.status = "loaded"
        self.on_progress = on_progress or (lambda fraction: None)
        self.on_nested = on_nested or (lambda: None)  # tracks and slices are final from here on
        self.split_read = split_read
        self.array_start: int | None = None  # where the original file's event array begins, once read()
        self.skipped: list[int] = []  # original indices of the events removed from the file DuckDB reads
        self.extra: dict = {}  # the top-level keys beside traceEvents, once read()
        self.locate = None  # (rank, seq) -> " (the first at byte N)", for a stage of several traces
        self.negative: dict[int, tuple[int, int]] = {}  # rank -> events with a ts before 1970, the first's seq

    def _read_with_progress(self, path: Path | list[Path], ranks: list[int] | None = None) -> None:
        try:
            self._read_query(READ_EVENTS, path, ranks)
        except duckdb.Error as exc:
            if not any(k in str(exc) for k in ("JSON transform error", "Failed to cast", "Conversion Error")):
                raise
            self._read_query(READ_EVENTS_TEXT_IDS, path, ranks)  # string pids/tids or a bad ts: read them as text

    def _read_query(self, template: str, path: Path | list[Path], ranks: list[int] | None = None) -> None:
        """One read query, reporting DuckDB's own progress of the scan (polled from a helper thread). ``ranks``:
        ``path`` is a list of traces of those ranks (one each); else every event is of ``self.rank``."""
        done = threading.Event()
        self.cur.execute("SET enable_progress_bar = true")
        self.cur.execute("SET enable_progress_bar_print = false")

        def poll():
            while not done.wait(0.25):
                pct = self.cur.query_progress()
                if pct >= 0:
                    self.on_progress(self.READ_SHARE * min(pct, 100.0) / 100)

        poller = threading.Thread(target=poll, name="trace-progress", daemon=True)
        poller.start()
        files = [str(p) for p in path] if isinstance(path, list) else str(path)
        try:
            if ranks is None:
                self.sql(template, [files], rank=str(self.rank), many="", filename="")
            else:
                self.sql(template, [list(ranks), files, files], rank=RANK_OF_FILE, many=", filename = true",
                         filename=", filename")
        finally:
            done.set()
            poller.join()
            self.cur.execute("SET enable_progress_bar = false")

    def sql(self, template: str, params=None, **names):
        sql = template.format(p=self.p, kinds=_kinds_literal(), extra_kinds=self.EXTRA_KINDS.format(p=self.p), **names)
        return self.cur.execute(sql, params or [])

    def read(self) -> None:
        """Read the events, repairing what can be repaired; raises TraceFileError when nothing is usable."""
        try:
            prepared = tracefile.prepare(self.path, self.workdir, understood=self.UNDERSTOOD_KEYS)
        except tracefile.TraceFileError as exc:
            if "truncated" not in str(exc):
                raise
            self.warnings.append(f"{exc}; loaded the complete events before it")
            self.status = "partial"
            source = self.path
            if self.path.name.endswith(".gz"):
                source = self.workdir / (self.path.name + ".plain")
                tracefile._decompress(self.path, source)
            with open(source, "rb") as fh:
                start = fh.read(1 << 16).find(b"[")
            prepared = tracefile.PreparedTrace(path=tracefile.salvage(source, self.workdir)[0],
                                               array_start=max(start, 0))
        self.warnings.extend(prepared.notes)
        self.array_start = prepared.array_start
        self.extra = prepared.extra
        path = prepared.path
        if self.split_read and self.status == "loaded" and self._read_halves(path):
            return
        for _attempt in range(12):
            try:
                self._read_with_progress(path)
                self._read_done()
                return
            except duckdb.Error as exc:
                msg = _clean_duckdb_message(str(exc), path, self.display)
                if "UTF-8" in msg or "unicode" in msg.lower():
                    prepared = tracefile.prepare(self.path, self.workdir, fix_utf8=True,
                                                 understood=self.UNDERSTOOD_KEYS)
                    self.warnings.extend(n for n in prepared.notes if "UTF-8" in n)
                    self.status = "partial" if self.status == "partial" else "loaded"
                    path = prepared.path
                    self.skipped = []  # prepared afresh from the original
                    continue
                if "maximum_object_size" in msg:  # one event larger than the reader holds: that event goes
                    path, big = tracefile.drop_large_events(path, self.workdir, MAX_EVENT_BYTES)
                    if not big:
                        raise tracefile.TraceFileError(msg.splitlines()[0]) from exc
                    originals = [(self._original_index(i), size) for i, size in big]
                    for original, size in originals:
                        self.skipped.append(original)
                        limit_mb = MAX_EVENT_BYTES / (1 << 20)
                        self.warnings.append(f"an event of {size / (1 << 20):.1f} MB {self._where(original)} was "
                                             f"skipped: one event may take at most {limit_mb:.0f} MB (a huge string "
                                             "in its args?); the events around it were loaded")
                    self.status = "partial"
                    continue
                m = _RECORD_AT.search(msg)
                dup = _DUPLICATE_KEY.search(msg)
                if m and (dup or "Malformed JSON" in msg or "malformed" in msg.lower()):
                    # DuckDB counts records from 1, and a malformed one from one ahead of its element
                    record = int(m.group(1)) - (0 if dup else 1)
                    try:
                        path, _cut = tracefile.skip_record(path, self.workdir, record)
                    except tracefile.TraceFileError:
                        raise tracefile.TraceFileError(msg) from exc
                    original = self._original_index(record - 1)
                    self.skipped.append(original)
                    where = self._where(original)
                    if dup:
                        self.warnings.append(f"an event with a duplicated key \"{dup.group(1)}\" {where} was "
                                             "skipped; the events around it were loaded")
                    else:
                        reason = msg.splitlines()[0].partition(m.group(0))[2].strip(" :.") or "malformed"
                        self.warnings.append(f"invalid JSON ({reason}): the damaged event {where} was skipped; "
                                             "the events around it were loaded")
                    self.status = "partial"
                    continue
                raise tracefile.TraceFileError(msg.splitlines()[0]) from exc
        raise tracefile.TraceFileError("could not repair the file")

    def _read_done(self) -> None:
        """The events are read: number them, and skip the times out of range and the X events that would end
        past the int64 range (one cheap pass finds whether there are any)."""
        self.sql(EV_VIEW)
        lo, hi, x_hi, dur_hi = self.sql("SELECT min(ts_ns), max(ts_ns), max(ts_ns) FILTER (WHERE ph = 'X'), "
                                        "max(dur_ns) FILTER (WHERE ph = 'X') FROM {p}ev_t").fetchone()
        if lo is not None and lo < 0:  # before 1970: a run would span decades; skipped, counted apart
            self.sql(NEGATIVE_TS[0], [self.rank])
            self.sql(NEGATIVE_TS[1])
            self.negative = {int(r): (int(n), int(first)) for r, n, first in self.sql(NEGATIVE_TS_COUNT).fetchall()}
        if lo is not None and (lo <= -TS_LIMIT or hi >= TS_LIMIT):
            self.sql(UNUSABLE_TS)
        if x_hi is not None and dur_hi is not None and x_hi + dur_hi > INT64_MAX:
            self.sql(MARK_OVERFLOWING_ENDS)
        self._bound_args_depth()
        self.on_progress(self.READ_SHARE)

    def _bound_args_depth(self) -> None:
        """Replace the args of events nested deeper than MAX_ARGS_DEPTH (a parser or encoder recursing through
        them would fail later, when a view shows the slice) with a note; warn with the first one's offset. The
        regular expression only finds candidates (a chain of openers); the depth itself is measured exactly."""
        rows = self.sql(DEEP_ARGS_CANDIDATES).fetchall()
        deep = [seq for seq, args in rows if jsonfile.max_depth(args) > MAX_ARGS_DEPTH]
        if not deep:
            return
        self.cur.execute(f"UPDATE {self.p}ev_t SET args = ? WHERE rowid IN (SELECT unnest(?))",
                         [DEEP_ARGS_NOTE, deep])
        for rank, count, first in self.cur.execute(
                f"SELECT coalesce(rank, ?), count(*), min(rowid) FROM {self.p}ev_t WHERE rowid IN (SELECT unnest(?)) "
                "GROUP BY 1 ORDER BY 1", [self.rank, deep]).fetchall():
            self.note(int(rank), f"{count} events with args nested deeper than {MAX_ARGS_DEPTH} levels were loaded "
                                 f"without their args{self._where_seq(int(rank), first)}")

    def _original_index(self, index: int) -> int:
        """The place in the original file of the ``index``-th event of the file read (some may be removed)."""
        for removed in sorted(self.skipped):
            if removed <= index:
                index += 1
        return index

    def _where(self, original_index: int, offset: int | None = None) -> str:
        """"at byte N" for an event of the original file ("(event #N)" when it cannot be located)."""
        offset = self._offset(original_index) if offset is None else offset
        if offset is None:
            return f"(event #{original_index + 1})"
        return f"at byte {offset}" + (" of the uncompressed data" if self.path.name.endswith(".gz") else "")

    def _offset(self, original_index: int) -> int | None:
        if self.array_start is None:  # the events were not read from a JSON file (another reader made them)
            return None
        try:
            return tracefile.event_offsets(self.path, [original_index], self.array_start).get(original_index)
        except (OSError, EOFError):
            return None

    def _where_seq(self, rank: int, seq: int | None) -> str:
        """" (the first at byte N)" for the event numbered ``seq`` of ``rank``, or nothing when it cannot be
        located (``locate``, when set, locates the events of a stage of several traces)."""
        if self.locate is not None:
            return self.locate(rank, seq)
        if rank != self.rank:
            return ""
        index = None if seq is None else self._original_index(seq)
        offset = None if index is None else self._offset(index)
        return "" if offset is None else f" (the first {self._where(index, offset)})"

    def _read_halves(self, path: Path) -> bool:
        """Read a big array as two halves on two cores; False (nothing read) when it cannot be split or a half
        does not read, and the whole file is then read as usual, with its repairs and messages."""
        parts = tracefile.split_halves(path, self.workdir)
        if not parts:
            return False
        try:
            self._read_with_progress(parts)
        except duckdb.Error:
            self.cur.execute(f"DROP TABLE IF EXISTS {self.p}ev_t")
            return False
        finally:
            for part in parts:
                part.unlink(missing_ok=True)
        self._read_done()
        return True

    def note(self, rank: int, text: str) -> None:
        """A finding of derive() about ``rank``: a warning of this trace, or a note of another rank of the stage."""
        if rank == self.rank:
            self.warnings.append(text)
        else:
            self.notes.setdefault(rank, []).append(text)

    def fill_rank(self) -> None:
        """Events another reader staged without a rank are this trace's."""
        fill_rank(self.cur, self.p, self.rank)

    def derive(self) -> dict:
        done = [0]

        def advance(within: float = 1.0):  # one of the ~12 steps below is done (``within``: that much of it)
            if within >= 1.0:
                done[0] += 1
            share = (done[0] + (within if within < 1.0 else 0.0)) / 12
            self.on_progress(self.READ_SHARE + (1 - self.READ_SHARE) * min(1.0, share))

        def s(template, params=None):
            result = self.sql(template, params)
            advance()
            return result

        self.fill_rank()
        s(TRACKS)
        # the counters need only the events and the tracks: derived on a second cursor while the slices are
        # nested here (numpy on one core), so the other core is not idle
        counters = Beside(self.cur, lambda cur: cur.execute(COUNTERS.format(p=self.p)), "trace-beside")
        try:
            s(RAW_SLICES)
            for rank, negative, unclosed in s(f"SELECT rank, count(*) FILTER (WHERE negative_dur), "
                                              f"count(*) FILTER (WHERE unclosed) FROM {self.p}x GROUP BY rank "
                                              "ORDER BY rank").fetchall():
                if negative:
                    self.note(rank, f"{negative} slices with a negative dur were loaded with dur 0")
                if unclosed:
                    self.note(rank, f"{unclosed} B events without a matching E were loaded with dur 0")
            skipped = s(f"""WITH k AS (SELECT rank, seq, ph, ph IN ('X','B','E','i','I','C','s','f') AND ts_ns IS NULL
                                                      AND bad_dur IS NOT TRUE AS bad_ts, bad_dur IS TRUE AS bad_dur
                                            FROM {self.p}ev)
                            SELECT rank, count(*) FILTER (WHERE bad_ts),
                                   count(*) FILTER (WHERE ph NOT IN ('X','B','E','i','I','C','s','f','M')
                                                    OR ph IS NULL),
                                   string_agg(DISTINCT ph, ', ') FILTER (WHERE ph NOT IN ('X','B','E','i','I','C','s',
                                                                                           'f','M')),
                                   min(seq) FILTER (WHERE bad_ts), count(*) FILTER (WHERE bad_dur),
                                   min(seq) FILTER (WHERE bad_dur)
                            FROM k GROUP BY rank ORDER BY rank""").fetchall()
            for rank, bad_ts, other, phases, first_bad_ts, bad_dur, first_bad_dur in skipped:
                negative, first_negative = self.negative.get(rank, (0, None))
                if negative:
                    self.note(rank, f"{negative} events with a negative ts (before 1970) were skipped"
                                    f"{self._where_seq(rank, first_negative)}; the events around them were loaded")
                if bad_ts - negative:
                    first = first_bad_ts if not negative else self.sql(
                        f"SELECT min(seq) FROM {self.p}ev WHERE rank = ? AND ts_ns IS NULL AND bad_dur IS NOT TRUE "
                        f"AND ph IN ('X','B','E','i','I','C','s','f') AND seq NOT IN (SELECT seq FROM {self.p}neg)",
                        [rank]).fetchone()[0]
                    self.note(rank, f"{bad_ts - negative} events without a usable ts were skipped"
                                    f"{self._where_seq(rank, first)}")
                if bad_dur:
                    self.note(rank, f"{bad_dur} X events whose dur is not a usable duration (not a number, infinite, "
                                    "or ending beyond the int64 range of ns) were skipped"
                                    f"{self._where_seq(rank, first_bad_dur)}")
                if other:
                    self.note(rank, f"{other} events of phases not shown yet ({phases or 'none'}) were skipped")
            self._nest(advance)
            advance()
            self.on_nested()
            for sql in FLOWS:
                self.sql(sql)
            advance()
            for rank, cat, lonely_s, lonely_f, ub_s, ub_d, ub_s_empty in s(FLOW_STATS).fetchall():
                parts = []
                if lonely_s:
                    parts.append(f"{lonely_s} flow starts without a finish")
                if lonely_f:
                    parts.append(f"{lonely_f} flow finishes without a start")
                if ub_s:
                    why = ""
                    if ub_s_empty:
                        why = f" ({ub_s_empty} on a lane without slices, as at Level0: CANN API slices not exported)"
                    parts.append(f"{ub_s} flow starts bound to no slice{why}")
                if ub_d:
                    parts.append(f"{ub_d} flow finishes bound to no slice")
                if parts:
                    self.note(rank, f"flows '{cat or '(no cat)'}': " + ", ".join(parts))
        except BaseException:
            counters.join()  # (its own error, if any, is moot now)
            raise
        counters.result()
        advance()
        for rank, bad in s(f"SELECT rank, count(*) FROM {self.p}counters WHERE value IS NULL GROUP BY rank "
                           "ORDER BY rank").fetchall():
            self.note(rank, f"{bad} counter values that are not numbers were stored as NULL")
        s(STEPS)
        for t in ("fe", "pairs"):  # the rest stays for write()
            s(f"DROP TABLE IF EXISTS {self.p}{t}")
        return self.stats()

    def _nest(self, advance=lambda within: None) -> None:
        """Order, depth and parent of every slice ({p}nest), and the flows with the slices their ends bind to
        ({p}pairs), computed by ``ingest.nesting``: slices one batch of whole tracks at a time (with the flow ends
        on those tracks), flow ends one batch of whole (cat, id) keys at a time, so memory stays bounded however
        big the trace. Flows are numbered rank by rank, in pair_flows' order within a rank."""
        p = self.p
        self.sql(FLOW_ENDS)
        self.sql(NEST_TABLES)
        counts = self.cur.execute(f"SELECT local_track, count(*) FROM {p}x GROUP BY local_track "
                                  "ORDER BY local_track").fetchall()
        first_id = 1
        total = sum(n for _, n in counts) or 1
        for lo, hi, n in _batches(counts, nesting.BATCH_SLICES):
            advance(0.8 * (first_id - 1) / total)  # (the slices: most of the step; the flows the rest)
            if lo == hi and n > nesting.BATCH_SLICES:
                self._nest_parts(lo, first_id)
                first_id += n
                continue
            rows = self.cur.execute(f"SELECT seq, local_track, ts_ns, dur_ns FROM {p}x "
                                    "WHERE local_track BETWEEN ? AND ? ORDER BY local_track, ts_ns, dur_ns DESC, seq",
                                    [lo, hi]).fetchnumpy()
            nested = nesting.nest(rows["seq"], rows["local_track"], rows["ts_ns"], rows["dur_ns"], first_id,
                                  presorted=True)
            del rows
            self._append(f"{p}nest", {"local_id": nested.local_id, "seq": nested.seq,
                                      "local_track": nested.track, "ts_ns": nested.ts, "dur_ns": nested.dur,
                                      "depth": nested.depth, "parent_local": nested.parent})
            ends = self.cur.execute(f"SELECT seq, local_track, ts_ns, ph = 's' OR bind_enclosing AS enclosing "
                                    f"FROM {p}fe WHERE local_track BETWEEN ? AND ?", [lo, hi]).fetchnumpy()
            if len(ends["seq"]):
                bound = nesting.bind(nested, ends["local_track"], ends["ts_ns"], ends["enclosing"])
                self._append(f"{p}bound", {"seq": np.asarray(ends["seq"]), "local_id": bound})
            first_id += n
        # (the batches are found in SQL: a trace can hold millions of keys, too many to fetch as Python tuples)
        key_batches = self.cur.execute(KEY_BATCHES.format(p=p, limit=int(PAIR_BATCH_ENDS))).fetchall()
        for i, (lo, hi) in enumerate(key_batches):
            advance(0.8 + 0.2 * i / len(key_batches))
            ends = self.cur.execute(f"SELECT seq, ts_ns, ph = 's' AS is_start, fkey FROM {p}fe "
                                    "WHERE fkey BETWEEN ? AND ?", [lo, hi]).fetchnumpy()
            src, dst = nesting.pair_flows(ends["fkey"], ends["is_start"], ends["ts_ns"], ends["seq"])
            if len(src):
                seq = np.asarray(ends["seq"])
                self._append(f"{p}matched", {"src_seq": seq[src], "dst_seq": seq[dst]})
        for sql in PAIRS:
            self.sql(sql)
        for t in ("bound", "matched", "ends_b", "half"):
            self.cur.execute(f"DROP TABLE IF EXISTS {p}{t}")

    def _nest_parts(self, track: int, first_id: int) -> None:
        """Nest one track too big for a batch a part at a time (``nesting.nest_part``), each part the slices
        starting in a range of times (cut where the start changes), and bind the flow ends of each range, so
        the memory a part takes stays bounded however many slices the track has."""
        p = self.p
        cuts = [r[0] for r in self.cur.execute(PART_STARTS.format(p=p, part=int(nesting.PART_SLICES)),
                                               [track]).fetchall()]
        carry = nesting.TrackCarry()
        for k, lo in enumerate(cuts):
            hi = cuts[k + 1] if k + 1 < len(cuts) else None
            where, args = "local_track = ? AND ts_ns >= ?", [track, lo]
            if hi is not None:
                where, args = where + " AND ts_ns < ?", args + [hi]
            rows = self.cur.execute(f"SELECT seq, local_track, ts_ns, dur_ns FROM {p}x WHERE {where} "
                                    "ORDER BY ts_ns, dur_ns DESC, seq", args).fetchnumpy()
            ancestors = carry.ancestors()
            nested = nesting.nest_part(rows["seq"], rows["local_track"], rows["ts_ns"], rows["dur_ns"], first_id,
                                       carry)
            del rows
            n = len(nested.seq)
            self._append(f"{p}nest", {"local_id": nested.local_id, "seq": nested.seq,
                                      "local_track": nested.track, "ts_ns": nested.ts, "dur_ns": nested.dur,
                                      "depth": nested.depth, "parent_local": nested.parent})
            # the ends from this part's first start to the next part's (the first part: every earlier one too)
            end_where, end_args = "local_track = ?", [track]
            if k > 0:
                end_where, end_args = end_where + " AND ts_ns >= ?", end_args + [lo]
            if hi is not None:
                end_where, end_args = end_where + " AND ts_ns < ?", end_args + [hi]
            ends = self.cur.execute(f"SELECT seq, local_track, ts_ns, ph = 's' OR bind_enclosing AS enclosing "
                                    f"FROM {p}fe WHERE {end_where}", end_args).fetchnumpy()
            if len(ends["seq"]):
                bound = nesting.bind(nested, ends["local_track"], ends["ts_ns"], ends["enclosing"],
                                     ancestors=ancestors, next_id=first_id + n if hi is not None else 0)
                self._append(f"{p}bound", {"seq": np.asarray(ends["seq"]), "local_id": bound})
            first_id += n

    def _append(self, table: str, columns: dict) -> None:
        self.cur.register("_nest_rows", arrow_table(columns))
        try:
            self.cur.execute(f"INSERT INTO {table} SELECT * FROM _nest_rows")
        finally:
            self.cur.unregister("_nest_rows")

    def stats(self) -> dict:
        """Slices, flows, counters and events staged, over every rank of the stage."""
        totals = {"slices": 0, "flows": 0, "counters": 0, "events": 0}
        for per in self.rank_stats().values():
            for k in totals:
                totals[k] += per[k]
        return totals

    def rank_stats(self) -> dict[int, dict]:
        """rank -> its slices, flows, counters and events."""
        p = self.p
        out: dict[int, dict] = {}
        for table, key in ((f"{p}ev", "events"), (f"{p}flows", "flows"), (f"{p}counters", "counters")):
            for rank, n in self.cur.execute(f"SELECT rank, count(*) FROM {table} GROUP BY rank").fetchall():
                out.setdefault(int(rank), {"slices": 0, "flows": 0, "counters": 0, "events": 0})[key] = int(n)
        for rank, n in self.cur.execute(f"SELECT t.rank, count(*) FROM {p}nest n JOIN {p}tracks t "
                                        "USING (local_track) GROUP BY t.rank").fetchall():
            out.setdefault(int(rank), {"slices": 0, "flows": 0, "counters": 0, "events": 0})["slices"] = int(n)
        return out


class Beside:
    """``work(cursor)`` run on a cursor of its own in a thread, beside the caller's; ``result()`` waits for it (and
    raises what it raised)."""

    def __init__(self, cur, work, name: str = "beside"):
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(cur.cursor(), work), name=name, daemon=True)
        self.thread.start()

    def _run(self, cur, work) -> None:
        try:
            work(cur)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self.error = exc
        finally:
            cur.close()

    def join(self) -> None:
        self.thread.join()

    def result(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def fill_rank(cur, prefix: str, rank: int) -> None:
    """Give ``rank`` to the staged events without one (a reader that builds its events in SQL, or a derived
    lane appended to them). A trace read here has its ranks already: one cheap count says so."""
    if cur.execute(f"SELECT count(*) FILTER (WHERE rank IS NULL) FROM {prefix}ev_t").fetchall()[0][0]:
        cur.execute(f"UPDATE {prefix}ev_t SET rank = ? WHERE rank IS NULL", [int(rank)])


def _batches(counts: list[tuple[int, int]], limit: int):
    """Contiguous ranges of tracks (lo, hi, slices) of at most ``limit`` slices each (or one larger track)."""
    lo = hi = None
    total = 0
    for track, n in counts:
        if lo is not None and total + n > limit:
            yield lo, hi, total
            lo, total = None, 0
        lo = track if lo is None else lo
        hi, total = track, total + n
    if lo is not None:
        yield lo, hi, total


def _kinds_literal() -> str:
    return "[" + ", ".join(f"'{k}'" for k in KIND_ORDER) + "]"


def _clean_duckdb_message(msg: str, path: Path, display: str) -> str:
    msg = msg.replace("Invalid Input Error: ", "").strip()
    return msg.replace(str(path), display)
