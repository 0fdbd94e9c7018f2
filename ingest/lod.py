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


def inputs(con) -> dict:
    """What :func:`build` needs to know of these slices to choose widths over several shards at once: the slice
    count, the extent, the widest (track, depth) row and, per candidate width ``MIN_BUCKET_NS * FACTOR**k``, the
    buckets its level would hold (summed over shards, they give :func:`base_bucket_ns` of the whole run)."""
    rows = con.execute("SELECT count(*), max(ts_ns + dur_ns) - min(ts_ns) FROM slices GROUP BY track_id, depth"
                       ).fetchall()
    n, lo, hi = con.execute("SELECT count(*), min(ts_ns), max(ts_ns + dur_ns) FROM slices").fetchone()
    buckets, width = [], MIN_BUCKET_NS
    while width <= max((extent for _, extent in rows), default=0):
        buckets.append(sum(min(c, extent // width + 1) for c, extent in rows))
        width *= FACTOR
    return {"slices": n, "rows": len(rows), "min_ts_ns": lo, "max_end_ns": hi,
            "widest": max((extent for _, extent in rows), default=0), "buckets": buckets}


def base_from_inputs(parts: list[dict]) -> tuple[int, int] | None:
    """(level 0 width, extent) of the union of the shards whose :func:`inputs` these are; None without slices.
    Equal to :func:`base_bucket_ns` over all their rows at once."""
    parts = [p for p in parts if p["slices"]]
    if not parts:
        return None
    slices, widest = sum(p["slices"] for p in parts), max(p["widest"] for p in parts)
    width, k = MIN_BUCKET_NS, 0
    # past a shard's widest row each of its rows keeps one bucket
    while width <= widest and sum(p["buckets"][k] if k < len(p["buckets"]) else p["rows"]
                                  for p in parts) > max(1, slices // 2):
        width, k = width * FACTOR, k + 1
    return width, max(p["max_end_ns"] for p in parts) - min(p["min_ts_ns"] for p in parts)


def build(con, base_ns: int | None = None, span_ns: int | None = None, *,
          defer: bool = False) -> list[tuple[int, int, int]]:
    """Create ``slice_lod`` and ``lod_levels``; return (level, bucket_ns, rows) per level.

    ``base_ns`` forces level 0's width (tests use it to exercise many levels on small data; a shard gets its
    run's, see :func:`inputs`), ``span_ns`` the extent the top level must cover (a shard: its run's), so every shard
    of a run has the same levels. ``defer`` creates both tables empty."""
    span, n = con.execute("SELECT max(ts_ns + dur_ns) - min(ts_ns), count(*) FROM slices").fetchone()
    if defer:
        span, n = None, 0
    elif span is not None and span_ns is not None:
        span = max(span, span_ns)
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
    con.execute("CREATE OR REPLACE TABLE lod_levels (level INTEGER, bucket_ns BIGINT, row_count BIGINT)")
    if levels:
        con.executemany("INSERT INTO lod_levels VALUES (?, ?, ?)", levels)
    return levels
