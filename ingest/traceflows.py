"""A staged trace's flows: its flow ends (``s`` and ``f`` events) bound to slices and paired into ``{p}flows``.

The ends are staged once (``FLOW_ENDS``: ``{p}fe``), each with a *part*: a hash of its (rank, cat, id) modulo the
number of parts, so a part holds whole keys and at most about ``batch`` ends. The nesting binds the ends track
batch by track batch (``bind_rows``, ``ingest.nesting.bind``) and appends each end's slice to ``{p}fb``; then each
part is paired at once (:func:`pair_parts`): its ends' columns fetched as Arrow, its keys numbered, the pairs made
by ``ingest.nesting.pair_flows`` and the flows' rows taken from the ends' columns, with what the warnings count
(ends without a partner, flows bound to no slice) summed along. The flows are numbered rank by rank in
``pair_flows``' order (start ts, start seq, finish seq) by one sort of every part's rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import nesting
from .columns import arrow_table, call, indices, numpy_of

FLOW_ENDS = """
CREATE OR REPLACE TABLE {p}fe AS
SELECT e.seq, e.ph = 's' AS is_start, t.local_track, e.ts_ns, e.ph = 's' OR coalesce(e.bp, '') = 'e' AS enclosing,
       e.rank, coalesce(e.cat, '') AS cat, e.name, coalesce(e.flow_key, '') AS flow_key,
       CAST(hash(e.rank, coalesce(e.cat, ''), coalesce(e.flow_key, '')) % {parts} AS INTEGER) AS part
FROM {p}ev e JOIN {p}tracks t ON t.rank = e.rank AND t.pid = e.pid AND t.tid = e.tid AND t.counter_name IS NULL
WHERE e.ph IN ('s', 'f') AND e.ts_ns IS NOT NULL
"""
BOUND_TABLE = "CREATE OR REPLACE TABLE {p}fb (pos BIGINT, part INTEGER, local_id BIGINT)"
# the ends to bind on some tracks (``where``: a condition on local_track and ts_ns)
BIND_ROWS = "SELECT rowid AS pos, part, local_track, ts_ns, enclosing FROM {p}fe WHERE {where}"
PART_ENDS = ("SELECT rowid AS pos, seq, is_start, local_track, ts_ns, rank, cat, name, flow_key FROM {p}fe "
             "WHERE part = ?")
PART_BOUND = "SELECT pos, local_id FROM {p}fb WHERE part = ?"
FLOW_COLUMNS = ("rank", "src_ts_ns", "src_seq", "dst_seq", "cat", "name", "flow_key", "src_track", "src_local",
                "dst_track", "dst_ts_ns", "dst_local")
# every part's flows, numbered rank by rank in pair_flows' order
NUMBER_FLOWS = """
CREATE OR REPLACE TABLE {p}flows AS
SELECT row_number() OVER (ORDER BY rank, src_ts_ns, src_seq, dst_seq) AS local_flow, cat, name, flow_key,
       src_track, src_ts_ns, src_local, dst_track, dst_ts_ns, dst_local, rank
FROM {p}flows_u ORDER BY local_flow
"""
TABLES = ("fe", "fb", "flows_u")


def parts_for(ends: int, batch: int) -> int:
    """How many parts ``ends`` flow ends are paired in, about ``batch`` ends each."""
    return max(1, -(-int(ends) // max(1, int(batch))))


def bind_rows(cur, p: str, nested: nesting.Nested, where: str, args: list, ancestors=None, next_id: int = 0) -> None:
    """Bind the ends ``where`` selects (ends of the tracks of ``nested``, see ``nesting.bind``) and append each
    one's slice to ``{p}fb``."""
    ends = cur.execute(BIND_ROWS.format(p=p, where=where), args).fetchnumpy()
    if not len(ends["pos"]):
        return
    bound = nesting.bind(nested, ends["local_track"], ends["ts_ns"], ends["enclosing"], ancestors=ancestors,
                         next_id=next_id)
    append(cur, f"{p}fb", arrow_table({"pos": np.asarray(ends["pos"], dtype=np.int64),
                                       "part": np.asarray(ends["part"], dtype=np.int32),
                                       "local_id": np.asarray(bound, dtype=np.int64)}))


def append(cur, table: str, rows: pa.Table) -> None:
    cur.register("_flow_rows", rows)
    try:
        cur.execute(f"INSERT INTO {table} SELECT * FROM _flow_rows")
    finally:
        cur.unregister("_flow_rows")


def pair_parts(cur, p: str, parts: int, tracks_with_slices: np.ndarray) -> list[tuple]:
    """Pair every part's ends into ``{p}flows``; return, per (rank, cat) with ends, what FLOW_STATS counted:
    (rank, cat, starts without a finish, finishes without a start, flows whose start / finish is bound to no
    slice, of those starts the ones on a lane without slices), ordered by rank and cat. ``tracks_with_slices``:
    the local tracks that have slices, sorted."""
    cur.execute(f"CREATE OR REPLACE TABLE {p}flows_u (rank INTEGER, src_ts_ns BIGINT, src_seq BIGINT, dst_seq BIGINT, "
                "cat VARCHAR, name VARCHAR, flow_key VARCHAR, src_track BIGINT, src_local BIGINT, dst_track BIGINT, "
                "dst_ts_ns BIGINT, dst_local BIGINT)")
    stats: dict[tuple[int, str], list[int]] = {}
    for part in range(parts):
        ends = cur.sql(PART_ENDS.format(p=p), params=[part]).to_arrow_table()
        if ends.num_rows == 0:
            continue
        bound = cur.execute(PART_BOUND.format(p=p), [part]).fetchnumpy()
        local = _aligned(numpy_of(ends.column("pos")), bound["pos"], bound["local_id"])
        rows = _pair(ends, local, tracks_with_slices, stats)
        if rows is None:
            continue
        if parts == 1:  # the only part: numbered here, written once
            _write_numbered(cur, p, rows)
            break
        append(cur, f"{p}flows_u", rows)
    else:
        cur.execute(NUMBER_FLOWS.format(p=p))
    return [(rank, cat, *counts) for (rank, cat), counts in sorted(stats.items())]


def _write_numbered(cur, p: str, rows: pa.Table) -> None:
    """``{p}flows`` from the flows of a single part, numbered as NUMBER_FLOWS numbers them."""
    col = {c: numpy_of(rows.column(c)) for c in ("rank", "src_ts_ns", "src_seq", "dst_seq")}
    order = np.lexsort((col["dst_seq"], col["src_seq"], col["src_ts_ns"], col["rank"]))
    rows = call("take", rows, indices(order))
    numbered = rows.add_column(0, "local_flow", _ints(np.arange(1, rows.num_rows + 1, dtype=np.int64)))
    cur.register("_flow_rows", numbered)
    try:
        cur.execute(f"CREATE OR REPLACE TABLE {p}flows AS SELECT local_flow, cat, name, flow_key, src_track, "
                    "src_ts_ns, src_local, dst_track, dst_ts_ns, dst_local, rank FROM _flow_rows")
    finally:
        cur.unregister("_flow_rows")


def _aligned(pos: np.ndarray, bound_pos: np.ndarray, bound_id: np.ndarray) -> np.ndarray:
    """The slice each end (by ``pos``, ascending) is bound to, from the bound rows; 0 for an end on a lane
    without slices (no batch binds it)."""
    local = np.zeros(len(pos), dtype=np.int64)
    at = np.searchsorted(pos, bound_pos)
    if len(at) and (at.max() >= len(pos) or not np.array_equal(pos[at], bound_pos)):
        raise RuntimeError("a bound flow end is not among the ends")  # (a bug, not an input)
    local[at] = bound_id
    return local


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Dictionary codes (int64) of a string column, and the dictionary."""
    encoded = call("dictionary_encode", column.combine_chunks())
    return numpy_of(encoded.indices).astype(np.int64), encoded.dictionary


def _pair(ends: pa.Table, local: np.ndarray, tracks_with_slices: np.ndarray, stats: dict) -> pa.Table | None:
    """One part: the flows' rows (FLOW_COLUMNS) of its ends, and its counts added to ``stats``."""
    num = {c: numpy_of(ends.column(c)) for c in ("seq", "is_start", "local_track", "ts_ns", "rank")}
    is_start = num["is_start"].astype(bool)
    rank = num["rank"].astype(np.int64)
    cat, cats = _codes(ends.column("cat"))
    key, _ = _codes(ends.column("flow_key"))
    ranks, rank_of = np.unique(rank, return_inverse=True)
    n_cats = max(len(cats), 1)
    group_of = rank_of.astype(np.int64) * n_cats + cat  # (rank, cat) of each end
    _, first, fkey = np.unique(group_of * (int(key.max()) + 1) + key, return_index=True, return_inverse=True)
    fkey = fkey.astype(np.int64)

    def count(groups: np.ndarray, weights: np.ndarray | None, slot: int) -> None:
        sums = np.bincount(groups, weights=weights)
        for g in np.flatnonzero(sums).tolist():
            stats[(int(ranks[g // n_cats]), cats[g % n_cats].as_py())][slot] += int(sums[g])

    for g in np.unique(group_of).tolist():  # every (rank, cat) with ends is reported
        stats.setdefault((int(ranks[g // n_cats]), cats[g % n_cats].as_py()), [0, 0, 0, 0, 0])
    # ends without a partner: every end of a key lies in this part
    starts = np.bincount(fkey, weights=is_start).astype(np.int64)
    fins = np.bincount(fkey).astype(np.int64) - starts
    count(group_of[first], np.where(fins == 0, starts, 0), 0)
    count(group_of[first], np.where(starts == 0, fins, 0), 1)
    src, dst = nesting.pair_flows(fkey, is_start, num["ts_ns"], num["seq"])
    if not len(src):
        return None
    src_local, dst_local = local[src], local[dst]
    src_track = num["local_track"][src].astype(np.int64)
    unbound = src_local == 0
    count(group_of[src], unbound, 2)
    count(group_of[src], dst_local == 0, 3)
    count(group_of[src], unbound & ~_member(src_track, tracks_with_slices), 4)
    take_src, take_dst = indices(src), indices(dst)
    names = ends.column("name")
    return pa.table({
        "rank": _ints(rank[src], np.int32), "src_ts_ns": _ints(num["ts_ns"][src]), "src_seq": _ints(num["seq"][src]),
        "dst_seq": _ints(num["seq"][dst]), "cat": call("take", ends.column("cat"), take_src),
        "name": call("coalesce", call("take", names, take_src), call("take", names, take_dst)),
        "flow_key": call("take", ends.column("flow_key"), take_src), "src_track": _ints(src_track),
        "src_local": _nullable(src_local), "dst_track": _ints(num["local_track"][dst]),
        "dst_ts_ns": _ints(num["ts_ns"][dst]), "dst_local": _nullable(dst_local)})


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    at = np.minimum(np.searchsorted(sorted_set, values), max(len(sorted_set) - 1, 0))
    return (sorted_set[at] == values) if len(sorted_set) else np.zeros(len(values), dtype=bool)


def _ints(values: np.ndarray, dtype=np.int64) -> pa.ChunkedArray:
    return arrow_table({"v": np.asarray(values, dtype=dtype)}).column("v")


def _nullable(local: np.ndarray) -> pa.Array:
    """Local slice ids, 0 (bound to none) as NULL."""
    values = np.ascontiguousarray(local, dtype=np.int64)
    valid = np.packbits(values != 0, bitorder="little")
    return pa.Array.from_buffers(pa.int64(), len(values), [pa.py_buffer(valid), pa.py_buffer(values)])
