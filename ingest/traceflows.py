"""A staged trace's flows: its flow ends (``s`` and ``f`` events) bound to slices and paired into ``{p}flows``.

The ends are staged once (``FLOW_ENDS``: ``{p}fe``), each with a *part*: a hash of its (rank, cat, id) modulo the
number of parts, so a part holds whole keys and at most about ``batch`` ends. The nesting binds the ends track
batch by track batch (``bind_rows``, ``ingest.nesting.bind``) and appends each end's slice to ``{p}fb``; then each
part is paired at once (:func:`pair_parts`): its ends' columns fetched as Arrow (several parts: split into a file
each by one scan of the ends and one of the bound rows, :func:`part_files`), its keys numbered, the pairs made
by ``ingest.nesting.pair_flows`` and the flows' rows taken from the ends' columns, with what the warnings count
(ends without a partner, flows bound to no slice) summed along. The flows are numbered rank by rank in
``pair_flows``' order (start ts, start seq, finish seq): the only part's come out of ``pair_flow_keys`` so and are
written as they are; several parts' rows, each part's so, are merged from files by a sort of their keys alone
(``_Merge``), or (without the split) sorted once as wide rows (NUMBER_FLOWS), and numbered by their place.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa

from . import nesting
from .columns import arrow_table, call, indices, numpy_of

FLOW_ENDS = """
CREATE OR REPLACE TABLE {p}fe AS
SELECT e.seq, e.ph = 's' AS is_start, t.local_track, e.ts_ns, e.ph = 's' OR coalesce(e.bp, '') = 'e' AS enclosing,
       e.rank, coalesce(e.cat, '') AS cat, e.name, coalesce(e.flow_key, '') AS flow_key, {part} AS part
FROM {p}ev e JOIN {p}tracks t ON t.rank = e.rank AND t.pid = e.pid AND t.tid = e.tid AND t.counter_name IS NULL
WHERE e.ph IN ('s', 'f') AND e.ts_ns IS NOT NULL
"""
BOUND_TABLE = "CREATE OR REPLACE TABLE {p}fb (pos BIGINT, part INTEGER, local_id BIGINT)"
# the ends to bind on some tracks (``where``: a condition on local_track and ts_ns)
BIND_ROWS = "SELECT rowid AS pos, part, local_track, ts_ns, enclosing FROM {p}fe WHERE {where}"
END_COLUMNS = "rowid AS pos, seq, is_start, local_track, ts_ns, rank, cat, name, flow_key"
PART_ENDS = "SELECT " + END_COLUMNS + " FROM {p}fe WHERE part = ?"
# every end with its part, in rowid order (a scan, streamed: see part_files)
ALL_ENDS = "SELECT " + END_COLUMNS + ", part FROM {p}fe"
ALL_BOUND = "SELECT pos, local_id, part FROM {p}fb"
SPLIT_ROWS = 1 << 18  # ends a batch of that scan
SPLIT_END_BYTES = 160  # an end's bytes in the files (its columns, its bound slice), twice over for room
PART_BOUND = "SELECT pos, local_id FROM {p}fb WHERE part = ?"
FLOW_COLUMNS = ("rank", "src_ts_ns", "src_seq", "dst_seq", "cat", "name", "flow_key", "src_track", "src_local",
                "dst_track", "dst_ts_ns", "dst_local")
# every part's flows in pair_flows' order rank by rank, then numbered by their place (one sort, of the rows)
NUMBER_FLOWS = ["""
CREATE OR REPLACE TABLE {p}flows AS
SELECT CAST(0 AS BIGINT) AS local_flow, cat, name, flow_key, src_track, src_ts_ns, src_local, dst_track, dst_ts_ns,
       dst_local, rank
FROM {p}flows_u ORDER BY rank, src_ts_ns, src_seq, dst_seq
""", "UPDATE {p}flows SET local_flow = rowid + 1", "DROP TABLE {p}flows_u"]
FLOWS_ORDER = ["local_flow", "cat", "name", "flow_key", "src_track", "src_ts_ns", "src_local", "dst_track", "dst_ts_ns",
               "dst_local", "rank"]
FLOWS_TABLE = """
CREATE OR REPLACE TABLE {p}flows (local_flow BIGINT, cat VARCHAR, name VARCHAR, flow_key VARCHAR, src_track BIGINT,
                                 src_ts_ns BIGINT, src_local BIGINT, dst_track BIGINT, dst_ts_ns BIGINT,
                                 dst_local BIGINT, rank INTEGER)
"""
TABLES = ("fe", "fb", "flows_u", "fk")
# a part's numpy and Arrow memory per end at its peak, outside DuckDB's limit: lent from it while the part is paired
# (duckmem.lent), as the slices' write runs beside (at 10 GB the two took the process past 1.5 GiB otherwise)
END_BYTES = 350


def part_bytes(ends: int, parts: int) -> int:
    """What pairing the biggest of ``parts`` parts of ``ends`` ends holds, about (``END_BYTES`` an end)."""
    return END_BYTES * -(-int(ends) // max(1, int(parts)))


def parts_for(ends: int, batch: int) -> int:
    """How many parts ``ends`` flow ends are paired in, about ``batch`` ends each."""
    return max(1, -(-int(ends) // max(1, int(batch))))


def part_of(parts: int) -> str:
    """FLOW_ENDS' ``part`` of an end among ``parts``: a hash of its (rank, cat, id), none for one part."""
    return "0" if parts == 1 else (f"CAST(hash(e.rank, coalesce(e.cat, ''), coalesce(e.flow_key, '')) % {int(parts)} "
                                   "AS INTEGER)")


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


def part_files(cur, sql: str, parts: int, folder: Path, name: str) -> list[Path | None]:
    """The rows of ``sql`` (a query whose last column is ``part``) in an Arrow file per part under ``folder``
    (``{name}{part}.arrow``, without the part column; None: a part without rows), from one streamed scan, each
    file's rows in the query's order. A part is then read alone: a ``WHERE part = ?`` scan for each part reads
    every end, and once the ends outgrow DuckDB's memory each such scan reads them all again from its spill (at
    10 GB, 17 parts' scans of ``{p}fe`` and ``{p}fb`` took 55 CPU-s; this split 8; a sort of ``{p}fe`` by part
    18)."""
    folder.mkdir(parents=True, exist_ok=True)
    files: list[Path | None] = [None] * parts
    writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
    try:
        for batch in cur.sql(sql).to_arrow_reader(SPLIT_ROWS):
            if batch.num_rows == 0:
                continue
            order, runs = _by_part(numpy_of(batch.column("part")))
            rows = batch.drop_columns(["part"]).take(indices(order))
            for k, lo, hi in runs:
                if k not in writers:
                    files[k] = folder / f"{name}{k}.arrow"
                    writers[k] = pa.ipc.new_file(files[k], rows.schema)
                writers[k].write_batch(rows.slice(lo, hi - lo))
    finally:
        for writer in writers.values():
            writer.close()
    return files


def _by_part(part: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """The rows in part order (stable: each part's keep theirs), and (part, lo, hi) of each part's run in it."""
    order = np.argsort(part, kind="stable")
    part = part[order]
    cuts = [0, *(np.flatnonzero(part[1:] != part[:-1]) + 1).tolist(), len(part)]
    return order, [(int(part[lo]), lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:])]


def _room_for(cur, p: str, folder: Path) -> bool:
    """Whether the disk under ``folder`` has room for the split (else each part is a scan of every end)."""
    ends = cur.execute(f"SELECT count(*) FROM {p}fe").fetchall()[0][0]  # (all fetched: a pending result blocks)
    try:
        free = shutil.disk_usage(folder if folder.exists() else folder.parent).free
    except OSError:
        return False
    return free >= 2 * SPLIT_END_BYTES * ends


def _read_part(path: Path) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()  # (its buffers keep the map open)


def pair_parts(cur, p: str, parts: int, tracks_with_slices: np.ndarray, folder: Path | None = None) -> list[tuple]:
    """Pair every part's ends into ``{p}flows``; return, per (rank, cat) with ends, what FLOW_STATS counted:
    (rank, cat, starts without a finish, finishes without a start, flows whose start / finish is bound to no
    slice, of those starts the ones on a lane without slices), ordered by rank and cat. ``tracks_with_slices``:
    the local tracks that have slices, sorted. ``folder``: where several parts are split into files
    (``part_files``) to be read one by one; without it (or room on its disk) each part is a scan of every end."""
    cur.execute(f"CREATE OR REPLACE TABLE {p}flows_u (rank INTEGER, src_ts_ns BIGINT, src_seq BIGINT, dst_seq BIGINT, "
                "cat VARCHAR, name VARCHAR, flow_key VARCHAR, src_track BIGINT, src_local BIGINT, dst_track BIGINT, "
                "dst_ts_ns BIGINT, dst_local BIGINT)")
    stats: dict[tuple[int, str], list[int]] = {}
    one = parts == 1  # the only part: its flows ordered and numbered here, written once
    split = parts > 1 and folder is not None and _room_for(cur, p, folder)
    if split:
        end_files = part_files(cur, ALL_ENDS.format(p=p), parts, folder, "ends")
        bound_files = part_files(cur, ALL_BOUND.format(p=p), parts, folder, "bound")
        merge = _Merge(cur, p, folder)
    for part in range(parts):
        if not split:
            ends = cur.sql(PART_ENDS.format(p=p), params=[part]).to_arrow_table()
            bound = cur.execute(PART_BOUND.format(p=p), [part]).fetchnumpy()
            bound_pos, bound_id = bound["pos"], bound["local_id"]
        elif end_files[part] is None:
            continue
        else:
            ends = _read_part(end_files[part])
            bound = _read_part(bound_files[part]) if bound_files[part] is not None else None
            bound_pos, bound_id = ((numpy_of(bound.column("pos")), numpy_of(bound.column("local_id")))
                                   if bound is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            for file in (end_files[part], bound_files[part]):
                if file is not None:
                    file.unlink()
        if ends.num_rows == 0:
            continue
        local = _aligned(numpy_of(ends.column("pos")), bound_pos, bound_id)
        rows = _pair(ends, local, tracks_with_slices, stats, ordered=one or split)
        if rows is None:
            continue
        if one:
            _write_numbered(cur, p, rows)
            break
        if split:
            merge.add(part, rows)
            continue
        append(cur, f"{p}flows_u", rows)
    else:
        if split:
            ends = bound = rows = local = None  # (the last part's, mapped and paired: not held through the merge)
            merge.write()
        else:
            for sql in NUMBER_FLOWS:
                cur.execute(sql.format(p=p))
    return [(rank, cat, *counts) for (rank, cat), counts in sorted(stats.items())]


MERGE_ROWS = 1 << 14  # flows a batch of a part's file (one per part is held while they are merged)


class _Merge:
    """Several parts' flows, each part's in pair_flows' order rank by rank, written to ``{p}flows`` in that order
    across the parts and numbered so (as NUMBER_FLOWS orders them, without its sort of the wide rows): each
    part's rows go to a file, their keys to a narrow table that DuckDB sorts; the rows are then taken from the
    files in that order (each part's come in their own order, so a batch of the sorted keys takes the next rows
    of each part)."""

    def __init__(self, cur, p: str, folder: Path):
        self.cur, self.p, self.folder = cur, p, folder
        self.files: dict[int, Path] = {}
        cur.execute(f"CREATE OR REPLACE TABLE {p}fk (rank INTEGER, src_ts_ns BIGINT, src_seq BIGINT, "
                    "dst_seq BIGINT, part INTEGER)")

    def add(self, part: int, rows: pa.Table) -> None:
        path = self.files[part] = self.folder / f"flows{part}.arrow"
        with pa.ipc.new_file(path, rows.schema) as writer:
            writer.write_table(rows, max_chunksize=MERGE_ROWS)
        keys = rows.select(["rank", "src_ts_ns", "src_seq", "dst_seq"])
        append(self.cur, f"{self.p}fk", keys.append_column("part", _ints(np.full(rows.num_rows, part), np.int32)))

    def write(self) -> None:
        cur, p = self.cur, self.p
        cur.execute(FLOWS_TABLE.format(p=p))
        readers = {k: _Rows(path) for k, path in self.files.items()}
        done = 0
        order = cur.cursor()  # (its result streams while this cursor writes)
        try:
            order_sql = f"SELECT part FROM {p}fk ORDER BY rank, src_ts_ns, src_seq, dst_seq"
            for batch in order.sql(order_sql).to_arrow_reader(SPLIT_ROWS):
                part = numpy_of(batch.column("part"))
                if not len(part):
                    continue
                by_part, runs = _by_part(part)  # the batch's rows of each part, in their order
                taken = pa.concat_tables([readers[k].next(hi - lo) for k, lo, hi in runs])
                back = np.empty_like(by_part)
                back[by_part] = np.arange(len(by_part))
                rows = taken.take(indices(back))
                rows = rows.append_column("local_flow", _ints(np.arange(done + 1, done + len(part) + 1)))
                append(cur, f"{p}flows", rows.select(FLOWS_ORDER))
                done += len(part)
        finally:
            order.close()
            for reader in readers.values():
                reader.close()
        cur.execute(f"DROP TABLE {p}fk")


class _Rows:
    """A part's flows file read forward, a batch at a time (read, not mapped: its pages leave with each batch)."""

    def __init__(self, path: Path):
        self.path, self.source = path, pa.OSFile(str(path))
        self.file = pa.ipc.open_file(self.source)
        self.batch, self.at, self.held = 0, 0, None

    def next(self, n: int) -> pa.Table:
        """The next ``n`` rows."""
        out = []
        while n:
            if self.held is None or self.at == self.held.num_rows:
                self.held, self.at = self.file.get_batch(self.batch), 0
                self.batch += 1
            k = min(n, self.held.num_rows - self.at)
            out.append(self.held.slice(self.at, k))
            self.at, n = self.at + k, n - k
        return pa.Table.from_batches(out)

    def close(self) -> None:
        self.source.close()
        self.path.unlink(missing_ok=True)


def _write_numbered(cur, p: str, rows: pa.Table) -> None:
    """``{p}flows`` from the flows of the only part, in their order already: numbered from 1 as NUMBER_FLOWS
    numbers them."""
    cur.execute(FLOWS_TABLE.format(p=p))
    numbered = rows.append_column("local_flow", _ints(np.arange(1, rows.num_rows + 1, dtype=np.int64)))
    append(cur, f"{p}flows", numbered.select(FLOWS_ORDER))


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
    """Dictionary codes (int64) of a string column, and the dictionary (one for every chunk)."""
    chunks = call("dictionary_encode", column).chunks
    if not chunks:
        return np.zeros(0, dtype=np.int64), pa.array([], type=pa.string())
    codes = pa.chunked_array([c.indices for c in chunks], type=chunks[0].indices.type)
    return numpy_of(codes).astype(np.int64), chunks[-1].dictionary


def _pair(ends: pa.Table, local: np.ndarray, tracks_with_slices: np.ndarray, stats: dict,
          ordered: bool) -> pa.Table | None:
    """One part: the flows' rows (FLOW_COLUMNS) of its ends, and its counts added to ``stats``. ``ordered``: the
    rows in pair_flows' order rank by rank (else in none)."""
    num = {c: numpy_of(ends.column(c)) for c in ("seq", "is_start", "local_track", "ts_ns", "rank")}
    rank = num["rank"]
    if (rank == rank[0]).all():  # (one rank: a lone rank's stage)
        ranks, rank_of = rank[:1].astype(np.int64), np.zeros(len(rank), dtype=np.int64)
    else:
        ranks, rank_of = np.unique(rank, return_inverse=True)
    cat, cats = _codes(ends.column("cat"))
    key, keys = _codes(ends.column("flow_key"))
    n_cats = max(len(cats), 1)
    group_of = rank_of.astype(np.int64) * n_cats + cat  # (rank, cat) of each end
    pairs = nesting.pair_flow_keys(group_of * max(len(keys), 1) + key, num["is_start"], num["ts_ns"], num["seq"],
                                   ordered)

    def count(groups: np.ndarray, weights: np.ndarray | None, slot: int) -> None:
        sums = np.bincount(groups, weights=weights)
        for g in np.flatnonzero(sums).tolist():
            stats[(int(ranks[g // n_cats]), cats[g % n_cats].as_py())][slot] += int(sums[g])

    key_group = group_of[pairs.key_row]
    for g in np.unique(key_group).tolist():  # every (rank, cat) with ends is reported
        stats.setdefault((int(ranks[g // n_cats]), cats[g % n_cats].as_py()), [0, 0, 0, 0, 0])
    # ends without a partner: every end of a key lies in this part
    count(key_group, np.where(pairs.finishes == 0, pairs.starts, 0), 0)
    count(key_group, np.where(pairs.starts == 0, pairs.finishes, 0), 1)
    src, dst = pairs.src, pairs.dst
    if not len(src):
        return None
    if ordered and len(ranks) > 1:
        by_rank = np.argsort(rank_of[src], kind="stable")
        src, dst = src[by_rank], dst[by_rank]
    src_local, dst_local = local[src], local[dst]
    src_track = num["local_track"][src].astype(np.int64)
    unbound = src_local == 0
    count(group_of[src], unbound, 2)
    count(group_of[src], dst_local == 0, 3)
    count(group_of[src], unbound & ~_member(src_track, tracks_with_slices), 4)
    take_src = indices(src)
    names = ends.column("name")
    name = call("take", names, take_src)
    if name.null_count:
        name = call("coalesce", name, call("take", names, indices(dst)))
    return pa.table({
        "rank": _ints(rank[src], np.int32), "src_ts_ns": _ints(num["ts_ns"][src]), "src_seq": _ints(num["seq"][src]),
        "dst_seq": _ints(num["seq"][dst]), "cat": call("take", ends.column("cat"), take_src), "name": name,
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
