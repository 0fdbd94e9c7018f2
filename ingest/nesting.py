"""Slice order, depth and parent, flow-end binding and flow pairing for one rank's trace, vectorised.

Each computes one of the definitions below. ``tests/ingest/test_nesting.py`` restates them one slice (or end) at a time
and checks this module against that on the real traces, on edge cases and on random tracks.

* order: slices of a track by ``(ts_ns, dur_ns DESC, seq)``; ``local_id`` numbers them 1.. across tracks in
  ``local_track`` order.
* depth: the number of slices of the track still open when a slice starts. Sweeping start and end events in
  order ``(t, k, local_id, e)`` (``k`` = 0 for the end of a slice with a duration, 1 otherwise; ``e`` = 1 for an
  end), depth is the sum of +1 (start) / -1 (end) over the events before the slice's start. Equivalently: the
  slices of the track ordered before it, minus those whose end sorts before its start.
* parent: the latest earlier slice of the track at ``depth - 1``.
* tracks where some slice outlives its parent are not properly nested (python_function frames interleaved
  with torch ops, overlapping tasks on one stream). There a stack walk puts each slice one row below the latest
  slice still open at its start, which becomes its parent, as Chrome's trace viewer does.
* flow-end binding: an ``s`` end, or an ``f`` end with ``bp:"e"``, binds to the deepest slice of its track that
  encloses its timestamp (start <= t <= end), found from the last slice starting at or before t by climbing
  parents; any other ``f`` binds to the first slice starting at or after t. No slice: unbound.
* flow pairing: ends are matched on ``(cat, id)``; an ``f`` pairs with the latest ``s`` at or before it (by
  ``(ts, seq)``), or with the first ``s`` of its ``(cat, id)`` when it precedes them all.

Work is done per batch of whole tracks, at most ``BATCH_SLICES`` slices at a time (one larger track is a batch
of its own), so memory stays bounded: about 100 bytes per slice of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BATCH_SLICES = 1_000_000


@dataclass
class Nested:
    """One batch of slices in local order; ``parent`` holds local ids, 0 for none."""

    local_id: np.ndarray
    seq: np.ndarray
    track: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    depth: np.ndarray
    parent: np.ndarray

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur


def _track_spans(track: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) index ranges of equal values in a sorted array."""
    if len(track) == 0:
        return []
    cuts = np.flatnonzero(track[1:] != track[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    stops = np.concatenate((cuts, [len(track)]))
    return list(zip(starts.tolist(), stops.tolist()))


def nest(seq, track, ts, dur, first_id: int = 1, presorted: bool = False) -> Nested:
    """Order a batch of whole tracks and give each slice its depth and parent (local ids from ``first_id``).

    ``presorted``: the rows already come in the order (track, ts, dur DESC, seq), e.g. from an ORDER BY."""
    seq, track, ts, dur = (np.asarray(a, dtype=np.int64) for a in (seq, track, ts, dur))
    if not presorted:
        order = np.lexsort((seq, -dur, ts, track))
        seq, track, ts, dur = seq[order], track[order], ts[order], dur[order]
        del order
    n = len(seq)
    idx = np.arange(n, dtype=np.int64)
    end = ts + dur
    spans = _track_spans(track)

    # depth = slices of the track ordered before this one - ends sorting before its start. An end sorts before
    # a start at the same time unless it closes a zero-length slice ordered at or after this one.
    depth = np.empty(n, dtype=np.int64)
    for a, b in spans:
        ends = np.sort(end[a:b])
        depth[a:b] = (idx[a:b] - a) - np.searchsorted(ends, ts[a:b], side="right")
    del ends
    zero = dur == 0
    if zero.any():
        new_group = np.ones(n, dtype=bool)
        new_group[1:] = (track[1:] != track[:-1]) | (ts[1:] != ts[:-1])
        group = np.cumsum(new_group) - 1
        group_stop = np.append(np.flatnonzero(new_group)[1:], n)
        zeros_in_group = np.bincount(group, weights=zero).astype(np.int64)
        # zero-length slices of the same (track, ts) sort last; those at or after this one are still "open"
        depth += np.where(zero, group_stop[group] - idx, zeros_in_group[group])
        del new_group, group, group_stop, zeros_in_group
    depth = depth.astype(np.int32)

    parent = _parents(track, depth, idx)
    nested = Nested(local_id=idx + first_id, seq=seq, track=track, ts=ts, dur=dur, depth=depth,
                    parent=np.where(parent >= 0, parent + first_id, 0))
    _fix_improper(nested, parent, spans)
    return nested


def _parents(track: np.ndarray, depth: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Index of the latest earlier slice of the same track at depth - 1, or -1."""
    n = len(idx)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    # one sorted key per (track, depth) group, then the position inside the batch: group * n + idx
    group_key = track * (int(depth.max()) + 2) + depth
    groups = np.unique(group_key)
    key = np.searchsorted(groups, group_key) * n + idx
    key.sort()
    want = group_key - 1  # same track, one level up
    g = np.searchsorted(groups, want)
    has_group = (depth > 0) & (g < len(groups))
    has_group[has_group] = groups[g[has_group]] == want[has_group]
    pos = np.searchsorted(key, g * n + idx, side="left") - 1
    ok = has_group & (pos >= 0)
    ok[ok] = key[pos[ok]] // n == g[ok]
    parent[ok] = key[pos[ok]] % n
    return parent


def _fix_improper(nested: Nested, parent: np.ndarray, spans: list[tuple[int, int]]) -> None:
    """Stack-walk the tracks where a slice outlives its parent (see the module docstring)."""
    end = nested.end
    has = parent >= 0
    bad_rows = np.flatnonzero(has)[end[parent[has]] < end[has]]
    if len(bad_rows) == 0:
        return
    bad_tracks = set(np.unique(nested.track[bad_rows]).tolist())
    for a, b in spans:
        if int(nested.track[a]) not in bad_tracks:
            continue
        starts, ends, ids = nested.ts[a:b].tolist(), end[a:b].tolist(), nested.local_id[a:b].tolist()
        depth, par = [0] * (b - a), [0] * (b - a)
        stack: list[int] = []
        for i, start in enumerate(starts):
            while stack and ends[stack[-1]] <= start:
                stack.pop()
            if stack:
                depth[i], par[i] = depth[stack[-1]] + 1, ids[stack[-1]]
            stack.append(i)
        nested.depth[a:b] = depth
        nested.parent[a:b] = par


def bind(nested: Nested, track, ts, enclosing) -> np.ndarray:
    """Local id of the slice each flow end binds to (0 = none); see the module docstring for the rule."""
    track, ts = np.asarray(track, dtype=np.int64), np.asarray(ts, dtype=np.int64)
    enclosing = np.asarray(enclosing, dtype=bool)
    out = np.zeros(len(ts), dtype=np.int64)
    if len(ts) == 0 or len(nested.ts) == 0:
        return out
    end = nested.end
    first_row = nested.local_id[0]
    by_track = np.argsort(track, kind="stable")
    ends_at = np.flatnonzero(np.diff(track[by_track])) + 1
    for rows in np.split(by_track, ends_at):
        t = int(track[rows[0]])
        a = np.searchsorted(nested.track, t, side="left")
        b = np.searchsorted(nested.track, t, side="right")
        if a == b:
            continue
        starts = nested.ts[a:b]
        when, enc = ts[rows], enclosing[rows]
        # enclosing: the last slice starting at or before t, then up through parents while it ended before t
        last = np.searchsorted(starts, when, side="right") - 1 + a
        cand = np.where(enc & (last >= a), nested.local_id[np.maximum(last, a)], 0)
        while True:
            live = np.flatnonzero(cand > 0)
            row = cand[live] - first_row
            climb = end[row] < when[live]
            if not climb.any():
                break
            cand[live[climb]] = nested.parent[row[climb]]
        # otherwise: the first slice starting at or after t
        nxt = np.searchsorted(starts, when, side="left") + a
        nxt_id = np.where(nxt < b, nested.local_id[np.minimum(nxt, b - 1)], 0)
        out[rows] = np.where(enc, cand, nxt_id)
    return out


def pair_flows(key, is_start, ts, seq) -> tuple[np.ndarray, np.ndarray]:
    """Pair flow starts with finishes; return (start rows, finish rows), ordered by (start ts, start seq, finish
    seq).

    ``key`` numbers the distinct (cat, id) of the ends. A finish takes the latest start of its key at or before
    it, by (ts, seq); a finish earlier than every start of its key takes the key's first start; a finish whose
    key has no start is not a flow."""
    key, ts, seq = (np.asarray(a, dtype=np.int64) for a in (key, ts, seq))
    is_start = np.asarray(is_start, dtype=bool)
    starts, finishes = np.flatnonzero(is_start), np.flatnonzero(~is_start)
    if len(starts) == 0 or len(finishes) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # one sortable number per (key, ts): key-major, with ts replaced by its rank among all the ends
    ts_rank = np.unique(ts, return_inverse=True)[1].astype(np.int64)
    both = key * (int(ts_rank.max()) + 1) + ts_rank
    starts = starts[np.lexsort((seq[starts], both[starts]))]
    start_both, start_key = both[starts], key[starts]
    fkey = key[finishes]
    last = np.searchsorted(start_both, both[finishes], side="right") - 1
    earlier = last >= 0
    earlier[earlier] = start_key[last[earlier]] == fkey[earlier]
    first = np.searchsorted(start_key, fkey, side="left")
    has_key = first < len(starts)
    has_key[has_key] = start_key[first[has_key]] == fkey[has_key]
    src = np.where(earlier, starts[np.maximum(last, 0)],
                   np.where(has_key, starts[np.minimum(first, len(starts) - 1)], -1))
    keep = src >= 0
    src, dst = src[keep], finishes[keep]
    order = np.lexsort((seq[dst], seq[src], ts[src]))
    return src[order], dst[order]
