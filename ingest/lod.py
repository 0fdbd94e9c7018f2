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

import tempfile
from pathlib import Path

import pyarrow as pa

from . import duckmem, lodcalc
from .columns import numpy_of

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
LEVEL_DDL = ("track_id INTEGER, depth INTEGER, bucket BIGINT, slice_count BIGINT, slice_id BIGINT, ts_ns BIGINT, "
             "dur_ns BIGINT, name VARCHAR, min_ts_ns BIGINT, max_end_ns BIGINT, total_dur_ns BIGINT")
BATCH_SLICES = 1_000_000  # slices of whole tracks summarised in numpy at a time (~100 bytes each)
# a batch's Arrow and numpy memory per slice at its peak (its rows ~62 bytes, lodcalc's arrays the rest), and the
# level rows held per slice of the run (at most half as many level-0 rows as slices, ~110 bytes each, and a third
# more above): what the build holds outside DuckDB's limit, lent from it (duckmem.lent) while it runs
SLICE_BYTES = 180
HELD_PER_SLICE = 75
# the level rows held in memory before they go to files (~110 bytes a row; a 1 GB trace's ~1 M rows fit)
HELD_BYTES = 192 << 20
BATCH_ROWS = "SELECT slice_id, track_id, depth, ts_ns, dur_ns, name FROM slices WHERE track_id BETWEEN ? AND ?"
TRACK_ROWS = "SELECT slice_id, track_id, depth, ts_ns, dur_ns, name FROM slices WHERE track_id = ? AND "


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
    levels are its own: the server picks a level per rank). Whole tracks are summarised in numpy a batch at a
    time (``ingest.lodcalc``); a track bigger than a batch in pieces of whole buckets (``_pieces``), or by the SQL
    above when its durations might not sum in an int64."""
    span, n = con.execute("SELECT max(ts_ns + dur_ns) - min(ts_ns), count(*) FROM slices").fetchone()
    widths: list[int] = []
    if span is not None and n:
        rows = con.execute("SELECT count(*), max(ts_ns + dur_ns) - min(ts_ns) FROM slices "
                           "GROUP BY track_id, depth").fetchall()
        widths = [base_ns or base_bucket_ns(rows, n)]
        while widths[-1] * TOP_BUCKETS < span:
            widths.append(widths[-1] * FACTOR)
    held = Held(con, len(widths))
    try:
        with duckmem.lent(con, min(n or 0, BATCH_SLICES) * SLICE_BYTES + min(HELD_BYTES, (n or 0) * HELD_PER_SLICE)):
            if widths:
                _summarise(con, widths, held)
            # stored ordered by (level, track, depth, bucket), so zone maps prune a viewport query: each level's
            # rows are in that order already
            con.execute(f"CREATE OR REPLACE TABLE slice_lod (level INTEGER, bucket_ns BIGINT, {LEVEL_DDL})")
            levels = [(lv, w, held.write(lv, w)) for lv, w in enumerate(widths)]
    finally:
        held.close()
    con.execute(LOD_LEVELS_DDL)
    if levels:
        con.execute("INSERT INTO lod_levels SELECT v.level, v.bucket_ns, v.row_count, r.rank FROM (VALUES "
                    + ", ".join("(?, ?, ?)" for _ in levels) + ") v(level, bucket_ns, row_count), "
                    "(SELECT DISTINCT rank FROM tracks WHERE slice_count > 0) r ORDER BY r.rank, v.level",
                    [x for level in levels for x in level])
    return levels


def _summarise(con, widths: list[int], held: Held) -> None:
    """Every track's level rows into ``held``, in track order: whole tracks a batch at a time in numpy, a track
    bigger than a batch in pieces (or by SQL, see ``_pieces``)."""
    counts = con.execute("SELECT track_id, count(*) FROM slices GROUP BY track_id ORDER BY track_id").fetchall()
    for lo, hi, m in _batches(counts, BATCH_SLICES):
        if m > BATCH_SLICES:  # (one track, lo == hi)
            pieces = _pieces(con, lo, widths[-1], BATCH_SLICES)
            if pieces is None:
                held.spill()  # (the rows of the tracks before these first)
                _sql_levels(con, lo, hi, widths, held)
                continue
            for where, args in pieces:
                piece = con.sql(TRACK_ROWS + where, params=[lo, *args]).to_arrow_table()
                held.add(lodcalc.levels(_in_id_order(piece), widths, FACTOR))
            continue
        batch = con.sql(BATCH_ROWS, params=[lo, hi]).to_arrow_table()
        try:
            made = lodcalc.levels(_in_id_order(batch), widths, FACTOR)
        except lodcalc.SumTooLarge:
            held.spill()
            _sql_levels(con, lo, hi, widths, held)
            continue
        held.add(made)


class Held:
    """The rows of each level made so far, in memory while they are under ``HELD_BYTES`` (then written to slice_lod
    at the end, each level at once), else appended to an Arrow file per level in a temporary folder (then each
    file written to slice_lod at once: one write of each row into DuckDB, where temporary tables took two): a
    level's rows are appended in track order either way."""

    def __init__(self, con, levels: int):
        self.con, self.tables, self.nbytes = con, [[] for _ in range(levels)], 0
        self.folder: tempfile.TemporaryDirectory | None = None
        self.writers: list[pa.ipc.RecordBatchFileWriter | None] = [None] * levels
        self.schemas: list[pa.Schema | None] = [None] * levels
        self.written = [0] * levels  # rows in each level's file

    @property
    def spilled(self) -> bool:
        return self.folder is not None

    def add(self, made: list) -> None:
        for lv, table in enumerate(made):
            self.tables[lv].append(table)
            self.nbytes += table.nbytes
        if self.nbytes > HELD_BYTES:
            self.spill()

    def spill(self) -> None:
        """Append the rows held to the levels' files (made at the first spill), and hold no more."""
        if self.folder is None:
            self.folder = tempfile.TemporaryDirectory(prefix="ascendscope-lod-")
        for lv, tables in enumerate(self.tables):
            for table in tables:
                self.append(lv, table)
            tables.clear()
        self.nbytes = 0

    def append(self, lv: int, table: pa.Table) -> None:
        """Append rows to level ``lv``'s file (spilled only)."""
        writer, schema = self.writers[lv], self.schemas[lv]
        if writer is None:
            schema = self.schemas[lv] = table.schema
            writer = self.writers[lv] = pa.ipc.new_file(self._path(lv), schema)
        writer.write_table(table if table.schema == schema else table.cast(schema))
        self.written[lv] += table.num_rows

    def write(self, lv: int, width: int) -> int:
        """Append level ``lv``'s rows to slice_lod; return how many."""
        if self.spilled:
            self.spill()
            writer, self.writers[lv] = self.writers[lv], None
            if writer is None:
                return 0
            writer.close()
            # streamed, a batch at a time (read, not mapped: a mapped level's pages would stay in the process)
            with pa.OSFile(str(self._path(lv))) as source:
                file = pa.ipc.open_file(source)
                batches = (file.get_batch(i) for i in range(file.num_record_batches))
                self._insert("slice_lod", f"{lv}, {width}::BIGINT, *",
                             pa.RecordBatchReader.from_batches(file.schema, batches))
            self._path(lv).unlink()
            return self.written[lv]
        tables, self.tables[lv] = self.tables[lv], []
        n = sum(t.num_rows for t in tables)
        if n:
            self._insert("slice_lod", f"{lv}, {width}::BIGINT, *", pa.concat_tables(tables))
        return n

    def close(self) -> None:
        for writer in self.writers:
            if writer is not None:
                writer.close()
        if self.folder is not None:
            self.folder.cleanup()

    def _path(self, lv: int) -> Path:
        return Path(self.folder.name) / f"level{lv}.arrow"

    def _insert(self, into: str, columns: str, table) -> None:
        self.con.register("_lod_rows", table)
        try:
            self.con.execute(f"INSERT INTO {into} SELECT {columns} FROM _lod_rows")
        finally:
            self.con.unregister("_lod_rows")


def _in_id_order(batch: pa.Table) -> pa.Table:
    ids = numpy_of(batch.column("slice_id"))
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # (stored in id order: never expected)
        batch = batch.sort_by("slice_id")
    return batch


def _pieces(con, track: int, top: int, limit: int) -> list[tuple[str, list]] | None:
    """A track bigger than a batch in pieces of at most ``limit`` slices (a piece more only when one ``top``-wide
    span of one depth holds more), each whole buckets of every level, in the order ``slice_lod`` stores its rows:
    whole depths together while they fit, a bigger depth cut at multiples of ``top`` (the widest level's width,
    which every level's width divides; starts are never negative). Each piece is a condition on TRACK_ROWS and
    its parameters; in (depth, bucket) order, so each level's rows of the pieces one after the other are the
    track's in its stored order. None: the track's durations may sum past an int64 (lodcalc.SumTooLarge), so SQL
    sums them."""
    rows = con.execute("SELECT depth, ts_ns // ? AS span, count(*), sum(abs(dur_ns::DOUBLE)) FROM slices "
                       "WHERE track_id = ? GROUP BY ALL ORDER BY depth, span", [top, track]).fetchall()
    if sum(row[3] for row in rows) >= lodcalc.SUM_LIMIT / 2:
        return None
    per_depth: dict[int, list[tuple[int, int]]] = {}
    for depth, span, n, _ in rows:
        per_depth.setdefault(depth, []).append((span, n))
    pieces: list[tuple[str, list]] = []
    group: list[int] = []  # whole depths, together under the limit
    total = 0

    def flush() -> None:
        if group:
            pieces.append(("depth BETWEEN ? AND ?", [group[0], group[-1]]))
            group.clear()

    for depth, spans in per_depth.items():
        n = sum(c for _, c in spans)
        if n <= limit:
            if total + n > limit:
                flush()
                total = 0
            group.append(depth)
            total += n
            continue
        flush()
        total = 0
        first = count = 0
        for i, (span, c) in enumerate(spans):
            if count and count + c > limit:
                pieces.append(("depth = ? AND ts_ns >= ? AND ts_ns < ?", [depth, spans[first][0] * top, span * top]))
                first, count = i, 0
            count += c
        pieces.append(("depth = ? AND ts_ns >= ?", [depth, spans[first][0] * top]))
    flush()
    return pieces


def _sql_levels(con, lo: int, hi: int, widths: list[int], held: Held) -> None:
    """The levels of the tracks ``lo``..``hi`` by SQL (LEVEL0, NEXT_LEVEL), appended to ``held``'s files (spilled)
    in (track, depth, bucket) order."""
    for lv, width in enumerate(widths):
        if lv == 0:
            con.execute(LEVEL0.replace("FROM slices", "FROM slices WHERE track_id BETWEEN ? AND ?")
                        .replace("_lod_0", "_lodq_0"), [width, lo, hi])
        else:
            con.execute(NEXT_LEVEL.format(next=lv, prev=lv - 1, factor=FACTOR).replace("_lod_", "_lodq_"))
        held.append(lv, con.sql(f"SELECT {COLUMNS} FROM _lodq_{lv} ORDER BY track_id, depth, bucket").to_arrow_table())
    for lv in range(len(widths)):
        con.execute(f"DROP TABLE _lodq_{lv}")


def _batches(counts: list[tuple[int, int]], limit: int):
    """Contiguous ranges of tracks (lo, hi, slices) of at most ``limit`` slices each (or one larger track)."""
    lo = hi = None
    total = 0
    for track, n in counts:
        if lo is not None and total + n > limit:
            yield lo, hi, total
            lo, total = None, 0
        lo = track if lo is None else lo
        hi, total = track, total + n
    if lo is not None:
        yield lo, hi, total


# one row per (rank, level): the widths a rank's slices are summarised at (row_count: the level's rows in this
# database, all ranks together)
LOD_LEVELS_DDL = "CREATE OR REPLACE TABLE lod_levels (level INTEGER, bucket_ns BIGINT, row_count BIGINT, rank INTEGER)"
