"""SQL of the timeline queries (``server.queries.timeline`` and ``timeline_details``), as named constants with
bound ($name) parameters; user input never enters the text. The viewport queries name their table as ``{slices}``,
``{slice_lod}`` or ``{counters}``: the run's table, or one shard's (``timeline.tables``), filled in from the
database's own catalog.

A list of slices names each by ``{shown}``-style expressions (``server.queries.shown_name_sql``): a name longer than
``MAX_NAME_CHARS`` leaves the database cut, so a hostile 20 MB name costs no more than a short one.

Conventions: ``$origin`` is the run origin (times leave relative to it); ``$start``/``$end`` the window in absolute
epoch ns. The overlap test ``ts < end AND (ts + dur > start OR ts >= start)`` keeps instants (dur 0) inside the
window; the bound ``ts_ns >= start - max_dur_of_track`` adds nothing logically but lets the zone maps of the
ts-ordered ``slices`` table prune (PERF_NOTES.md).
"""

from ascendscope.server.queries import MAX_NAME_CHARS, shown_name_sql

SHOWN_NAME = shown_name_sql("name")

# Dense or sparse, for several tracks at once, from the level-of-detail table: slices starting in the window, summed
# over the buckets of a level coarse enough to be small (a count by start: slices reaching in from the left are not
# counted, which only matters near the threshold). One scan of a few hundred rows instead of one count per track.
SLICES_LOD_COUNT_SQL = """
SELECT track_id, sum(slice_count) AS n
FROM {slice_lod}
WHERE level = $level AND track_id BETWEEN $track_min AND $track_max AND list_contains($tracks, track_id)
  AND bucket >= $bucket_lo AND bucket <= $bucket_hi
GROUP BY track_id
"""
SLICES_EXACT_SQL = """
SELECT ts_ns - $origin AS ts_ns, dur_ns, depth, name, slice_id
FROM {slices}
WHERE track_id = $track AND ts_ns >= $lo AND ts_ns < $end AND (ts_ns + dur_ns > $start OR ts_ns >= $start)
ORDER BY slice_id
LIMIT $limit
"""
# The same for several tracks in one scan: each track keeps its own prunable bound (a join on the requested
# (track, lo) pairs); the BETWEEN and the smallest lo let the zone maps prune for all of them. $limit (the cap + 1)
# holds per track: one dense track cannot use up the rows of the others.
SLICES_EXACT_BATCH_SQL = """
SELECT s.track_id, s.ts_ns - $origin AS ts_ns, s.dur_ns, s.depth, s.name, s.slice_id
FROM {slices} s JOIN (SELECT unnest($tracks) AS track_id, unnest($los) AS lo) r
  ON s.track_id = r.track_id AND s.ts_ns >= r.lo
WHERE s.track_id BETWEEN $track_min AND $track_max AND s.ts_ns >= $lo_min AND s.ts_ns < $end
  AND (s.ts_ns + s.dur_ns > $start OR s.ts_ns >= $start)
QUALIFY row_number() OVER (PARTITION BY s.track_id ORDER BY s.slice_id) <= $limit
ORDER BY s.track_id, s.slice_id
"""
# Level of detail: the rows of the slice_lod level whose bucket_ns is just below the target, for all dense tracks
# of a request at once. Per track it equals the naive
#   SELECT depth, ts_ns // bucket_ns AS b, count(*), arg_max(slice_id, (dur_ns, -slice_id)),
#          min(ts_ns), max(ts_ns + dur_ns)
#   FROM slices WHERE track_id = $track GROUP BY depth, b HAVING max(ts_ns + dur_ns) > $start AND min(ts_ns) < $end
# (ingest/lod.py; tests/server/api/test_api_timeline.py checks it); each row is drawn over its bucket's extent
# [min_ts_ns, max_end_ns). The BETWEEN and bucket bounds add nothing logically: they let the zone maps prune.
# $limit (the cap + 1) holds per track.
SLICES_LOD_SQL = """
SELECT track_id, min_ts_ns - $origin AS ts_ns, max_end_ns - min_ts_ns AS dur_ns, depth, name, slice_id, slice_count
FROM {slice_lod}
WHERE level = $level AND track_id BETWEEN $track_min AND $track_max AND list_contains($tracks, track_id)
  AND bucket >= $bucket_lo AND bucket <= $bucket_hi AND max_end_ns > $start AND min_ts_ns < $end
QUALIFY row_number() OVER (PARTITION BY track_id ORDER BY depth, bucket) <= $limit
ORDER BY track_id, depth, bucket
"""
COUNTER_SERIES_SQL = """
SELECT track_id, series, count(*) AS points, min(value) AS min_value, max(value) AS max_value
FROM counters GROUP BY track_id, series ORDER BY track_id, series
"""
COUNTER_COUNT_SQL = """
SELECT count(*) FROM {counters} WHERE track_id = $track AND ts_ns >= $start AND ts_ns < $end
"""
COUNTER_EXACT_SQL = """
SELECT series, ts_ns - $origin AS ts_ns, value FROM {counters}
WHERE track_id = $track AND ts_ns >= $start AND ts_ns < $end
ORDER BY series, ts_ns, value LIMIT $limit
"""
COUNTER_LOD_SQL = """
SELECT series, (ts_ns // $bucket) * $bucket - $origin AS ts_ns, max(value) AS value, min(value) AS value_min
FROM {counters}
WHERE track_id = $track AND ts_ns >= $start AND ts_ns < $end
GROUP BY series, ts_ns // $bucket
ORDER BY series, ts_ns LIMIT $limit
"""
# the last point before the window and the first after it, so a line reaches the window's edges; samples at one
# time (real traces have dozens) are told apart by value, so every layout and every run of a query answer the same
COUNTER_EDGES_SQL = """
SELECT series, max(ts_ns) FILTER (WHERE ts_ns < $start) - $origin AS before_ts_ns,
       arg_max(value, (ts_ns, value)) FILTER (WHERE ts_ns < $start) AS before_value,
       min(ts_ns) FILTER (WHERE ts_ns >= $end) - $origin AS after_ts_ns,
       arg_min(value, (ts_ns, value)) FILTER (WHERE ts_ns >= $end) AS after_value
FROM {counters} WHERE track_id = $track AND (ts_ns < $start OR ts_ns >= $end)
GROUP BY series
"""
FLOW_CATEGORIES_SQL = "SELECT coalesce(cat, '') AS cat, count(*) AS count FROM flows GROUP BY ALL ORDER BY cat"
# the flows are picked (and capped) first; only those few then look up their ends' depths (a join of every flow
# in the window with slices would scan the slices of every shard for each request)
FLOWS_IN_RANGE_SQL = """
WITH f AS (
  SELECT flow_id, cat, src_track_id, src_ts_ns, src_slice_id, dst_track_id, dst_ts_ns, dst_slice_id
  FROM flows
  WHERE (len($cats) = 0 OR list_contains($cats, coalesce(cat, '')))
    AND least(src_ts_ns, dst_ts_ns) < $end AND greatest(src_ts_ns, dst_ts_ns) >= $start
  ORDER BY flow_id
  LIMIT $limit
)
SELECT f.flow_id, coalesce(f.cat, '') AS cat,
       f.src_track_id, f.src_ts_ns - $origin AS src_ts_ns, f.src_slice_id, s.depth AS src_depth,
       f.dst_track_id, f.dst_ts_ns - $origin AS dst_ts_ns, f.dst_slice_id, d.depth AS dst_depth
FROM f
LEFT JOIN slices s ON s.slice_id = f.src_slice_id
LEFT JOIN slices d ON d.slice_id = f.dst_slice_id
ORDER BY f.flow_id
"""
SLICE_SQL = """
SELECT slice_id, track_id, rank, ts_ns, dur_ns, depth, parent_id, name, cat, ph, args
FROM slices WHERE slice_id = $id
"""
SLICE_BRIEF_SQL = f"""
SELECT slice_id, track_id, ts_ns - $origin AS ts_ns, dur_ns, depth, {SHOWN_NAME} AS name
FROM slices WHERE list_contains($ids, slice_id)
"""
SLICE_NAME_SQL = "SELECT name FROM slices WHERE slice_id = $id"
CHILDREN_SQL = f"""
SELECT slice_id, ts_ns - $origin AS ts_ns, dur_ns, {SHOWN_NAME} AS name, count(*) OVER () AS total
FROM slices
WHERE track_id = $track AND ts_ns >= $start AND ts_ns <= $end AND parent_id = $id
ORDER BY ts_ns, slice_id
LIMIT $limit
"""
SLICE_FLOWS_SQL = f"""
SELECT flow_id, coalesce(cat, '') AS cat, {SHOWN_NAME} AS name, src_slice_id = $id AS outgoing,
       src_track_id, src_ts_ns - $origin AS src_ts_ns, src_slice_id,
       dst_track_id, dst_ts_ns - $origin AS dst_ts_ns, dst_slice_id
FROM flows WHERE src_slice_id = $id OR dst_slice_id = $id
ORDER BY flow_id LIMIT $limit
"""
KERNEL_SQL = """
SELECT * EXCLUDE (rank) FROM kernels WHERE rank = $rank AND start_ns = $ts ORDER BY src_row LIMIT 1
"""
SEARCH_COUNT_SQL = "SELECT count(*) FROM slices WHERE contains(lower(name), $q)"
SEARCH_AFTER_SQL = f"""
SELECT slice_id, track_id, rank, ts_ns - $origin AS ts_ns, dur_ns, depth, {SHOWN_NAME} AS name
FROM slices
WHERE contains(lower(name), $q) AND (ts_ns > $ts OR (ts_ns = $ts AND slice_id > $id))
ORDER BY ts_ns, slice_id LIMIT $limit
"""
SEARCH_BEFORE_SQL = f"""
SELECT slice_id, track_id, rank, ts_ns - $origin AS ts_ns, dur_ns, depth, {SHOWN_NAME} AS name
FROM slices
WHERE contains(lower(name), $q) AND (ts_ns < $ts OR (ts_ns = $ts AND slice_id < $id))
ORDER BY ts_ns DESC, slice_id DESC LIMIT $limit
"""
# Range statistics. $offset_ranks/$offset_ns shift ranks whose clocks differ (the timeline's per-rank offsets):
# a slice counts when its shifted interval overlaps the window; $lo/$hi bound its raw start for the zone maps.
RANGE_SCOPE_CTE = """
WITH o AS (SELECT unnest($offset_ranks) AS rank, unnest($offset_ns) AS off),
s AS (
  SELECT s.slice_id, s.track_id, s.ts_ns, s.dur_ns, s.depth, s.name, s.ts_ns + coalesce(o.off, 0) AS shown_ns
  FROM slices s LEFT JOIN o ON o.rank = s.rank
  WHERE (len($tracks) = 0 OR list_contains($tracks, s.track_id)) AND s.ts_ns >= $lo AND s.ts_ns < $hi
    AND s.ts_ns + coalesce(o.off, 0) < $end
    AND (s.ts_ns + coalesce(o.off, 0) + s.dur_ns > $start OR s.ts_ns + coalesce(o.off, 0) >= $start)
),
kids AS (  -- the part of each slice its children cover (children start inside their parent: raw start < $kids_hi)
  SELECT c.parent_id, sum(least(c.ts_ns + c.dur_ns, p.ts_ns + p.dur_ns) - greatest(c.ts_ns, p.ts_ns)) AS covered
  FROM slices c JOIN s p ON p.slice_id = c.parent_id
  WHERE c.ts_ns >= $lo AND c.ts_ns < $kids_hi AND c.ts_ns + c.dur_ns > p.ts_ns AND c.ts_ns < p.ts_ns + p.dur_ns
  GROUP BY c.parent_id
),
r AS (
  SELECT s.*, CAST(greatest(s.dur_ns - coalesce(kids.covered, 0), 0) AS BIGINT) AS self_ns
  FROM s LEFT JOIN kids ON kids.parent_id = s.slice_id
)"""
RANGE_STATS_SQL = RANGE_SCOPE_CTE + f""",
per_name AS (
  SELECT name, count(*) AS count, CAST(sum(dur_ns) AS BIGINT) AS total_ns, avg(dur_ns) AS avg_ns,
         min(dur_ns) AS min_ns, max(dur_ns) AS max_ns, CAST(sum(self_ns) AS BIGINT) AS self_ns,
         CAST(sum(sum(self_ns)) OVER () AS BIGINT) AS all_self_ns
  FROM r
  GROUP BY name
  ORDER BY total_ns DESC, name
  LIMIT $limit
)
SELECT * REPLACE ({SHOWN_NAME} AS name) FROM per_name ORDER BY total_ns DESC, name
"""
RANGE_TOTALS_SQL = """
WITH o AS (SELECT unnest($offset_ranks) AS rank, unnest($offset_ns) AS off)
SELECT count(*) AS count, CAST(coalesce(sum(s.dur_ns), 0) AS BIGINT) AS total_ns, count(DISTINCT s.name) AS names
FROM slices s LEFT JOIN o ON o.rank = s.rank
WHERE (len($tracks) = 0 OR list_contains($tracks, s.track_id)) AND s.ts_ns >= $lo AND s.ts_ns < $hi
  AND s.ts_ns + coalesce(o.off, 0) < $end
  AND (s.ts_ns + coalesce(o.off, 0) + s.dur_ns > $start OR s.ts_ns + coalesce(o.off, 0) >= $start)
"""
# the slices of one name in the range, in (shifted) time order, with their self time
RANGE_INSTANCES_SQL = RANGE_SCOPE_CTE + """
SELECT slice_id, track_id, shown_ns - $origin AS ts_ns, dur_ns, depth, self_ns, count(*) OVER () AS total
FROM r WHERE name = $name
ORDER BY shown_ns, slice_id
LIMIT $limit OFFSET $offset
"""
# … of a name range_stats answered cut: every name longer than the cut that starts with its kept part
RANGE_INSTANCES_CUT_SQL = RANGE_INSTANCES_SQL.replace(
    "WHERE name = $name", f"WHERE starts_with(name, $name) AND length(name) > {MAX_NAME_CHARS}")
# "align on this slice": the slice's occurrence among the same-named slices of its rank's lanes of its kind, and
# the slice at that occurrence (or, when there are fewer, the nearest in time) on another rank
ALIGN_OCCURRENCE_SQL = """
SELECT count(*) FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = $rank AND t.kind = $kind AND s.name = $name
  AND (s.ts_ns < $ts OR (s.ts_ns = $ts AND s.slice_id < $id))
"""
ALIGN_MATCH_SQL = """
SELECT s.slice_id, s.track_id, s.rank, s.ts_ns, s.dur_ns, s.depth, s.name
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = $rank AND t.kind = $kind AND s.name = $name
ORDER BY s.ts_ns, s.slice_id LIMIT 1 OFFSET $k
"""
ALIGN_NEAREST_SQL = """
SELECT s.slice_id, s.track_id, s.rank, s.ts_ns, s.dur_ns, s.depth, s.name
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = $rank AND t.kind = $kind AND s.name = $name
ORDER BY abs(s.ts_ns - $ts), s.slice_id LIMIT 1
"""
