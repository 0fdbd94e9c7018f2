"""Level-of-detail summaries of the slices, so a zoomed-out timeline never scans every slice.

Level ``L`` groups the slices of each (track, depth) into buckets of ``bucket_ns = base * FACTOR**L`` and keeps
the count, the extent and the longest slice of each bucket (a "mipmap", as Perfetto does). Drawing the longest
slice of every bucket at about two buckets per pixel looks like drawing all of them.

It is equal to this naive SQL over ``slices`` (``tests/ingest/test_lod.py`` checks it on the real samples):

    SELECT track_id, depth, ts_ns // W AS bucket, count(*) AS slice_count,
           arg_max(slice_id, (dur_ns, -slice_id)) AS slice_id,        -- longest; ties: smallest id
           min(ts_ns) AS min_ts_ns, max(ts_ns + dur_ns) AS max_end_ns, sum(dur_ns) AS total_dur_ns
    FROM slices GROUP BY track_id, depth, bucket

with ``ts_ns``, ``dur_ns`` and ``name`` those of ``slice_id``. Level 0 is computed from ``slices``; each next
level from the previous one (``bucket // FACTOR``), which gives the same result because the buckets nest. The
"longest, ties to the smallest id" order is packed into one HUGEINT key, ``(dur_ns << 40) - slice_id``, which
aggregates much faster than a struct.

Each database (a run file, or one shard of a sharded run) chooses its own widths, so a shard is complete the
moment it is written; ``lod_levels`` lists the levels per rank and the server chooses a level per rank.

The base width is chosen so that level 0 could hold at most half as many buckets (over all (track, depth) rows) as
there are slices: finer levels would be nearly as large as ``slices`` itself and save nothing (at such zoom the
exact slices are cheap to read).
"""

from __future__ import annotations

MIN_BUCKET_NS = 1024
FACTOR = 4
TOP_BUCKETS = 256  # stop once the whole run fits in this many buckets
KEY = "((dur_ns::HUGEINT << 40) - slice_id)"

LEVEL0 = f"""
CREATE OR REPLACE TEMP TABLE _lod_0 AS
SELECT track_id, depth, ts_ns // ? AS bucket, count(*) AS slice_count, max({KEY}) AS k,
       arg_max(slice_id, {KEY}) AS slice_id, arg_max(ts_ns, {KEY}) AS ts_ns, arg_max(dur_ns, {KEY}) AS dur_ns,
       arg_max(name, {KEY}) AS name, min(ts_ns) AS min_ts_ns, max(ts_ns + dur_ns) AS max_end_ns,
       sum(dur_ns) AS total_dur_ns
FROM slices GROUP BY ALL
"""

NEXT_LEVEL = """
CREATE OR REPLACE TEMP TABLE _lod_{next} AS
SELECT track_id, depth, bucket // {factor} AS bucket, sum(slice_count) AS slice_count, max(k) AS k,
       arg_max(slice_id, k) AS slice_id, arg_max(ts_ns, k) AS ts_ns, arg_max(dur_ns, k) AS dur_ns,
       arg_max(name, k) AS name, min(min_ts_ns) AS min_ts_ns, max(max_end_ns) AS max_end_ns,
       sum(total_dur_ns) AS total_dur_ns
FROM _lod_{prev} GROUP BY ALL
"""

COLUMNS = ("track_id, depth, bucket, slice_count::BIGINT AS slice_count, slice_id, ts_ns, dur_ns, name, min_ts_ns, "
           "max_end_ns, total_dur_ns::BIGINT AS total_dur_ns")


def base_bucket_ns(rows: list[tuple[int, int]], slices: int) -> int:
    """The finest width whose level would hold at most half as many buckets as there are slices.

    ``rows`` is (slice count, extent in ns) per (track, depth): a row of buckets holds at most one bucket per
    slice and one per ``width`` of extent, whichever is fewer."""
    width = MIN_BUCKET_NS
    widest = max((extent for _, extent in rows), default=0)
    # each row keeps at least one bucket, so stop once a bucket spans the widest row: coarser saves nothing
    while width <= widest and sum(min(n, extent // width + 1) for n, extent in rows) > max(1, slices // 2):
        width *= FACTOR
    return width


def build(con, base_ns: int | None = None) -> list[tuple[int, int, int]]:
    """Create ``slice_lod`` and ``lod_levels``; return (level, bucket_ns, rows) per level.

    ``base_ns`` forces level 0's width (tests use it to exercise many levels on small data). The levels are
    those of this database's slices; ``lod_levels`` lists them for every rank that has slices here (a shard's
    levels are its own: the server picks a level per rank)."""
    span, n = con.execute("SELECT max(ts_ns + dur_ns) - min(ts_ns), count(*) FROM slices").fetchone()
    levels: list[tuple[int, int, int]] = []
    if span is not None and n:
        rows = con.execute("SELECT count(*), max(ts_ns + dur_ns) - min(ts_ns) FROM slices "
                           "GROUP BY track_id, depth").fetchall()
        width = base_ns or base_bucket_ns(rows, n)
        con.execute(LEVEL0, [width])
        level = 0
        while True:
            rows = con.execute(f"SELECT count(*) FROM _lod_{level}").fetchone()[0]
            levels.append((level, width, rows))
            if width * TOP_BUCKETS >= span:
                break
            con.execute(NEXT_LEVEL.format(next=level + 1, prev=level, factor=FACTOR))
            width, level = width * FACTOR, level + 1
    parts = [f"SELECT {lv} AS level, {w}::BIGINT AS bucket_ns, {COLUMNS} FROM _lod_{lv}" for lv, w, _ in levels]
    if parts:
        # stored ordered by (level, track, depth, bucket), so zone maps prune a viewport query
        con.execute("CREATE OR REPLACE TABLE slice_lod AS SELECT * FROM (" + " UNION ALL ".join(parts) +
                    ") ORDER BY level, track_id, depth, bucket")
    else:
        con.execute(f"CREATE OR REPLACE TABLE slice_lod AS SELECT 0 AS level, 0::BIGINT AS bucket_ns, {COLUMNS} "
                    "FROM slices s, (SELECT 0::BIGINT AS bucket, 0::BIGINT AS slice_count, 0::BIGINT AS min_ts_ns, "
                    "0::BIGINT AS max_end_ns, 0::BIGINT AS total_dur_ns) WHERE false")
    for lv, _, _ in levels:
        con.execute(f"DROP TABLE _lod_{lv}")
    con.execute(LOD_LEVELS_DDL)
    if levels:
        con.execute("INSERT INTO lod_levels SELECT v.level, v.bucket_ns, v.row_count, r.rank FROM (VALUES "
                    + ", ".join("(?, ?, ?)" for _ in levels) + ") v(level, bucket_ns, row_count), "
                    "(SELECT DISTINCT rank FROM tracks WHERE slice_count > 0) r ORDER BY r.rank, v.level",
                    [x for level in levels for x in level])
    return levels


# one row per (rank, level): the widths a rank's slices are summarised at (row_count: the level's rows in this
# database, all ranks together)
LOD_LEVELS_DDL = "CREATE OR REPLACE TABLE lod_levels (level INTEGER, bucket_ns BIGINT, row_count BIGINT, rank INTEGER)"
