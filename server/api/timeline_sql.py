"""SQL of the timeline API, as named constants with bound ($name) parameters; user input never enters the text.

Conventions: ``$origin`` is the run origin (times leave relative to it); ``$start``/``$end`` the window in absolute
epoch ns. The overlap test ``ts < end AND (ts + dur > start OR ts >= start)`` keeps instants (dur 0) inside the
window; the bound ``ts_ns >= start - max_dur_of_track`` adds nothing logically but lets the zone maps of the
ts-ordered ``slices`` table prune (PERF_NOTES.md).
"""

SLICES_PER_PX = 2  # more slices than this per pixel in the window: answer from slice_lod
DENSITY_MARGIN = 8  # an extent-based estimate this far from the threshold decides without counting

# Dense or sparse, for several tracks at once, from the level-of-detail table: slices starting in the window, summed over
# the buckets of a level coarse enough to be small (a count by start: slices reaching in from the left are not
# counted, which only matters near the threshold). One scan of a few hundred rows instead of one count per track.
SLICES_LOD_COUNT_SQL = """
SELECT track_id, sum(slice_count) AS n
FROM slice_lod
WHERE level = $level AND track_id BETWEEN $track_min AND $track_max AND list_contains($tracks, track_id)
  AND bucket >= $bucket_lo AND bucket <= $bucket_hi
GROUP BY track_id
"""
SLICES_EXACT_SQL = """
SELECT ts_ns - $origin AS ts_ns, dur_ns, depth, name, slice_id
FROM slices
WHERE track_id = $track AND ts_ns >= $lo AND ts_ns < $end AND (ts_ns + dur_ns > $start OR ts_ns >= $start)
ORDER BY slice_id
LIMIT $limit
"""
# The same for several tracks in one scan: each track keeps its own prunable bound (a join on the requested
# (track, lo) pairs); the BETWEEN and the smallest lo let the zone maps prune for all of them.
SLICES_EXACT_BATCH_SQL = """
SELECT s.track_id, s.ts_ns - $origin AS ts_ns, s.dur_ns, s.depth, s.name, s.slice_id
FROM slices s JOIN (SELECT unnest($tracks) AS track_id, unnest($los) AS lo) r
  ON s.track_id = r.track_id AND s.ts_ns >= r.lo
WHERE s.track_id BETWEEN $track_min AND $track_max AND s.ts_ns >= $lo_min AND s.ts_ns < $end
  AND (s.ts_ns + s.dur_ns > $start OR s.ts_ns >= $start)
ORDER BY s.track_id, s.slice_id
LIMIT $limit
"""
# Level of detail: the rows of the slice_lod level whose bucket_ns is just below the target, for all dense tracks
# of a request at once. Per track it equals the naive
#   SELECT depth, ts_ns // bucket_ns AS b, count(*), arg_max(slice_id, (dur_ns, -slice_id)),
#          min(ts_ns), max(ts_ns + dur_ns)
#   FROM slices WHERE track_id = $track GROUP BY depth, b HAVING max(ts_ns + dur_ns) > $start AND min(ts_ns) < $end
# (ingest/lod.py; tests/test_api_timeline.py checks it); each row is drawn over its bucket's extent
# [min_ts_ns, max_end_ns). The BETWEEN and bucket bounds add nothing logically: they let the zone maps prune.
SLICES_LOD_SQL = """
SELECT track_id, min_ts_ns - $origin AS ts_ns, max_end_ns - min_ts_ns AS dur_ns, depth, name, slice_id, slice_count
FROM slice_lod
WHERE level = $level AND track_id BETWEEN $track_min AND $track_max AND list_contains($tracks, track_id)
  AND bucket >= $bucket_lo AND bucket <= $bucket_hi AND max_end_ns > $start AND min_ts_ns < $end
ORDER BY track_id, depth, bucket
LIMIT $limit
"""
COUNTER_SERIES_SQL = """
SELECT track_id, series, count(*) AS points, min(value) AS min_value, max(value) AS max_value
FROM counters GROUP BY track_id, series ORDER BY track_id, series
"""
COUNTER_COUNT_SQL = """
SELECT count(*) FROM counters WHERE track_id = $track AND ts_ns >= $start AND ts_ns < $end
"""
COUNTER_EXACT_SQL = """
SELECT series, ts_ns - $origin AS ts_ns, value FROM counters
WHERE track_id = $track AND ts_ns >= $start AND ts_ns < $end
ORDER BY series, ts_ns LIMIT $limit
"""
COUNTER_LOD_SQL = """
SELECT series, (ts_ns // $bucket) * $bucket - $origin AS ts_ns, max(value) AS value, min(value) AS value_min
FROM counters
WHERE track_id = $track AND ts_ns >= $start AND ts_ns < $end
GROUP BY series, ts_ns // $bucket
ORDER BY series, ts_ns LIMIT $limit
"""
# the last point before the window and the first after it, so a line reaches the window's edges
COUNTER_EDGES_SQL = """
SELECT series, max(ts_ns) FILTER (WHERE ts_ns < $start) - $origin AS before_ts_ns,
       arg_max(value, ts_ns) FILTER (WHERE ts_ns < $start) AS before_value,
       min(ts_ns) FILTER (WHERE ts_ns >= $end) - $origin AS after_ts_ns,
       arg_min(value, ts_ns) FILTER (WHERE ts_ns >= $end) AS after_value
FROM counters WHERE track_id = $track AND (ts_ns < $start OR ts_ns >= $end)
GROUP BY series
"""
FLOW_CATEGORIES_SQL = "SELECT coalesce(cat, '') AS cat, count(*) AS count FROM flows GROUP BY ALL ORDER BY cat"
FLOWS_IN_RANGE_SQL = """
SELECT f.flow_id, coalesce(f.cat, '') AS cat,
       f.src_track_id, f.src_ts_ns - $origin AS src_ts_ns, f.src_slice_id, s.depth AS src_depth,
       f.dst_track_id, f.dst_ts_ns - $origin AS dst_ts_ns, f.dst_slice_id, d.depth AS dst_depth
FROM flows f
LEFT JOIN slices s ON s.slice_id = f.src_slice_id
LEFT JOIN slices d ON d.slice_id = f.dst_slice_id
WHERE (len($cats) = 0 OR list_contains($cats, coalesce(f.cat, '')))
  AND least(f.src_ts_ns, f.dst_ts_ns) < $end AND greatest(f.src_ts_ns, f.dst_ts_ns) >= $start
ORDER BY f.flow_id
LIMIT $limit
"""
SLICE_SQL = """
SELECT slice_id, track_id, rank, ts_ns, dur_ns, depth, parent_id, name, cat, ph, args
FROM slices WHERE slice_id = $id
"""
SLICE_BRIEF_SQL = """
SELECT slice_id, track_id, ts_ns - $origin AS ts_ns, dur_ns, depth, name
FROM slices WHERE list_contains($ids, slice_id)
"""
CHILDREN_SQL = """
SELECT slice_id, ts_ns - $origin AS ts_ns, dur_ns, name, count(*) OVER () AS total
FROM slices
WHERE track_id = $track AND ts_ns >= $start AND ts_ns <= $end AND parent_id = $id
ORDER BY ts_ns, slice_id
LIMIT $limit
"""
SLICE_FLOWS_SQL = """
SELECT flow_id, coalesce(cat, '') AS cat, name, src_slice_id = $id AS outgoing,
       src_track_id, src_ts_ns - $origin AS src_ts_ns, src_slice_id,
       dst_track_id, dst_ts_ns - $origin AS dst_ts_ns, dst_slice_id
FROM flows WHERE src_slice_id = $id OR dst_slice_id = $id
ORDER BY flow_id LIMIT $limit
"""
KERNEL_SQL = """
SELECT * EXCLUDE (rank) FROM kernels WHERE rank = $rank AND start_ns = $ts ORDER BY src_row LIMIT 1
"""
SEARCH_COUNT_SQL = "SELECT count(*) FROM slices WHERE contains(lower(name), $q)"
SEARCH_AFTER_SQL = """
SELECT slice_id, track_id, rank, ts_ns - $origin AS ts_ns, dur_ns, depth, name
FROM slices
WHERE contains(lower(name), $q) AND (ts_ns > $ts OR (ts_ns = $ts AND slice_id > $id))
ORDER BY ts_ns, slice_id LIMIT $limit
"""
SEARCH_BEFORE_SQL = """
SELECT slice_id, track_id, rank, ts_ns - $origin AS ts_ns, dur_ns, depth, name
FROM slices
WHERE contains(lower(name), $q) AND (ts_ns < $ts OR (ts_ns = $ts AND slice_id < $id))
ORDER BY ts_ns DESC, slice_id DESC LIMIT $limit
"""
RANGE_STATS_SQL = """
SELECT name, count(*) AS count, CAST(sum(dur_ns) AS BIGINT) AS total_ns, avg(dur_ns) AS avg_ns,
       min(dur_ns) AS min_ns, max(dur_ns) AS max_ns
FROM slices
WHERE (len($tracks) = 0 OR list_contains($tracks, track_id))
  AND ts_ns >= $lo AND ts_ns < $end AND (ts_ns + dur_ns > $start OR ts_ns >= $start)
GROUP BY name
ORDER BY total_ns DESC, name
LIMIT $limit
"""
RANGE_TOTALS_SQL = """
SELECT count(*) AS count, CAST(coalesce(sum(dur_ns), 0) AS BIGINT) AS total_ns, count(DISTINCT name) AS names
FROM slices
WHERE (len($tracks) = 0 OR list_contains($tracks, track_id))
  AND ts_ns >= $lo AND ts_ns < $end AND (ts_ns + dur_ns > $start OR ts_ns >= $start)
"""
