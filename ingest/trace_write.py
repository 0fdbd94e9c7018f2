"""Append a derived stage's rows to the run's tables, with each rank's id offsets; undo that for a rank that
failed part way; drop a stage.
"""

from __future__ import annotations

# Per rank of the stage, what turns its staged numbers into the run's ids (filled by the writer, see
# ``write_offsets``): ``rank_id`` is the rank the rows are stored under, ``*_delta`` are added to the stage's
# ``local_track`` / ``local_id`` / ``local_flow``.
OFFSETS = "{p}offsets"

# the ranks' final rows, appended to the run's tables with their id offsets: the slices as nested, row by row
# beside the slices made (``{p}x``: the same order, with their wide columns), so no join or sort of the wide rows
WRITE_SLICES = ["""
INSERT INTO tracks
SELECT t.local_track + o.track_delta, o.rank_id, t.pid, t.tid, t.process_name, t.thread_name, t.kind, t.label,
       t.process_sort_index, t.thread_sort_index, t.rank_track, t.counter_name,
       coalesce(s.n, 0), s.max_depth, s.max_dur, s.min_ts, s.max_end, t.pid = {derived_pid}
FROM {p}tracks t JOIN {p}offsets o USING (rank) LEFT JOIN ({stats}) s USING (local_track)
ORDER BY t.local_track
""", """
INSERT INTO slices
SELECT n.local_id + {slice_delta}, n.local_track + {track_delta}, {rank_id}, n.ts_ns, n.dur_ns, n.depth,
       nullif(n.parent_local, 0) + {slice_delta},
       CASE WHEN n.seq = x.seq THEN x.name ELSE error('the nested slices are out of step with the slices made') END,
       x.cat, x.ph, x.args
FROM {p}nest n POSITIONAL JOIN {p}x x
"""]
# a track's figures in the tracks table, from its nested slices
TRACK_STATS = """
SELECT local_track, count(*) AS n, max(depth) AS max_depth, max(dur_ns) AS max_dur, min(ts_ns) AS min_ts,
       max(ts_ns + dur_ns) AS max_end
FROM {p}nest GROUP BY local_track
"""

# (already in their final order in the stage: a scan appends them so, with each rank's offsets inlined, no join)
WRITE_REST = ["""
INSERT INTO flows
SELECT f.local_flow + {flow_delta}, {rank_id}, f.cat, f.name, f.flow_key, f.src_track + {track_delta}, f.src_ts_ns,
       f.src_local + {slice_delta}, f.dst_track + {track_delta}, f.dst_ts_ns, f.dst_local + {slice_delta}
FROM {p}flows f
""", """
INSERT INTO counters
SELECT c.local_track + {track_delta}, {rank_id}, c.name, c.series, c.ts_ns, c.value
FROM {p}counters c
""", """
INSERT INTO steps
SELECT {rank_id}, s.step, s.name, s.local_id + {slice_delta}, s.host_start_ns, s.host_end_ns, s.device_start_ns,
       s.device_end_ns
FROM {p}steps s
"""]


def offset_terms(cur, prefix: str, offsets: str = "offsets", column: str = "rank") -> dict[str, str]:
    """The offsets of the stage's ranks (``{prefix}offsets``) as SQL terms of ``column`` (the row's rank): a
    constant for a stage of one rank, else a CASE over its ranks."""
    rows = cur.execute(f"SELECT rank, rank_id, track_delta, slice_delta, flow_delta FROM {prefix}{offsets} "
                       "ORDER BY rank").fetchall()
    terms = {}
    for i, name in enumerate(("rank_id", "track_delta", "slice_delta", "flow_delta"), start=1):
        values = {int(r[0]): int(r[i]) for r in rows}
        if len(set(values.values())) <= 1:
            terms[name] = f"({next(iter(values.values()), 0)})"
        else:
            terms[name] = ("(CASE " + column + " " + " ".join(f"WHEN {r} THEN {v}" for r, v in values.items())
                           + " END)")
    return terms


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

STAGE_TABLES = ("ev_t", "x", "nest", "fe", "fb", "flows_u", "fk", "tracks", "flows", "counters", "steps", "offsets",
                "neg")


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
    tracks, slices = WRITE_SLICES
    cur.execute(tracks.format(p=prefix, derived_pid=derived_pid, stats=TRACK_STATS.format(p=prefix)))
    cur.execute(slices.format(p=prefix, **offset_terms(cur, prefix, column="x.rank")))


def write_rest(cur, prefix: str) -> None:
    """Append the derived ranks' flows, counters and steps (ids from ``{prefix}offsets``)."""
    terms = offset_terms(cur, prefix)
    for sql in WRITE_REST:
        cur.execute(sql.format(p=prefix, **terms))


def unwrite(cur, ranks: list[int]) -> None:
    """Remove what write_slices/write_rest appended for ``ranks`` (a trace failed part way)."""
    for table in ("tracks", "slices", "flows", "counters", "steps"):
        cur.execute(f"DELETE FROM {table} WHERE list_contains(?, rank)", [list(ranks)])


def drop_stage(cur, prefix: str) -> None:
    cur.execute(f"DROP VIEW IF EXISTS {prefix}ev")
    for t in STAGE_TABLES:
        cur.execute(f"DROP TABLE IF EXISTS {prefix}{t}")

