"""The level-of-detail rows (``ingest.lod``) of a batch of whole tracks, computed in numpy from its slices.

The slices of a batch come in slice id order, which is each track's start order; sorted stably by (track, depth)
they fall in (track, depth, bucket) order at every width, so each level's groups are runs of rows: counts,
extents and sums are ``reduceat`` over the runs, and a run's chosen slice is its longest, the one with the smallest
id among equals (the first in id order), as ``lod.KEY`` orders them. A coarser level is made from the level below
it (its buckets nest), its chosen slice the longest of the chosen ones. The rows of every level come out in the
order ``slice_lod`` stores them (track, depth, bucket), so the levels are appended without a sort.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .columns import arrow_table, call, indices, numpy_of

LEVEL_COLUMNS = ("track_id", "depth", "bucket", "slice_count", "slice_id", "ts_ns", "dur_ns", "name", "min_ts_ns",
                 "max_end_ns", "total_dur_ns")
SUM_LIMIT = float(1 << 62)  # a level's total duration past this might not fit an int64: summed by SQL instead


class SumTooLarge(Exception):
    """A bucket's total duration may not fit an int64 (the SQL path reports it as DuckDB does)."""


def levels(batch: pa.Table, widths: list[int], factor: int) -> list[pa.Table]:
    """The rows of each level (``widths[0]`` the finest, each next one ``factor`` times wider) of ``batch``: whole
    tracks' slices (slice_id, track_id, depth, ts_ns, dur_ns, name) in slice id order."""
    col = {c: numpy_of(batch.column(c)) for c in ("slice_id", "track_id", "depth", "ts_ns", "dur_ns")}
    order = np.lexsort((col["depth"], col["track_id"]))  # stable: each (track, depth) keeps its id order
    track, depth, ts, dur = (col[c][order] for c in ("track_id", "depth", "ts_ns", "dur_ns"))
    rep = order  # each row's chosen slice, as a row of the batch
    count = None  # each level's slices per row (level 0: its runs' lengths)
    lo, hi, total = ts, ts + dur, dur
    bucket = ts // widths[0]
    # no bucket's total can come near the limit when all the batch's durations together stay under half of it
    check_sums = np.abs(dur.astype(np.float64)).sum() >= SUM_LIMIT / 2
    out = []
    for level, _width in enumerate(widths):
        if level:
            bucket = bucket // factor
        starts = np.flatnonzero(_runs(track, depth, bucket))
        lengths = np.diff(starts, append=len(rep))
        rep_dur = dur if level == 0 else col["dur_ns"][rep]  # (level 0: each row its own slice)
        longest = np.maximum.reduceat(rep_dur, starts)
        first = np.minimum.reduceat(np.where(rep_dur == np.repeat(longest, lengths), np.arange(len(rep)), len(rep)),
                                    starts)
        if check_sums and np.add.reduceat(total.astype(np.float64), starts).max(initial=0.0) >= SUM_LIMIT:
            raise SumTooLarge()
        track, depth, bucket = track[starts], depth[starts], bucket[starts]
        count = lengths if level == 0 else np.add.reduceat(count, starts)
        lo, hi = np.minimum.reduceat(lo, starts), np.maximum.reduceat(hi, starts)
        total = np.add.reduceat(total, starts)
        rep = rep[first]
        out.append(_table(batch, track, depth, bucket, count, rep, col, lo, hi, total))
    return out


def _runs(track: np.ndarray, depth: np.ndarray, bucket: np.ndarray) -> np.ndarray:
    """True where a run of equal (track, depth, bucket) starts."""
    new = np.ones(len(track), dtype=bool)
    new[1:] = (track[1:] != track[:-1]) | (depth[1:] != depth[:-1]) | (bucket[1:] != bucket[:-1])
    return new


def _table(batch: pa.Table, track, depth, bucket, count, rep, col, lo, hi, total) -> pa.Table:
    numbers = arrow_table({"track_id": track.astype(np.int32), "depth": depth.astype(np.int32),
                           "bucket": bucket.astype(np.int64), "slice_count": count.astype(np.int64),
                           "slice_id": col["slice_id"][rep].astype(np.int64),
                           "ts_ns": col["ts_ns"][rep].astype(np.int64), "dur_ns": col["dur_ns"][rep].astype(np.int64)})
    names = call("take", batch.column("name"), indices(rep))
    rest = arrow_table({"min_ts_ns": lo.astype(np.int64), "max_end_ns": hi.astype(np.int64),
                        "total_dur_ns": total.astype(np.int64)})
    return pa.Table.from_arrays([*numbers.columns, names, *rest.columns], names=list(LEVEL_COLUMNS))
