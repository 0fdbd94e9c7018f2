"""Level-of-detail summaries of the slices, so a zoomed-out timeline never scans every slice.

Level ``L`` groups the slices of each (track, depth) into buckets of ``bucket_ns = BASE_BUCKET_NS * FACTOR**L``
and keeps the count, the extent and the longest slice of each bucket (a "mipmap", as Perfetto does). Drawing the
longest slice of every bucket at about two buckets per pixel looks like drawing all of them.

It is equal to this naive SQL over ``slices`` (``tests/test_lod.py`` checks it on the real samples):

    SELECT track_id, depth, ts_ns // W AS bucket, count(*) AS slice_count,
           arg_max(slice_id, (dur_ns, -slice_id)) AS slice_id,        -- longest; ties: smallest id
           min(ts_ns) AS min_ts_ns, max(ts_ns + dur_ns) AS max_end_ns, sum(dur_ns) AS total_dur_ns
    FROM slices GROUP BY track_id, depth, bucket

with ``ts_ns``, ``dur_ns`` and ``name`` those of ``slice_id``. Level 0 is computed from ``slices``; each next
level from the previous one (``bucket // FACTOR``), which gives the same result because the buckets nest.
"""

from __future__ import annotations

BASE_BUCKET_NS = 1024
FACTOR = 4
TOP_BUCKETS = 256  # stop once the whole run fits in this many buckets

LEVEL0 = """
INSERT INTO slice_lod
SELECT 0, ?, track_id, depth, ts_ns // ? AS bucket, count(*),
       arg_max({'id': slice_id, 'ts': ts_ns, 'dur': dur_ns, 'name': name}, (dur_ns, -slice_id)) AS top,
       min(ts_ns), max(ts_ns + dur_ns), sum(dur_ns)
FROM slices GROUP BY track_id, depth, bucket ORDER BY track_id, depth, bucket
"""

NEXT_LEVEL = """
INSERT INTO slice_lod
SELECT ?, ?, track_id, depth, bucket // ? AS b, sum(slice_count),
       arg_max(top, (top.dur, -top.id)), min(min_ts_ns), max(max_end_ns), sum(total_dur_ns)
FROM slice_lod WHERE level = ? GROUP BY track_id, depth, b ORDER BY track_id, depth, b
"""

CREATE = """
CREATE OR REPLACE TABLE slice_lod (
    level INTEGER, bucket_ns BIGINT, track_id INTEGER, depth INTEGER, bucket BIGINT, slice_count BIGINT,
    top STRUCT(id BIGINT, ts BIGINT, dur BIGINT, name VARCHAR),
    min_ts_ns BIGINT, max_end_ns BIGINT, total_dur_ns BIGINT)
"""

FINAL = """
CREATE OR REPLACE TABLE slice_lod_final AS
SELECT level, bucket_ns, track_id, depth, bucket, slice_count, top.id AS slice_id, top.ts AS ts_ns,
       top.dur AS dur_ns, top.name AS name, min_ts_ns, max_end_ns, total_dur_ns
FROM slice_lod
"""


def build(con) -> list[tuple[int, int, int]]:
    """Create ``slice_lod`` and ``lod_levels``; return (level, bucket_ns, rows) per level."""
    con.execute(CREATE)
    span = con.execute("SELECT max(ts_ns + dur_ns) - min(ts_ns) FROM slices").fetchone()[0] or 0
    levels = []
    if span:
        width, level = BASE_BUCKET_NS, 0
        con.execute(LEVEL0, [width, width])
        while True:
            rows = con.execute("SELECT count(*) FROM slice_lod WHERE level = ?", [level]).fetchone()[0]
            levels.append((level, width, rows))
            if width * TOP_BUCKETS >= span:
                break
            con.execute(NEXT_LEVEL, [level + 1, width * FACTOR, FACTOR, level])
            width, level = width * FACTOR, level + 1
    con.execute(FINAL)  # insertion order (level, track, depth, bucket) is kept, so zone maps prune
    con.execute("DROP TABLE slice_lod")
    con.execute("ALTER TABLE slice_lod_final RENAME TO slice_lod")
    con.execute("CREATE OR REPLACE TABLE lod_levels (level INTEGER, bucket_ns BIGINT, row_count BIGINT)")
    if levels:
        con.executemany("INSERT INTO lod_levels VALUES (?, ?, ?)", levels)
    return levels
