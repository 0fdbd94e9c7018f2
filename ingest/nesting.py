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

Work is done per batch of whole tracks, at most ``BATCH_SLICES`` slices at a time; a larger track is nested a part
of about ``PART_SLICES`` slices at a time (``nest_part``, carrying what a part leaves to the next), so memory stays
bounded however big a track is: about 200 bytes per slice of the batch or part.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BATCH_SLICES = 500_000
PART_SLICES = 500_000  # a track bigger than a batch is nested about this many slices at a time (nest_part)
WALK_SLICES = 200_000  # slices of an improperly nested track stack-walked at a time


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


def in_order(track, ts, dur, seq) -> bool:
    """True when the rows are in the nesting's order (track, ts, dur DESC, seq)."""
    track, ts, dur, seq = (np.asarray(a) for a in (track, ts, dur, seq))
    if len(ts) < 2:
        return True
    same_track = track[1:] == track[:-1]
    same_ts = same_track & (ts[1:] == ts[:-1])
    same_dur = same_ts & (dur[1:] == dur[:-1])
    return bool(((track[1:] > track[:-1]) | (same_track & (ts[1:] > ts[:-1])) | (same_ts & (dur[1:] < dur[:-1]))
                 | (same_dur & (seq[1:] > seq[:-1]))).all())


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
    _count_zero_lengths(depth, track, ts, dur, idx)
    depth = depth.astype(np.int32)

    parent = _parents(track, depth, idx)
    nested = Nested(local_id=idx + first_id, seq=seq, track=track, ts=ts, dur=dur, depth=depth,
                    parent=np.where(parent >= 0, parent + first_id, 0))
    _fix_improper(nested, parent, spans)
    return nested


def _count_zero_lengths(depth, track, ts, dur, idx) -> None:
    """Add to ``depth`` the zero-length slices of a slice's (track, ts) that the count of ends took as closed:
    they sort last among the slices starting then, so those at or after this one are still "open"."""
    zero = dur == 0
    if not zero.any():
        return
    n = len(idx)
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (track[1:] != track[:-1]) | (ts[1:] != ts[:-1])
    group = np.cumsum(new_group) - 1
    group_stop = np.append(np.flatnonzero(new_group)[1:], n)
    zeros_in_group = np.bincount(group, weights=zero).astype(np.int64)
    depth += np.where(zero, group_stop[group] - idx, zeros_in_group[group])


@dataclass
class TrackCarry:
    """What nesting one track a part at a time (:func:`nest_part`) carries from a part to the next."""

    pos: int = 0  # slices of the track in the parts before
    closed: int = 0  # of those, slices whose end sorts before the current part's first start
    open_ends: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # the others' ends, sorted
    # per depth, the latest slice so far: local id (0: none), end, parent; and the depth of the last slice
    last_id: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_end: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_parent: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_depth: int = -1
    # once a part shows the track is not properly nested: the stack walk's stack, (end, depth, local id, parent)
    stack: list[tuple[int, int, int, int]] | None = None

    def ancestors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(local id, end, parent) of the earlier slices a later part's slices can have as parents (or
        grandparents, ...), ordered by local id: for :func:`bind` to climb through."""
        if self.stack is not None:
            rows = sorted(self.stack, key=lambda e: e[2])
            return tuple(np.array([r[k] for r in rows], dtype=np.int64) for k in (2, 0, 3))
        keep = self.last_id > 0
        order = np.argsort(self.last_id[keep], kind="stable")
        return self.last_id[keep][order], self.last_end[keep][order], self.last_parent[keep][order]


def nest_part(seq, track, ts, dur, first_id: int, carry: TrackCarry) -> Nested:
    """Order, depth and parent of one part of a track too big to nest whole: its rows in the order (ts, dur DESC,
    seq), every start later than the parts before (parts are cut where the start changes), local ids from
    ``first_id``. ``carry`` holds what the parts before left (a fresh one for the first part) and is updated
    for the next. The slices come out as :func:`nest` gives them for the whole track."""
    seq, track, ts, dur = (np.asarray(a, dtype=np.int64) for a in (seq, track, ts, dur))
    n = len(seq)
    idx = np.arange(n, dtype=np.int64)
    end = ts + dur
    ids = idx + first_id
    if n == 0:
        return Nested(local_id=ids, seq=seq, track=track, ts=ts, dur=dur, depth=np.zeros(0, dtype=np.int32),
                      parent=np.zeros(0, dtype=np.int64))
    if carry.stack is None:
        # the ends of earlier parts at or before this part's first start sort before every start of it
        k = int(np.searchsorted(carry.open_ends, ts[0], side="right"))
        closed = carry.closed + k
        ends = np.sort(np.concatenate((carry.open_ends[k:], end)))
        depth = (carry.pos + idx) - closed - np.searchsorted(ends, ts, side="right")
        _count_zero_lengths(depth, track, ts, dur, idx)
        depth = depth.astype(np.int32)
        inside = _parents(track, depth, idx)
        parent = np.where(inside >= 0, inside + first_id, 0)
        parent_end = np.where(inside >= 0, end[np.maximum(inside, 0)], np.iinfo(np.int64).max)
        # no parent in this part: the latest slice one level up in the parts before
        before = np.flatnonzero((inside < 0) & (depth > 0))
        if len(before):
            up = depth[before].astype(np.int64) - 1
            known = up < len(carry.last_id)
            rows, up = before[known], up[known]
            parent[rows] = carry.last_id[up]
            parent_end[rows] = np.where(carry.last_id[up] > 0, carry.last_end[up], np.iinfo(np.int64).max)
        if not ((parent > 0) & (parent_end < end)).any():
            top = int(depth.max()) + 1
            if top > len(carry.last_id):
                grow = top - len(carry.last_id)
                carry.last_id, carry.last_end, carry.last_parent = (
                    np.concatenate((a, np.zeros(grow, dtype=np.int64)))
                    for a in (carry.last_id, carry.last_end, carry.last_parent))
            latest = np.full(top, -1, dtype=np.int64)
            np.maximum.at(latest, depth, idx)
            at = np.flatnonzero(latest >= 0)
            carry.last_id[at], carry.last_end[at], carry.last_parent[at] = (
                ids[latest[at]], end[latest[at]], parent[latest[at]])
            carry.last_depth = int(depth[-1])
            carry.closed, carry.open_ends = closed, ends
            carry.pos += n
            return Nested(local_id=ids, seq=seq, track=track, ts=ts, dur=dur, depth=depth, parent=parent)
        # not properly nested: stack-walk from here on, from the stack a walk would hold after the parts before
        # (the latest slice and its ancestors, the latest slice of each depth above it)
        carry.stack = [(int(carry.last_end[d]), d, int(carry.last_id[d]), int(carry.last_parent[d]))
                       for d in range(carry.last_depth + 1)]
    depth_l, parent_l = _walk(carry.stack, ts.tolist(), end.tolist(), ids.tolist())
    carry.pos += n
    return Nested(local_id=ids, seq=seq, track=track, ts=ts, dur=dur, depth=np.array(depth_l, dtype=np.int32),
                  parent=np.array(parent_l, dtype=np.int64))


def _walk(stack: list[tuple[int, int, int, int]], starts: list[int], ends: list[int],
          ids: list[int]) -> tuple[list[int], list[int]]:
    """Depth and parent of slices (in order, as Python lists) by the stack walk: each one row below the latest
    slice still open at its start. ``stack`` ((end, depth, local id, parent) of the open slices) is updated."""
    depth, par = [0] * len(starts), [0] * len(starts)
    for i, start in enumerate(starts):
        while stack and stack[-1][0] <= start:
            stack.pop()
        if stack:
            top = stack[-1]
            depth[i], par[i] = top[1] + 1, top[2]
        stack.append((ends[i], depth[i], ids[i], par[i]))
    return depth, par


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
        stack: list[tuple[int, int, int, int]] = []
        # a part of the track at a time as Python lists (some 150 bytes a slice), the stack carried over
        for c in range(a, b, WALK_SLICES):
            d = min(b, c + WALK_SLICES)
            depth, par = _walk(stack, nested.ts[c:d].tolist(), end[c:d].tolist(), nested.local_id[c:d].tolist())
            nested.depth[c:d] = depth
            nested.parent[c:d] = par


def bind(nested: Nested, track, ts, enclosing, ancestors: tuple | None = None, next_id: int = 0) -> np.ndarray:
    """Local id of the slice each flow end binds to (0 = none); see the module docstring for the rule.

    For a part of a track (:func:`nest_part`): the ends whose time falls from the part's first start to the next
    part's, ``ancestors`` as ``TrackCarry.ancestors()`` gave them before the part (the earlier slices the climb
    through parents can reach) and ``next_id`` the local id of the next part's first slice (0: none)."""
    track, ts = np.asarray(track, dtype=np.int64), np.asarray(ts, dtype=np.int64)
    enclosing = np.asarray(enclosing, dtype=bool)
    out = np.zeros(len(ts), dtype=np.int64)
    if len(ts) == 0 or len(nested.ts) == 0:
        return out
    end = nested.end
    first_row = nested.local_id[0]
    anc_id, anc_end, anc_parent = ancestors if ancestors is not None else (np.zeros(0, dtype=np.int64),) * 3
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
            live = np.flatnonzero(cand >= first_row)
            row = cand[live] - first_row
            climb = end[row] < when[live]
            cand[live[climb]] = nested.parent[row[climb]]
            # (a parent in an earlier part of the track: its end and parent from the ancestors)
            out_live = np.flatnonzero((cand > 0) & (cand < first_row))
            if len(out_live):
                at = np.minimum(np.searchsorted(anc_id, cand[out_live]), max(len(anc_id) - 1, 0))
                found = (at < len(anc_id)) & (anc_id[at] == cand[out_live]) if len(anc_id) else \
                    np.zeros(len(out_live), dtype=bool)
                up = np.zeros(len(out_live), dtype=bool)
                up[found] = anc_end[at[found]] < when[out_live[found]]
                cand[out_live[~found]] = 0  # (cannot happen: a parent is always among the ancestors)
                cand[out_live[up]] = anc_parent[at[up]]
                if not climb.any() and not up.any():
                    break
            elif not climb.any():
                break
        # otherwise: the first slice starting at or after t
        nxt = np.searchsorted(starts, when, side="left") + a
        nxt_id = np.where(nxt < b, nested.local_id[np.minimum(nxt, b - 1)], next_id)
        out[rows] = np.where(enc, cand, nxt_id)
    return out


def pair_flows(key, is_start, ts, seq) -> tuple[np.ndarray, np.ndarray]:
    """Pair flow starts with finishes; return (start rows, finish rows), ordered by (start ts, start seq, finish
    seq).

    ``key`` numbers the distinct (cat, id) of the ends. A finish takes the latest start of its key at or before
    it, by (ts, seq); a finish earlier than every start of its key takes the key's first start; a finish whose
    key has no start is not a flow."""
    pairs = pair_flow_keys(key, is_start, ts, seq)
    return pairs.src, pairs.dst


@dataclass
class FlowPairs:
    """The flows of some ends (rows of the ends) and what each key of them holds."""

    src: np.ndarray  # each flow's start
    dst: np.ndarray  # its finish
    key_row: np.ndarray  # one end of each key
    starts: np.ndarray  # the key's starts
    finishes: np.ndarray  # its finishes


def pair_flow_keys(key, is_start, ts, seq, ordered: bool = True) -> FlowPairs:
    """:func:`pair_flows`, with the starts and finishes of each key. ``key``: any int64 numbers; ``ordered``: False
    leaves the flows in no particular order (for a caller that sorts them with others).

    The ends ordered by (key, ts, starts before finishes, seq) (each end's place in time, then a stable sort by key):
    a finish's start is then the last start before it in its key's run of ends, else the first one after it (the
    key's first start)."""
    key, ts, seq = (np.asarray(a, dtype=np.int64) for a in (key, ts, seq))
    is_start = np.asarray(is_start, dtype=bool)
    n = len(key)
    idx = np.arange(n, dtype=np.int64)
    place = np.empty(n, dtype=np.int64)  # each end's place by (ts, starts before finishes, seq)
    place[np.lexsort((seq, ~is_start, ts))] = idx
    if n and (key.min() < 0 or key.max() > (1 << 62) // n):  # (numbered again, so that key * n + place fits)
        key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
    order = np.argsort(key * n + place, kind="stable")  # (ends come mostly in order: a stable sort is quicker)
    k, s = key[order], is_start[order]
    new = np.ones(n, dtype=bool)
    new[1:] = k[1:] != k[:-1]
    heads = np.flatnonzero(new)
    run = np.cumsum(new) - 1
    stops = np.append(heads[1:], n)
    last = np.maximum.accumulate(np.where(s, idx, -1))
    after = np.minimum.accumulate(np.where(s, idx, n)[::-1])[::-1]
    src = np.where(last >= heads[run], last, np.where(after < stops[run], after, -1))
    keep = ~s & (src >= 0)
    src, dst = order[src[keep]], order[keep]
    if ordered and len(src):
        by = np.lexsort((seq[dst], place[src]))  # (a start's place orders the starts by (ts, seq))
        src, dst = src[by], dst[by]
    starts = np.bincount(run, weights=s, minlength=len(heads)).astype(np.int64)
    return FlowPairs(src=src, dst=dst, key_row=order[heads], starts=starts, finishes=stops - heads - starts)

