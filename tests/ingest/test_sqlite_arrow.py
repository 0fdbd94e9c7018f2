"""The SQLite copy's two readers give one result: ADBC's, in C, for a table whose values all have their column's
type, and Python's ``sqlite3`` for any other (``ingest.readers.sqlitedb``). Every profiler db of the sample tree
(real, or its generated twin) and a hostile database (columns that begin with thousands of NULLs, values of
another SQLite type, text that is not UTF-8) are copied both ways and compared table by table, row by row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.readers import dbsource, sqlitedb
from ascendscope.ingest.readers.sqlitedb import Col
from tests.samples import REAL_SAMPLES

DBS = sorted(p for p in (REAL_SAMPLES / "msinsight_pytorch_2025").glob("db/*/*/ASCEND_PROFILER_OUTPUT/*.db")
             if p.name.startswith("ascend_pytorch_profiler")) + \
    [REAL_SAMPLES / "msinsight_server_fixtures" / "full_db" / "msprof_0.db"]


def copy_all(path: Path, specs: dict[str, tuple[str, tuple[Col, ...]]], fast: bool, used: list | None = None):
    """Every table of ``specs`` (dest -> source table, spec) of the database, read one way: (rows by table as
    Python tuples, what each copy said)."""
    con = sqlitedb.connect(path)
    reader = sqlitedb.ArrowReader(path) if fast else None
    if used is not None and reader is not None:
        real = reader.batches
        reader.batches = lambda sql: (used.append(sql), (yield from real(sql)))[1]
    db = duckdb.connect()
    tables = sqlitedb.RankTables(db.cursor(), {dest: spec for dest, (_, spec) in specs.items()})
    copied = {}
    try:
        present = sqlitedb.tables(con)
        for dest, (table, _) in specs.items():
            c = sqlitedb.copy(con, present, table, tables, dest, 7, reader)
            copied[dest] = (c.rows, c.present, c.missing, c.bad)
        tables.flush()
    finally:
        con.close()
        if reader is not None:
            reader.close()
    rows = {dest: db.execute(f"SELECT * FROM {dest} ORDER BY rowid").fetchall() for dest in specs}
    return rows, copied


def profiler_specs(path: Path) -> dict:
    con = sqlitedb.connect(path)
    try:
        present = sqlitedb.tables(con)
    finally:
        con.close()
    return {f"d_{key}": (dbsource.source_table(table, present), spec) for key, (table, spec) in dbsource.TABLES.items()}


@pytest.mark.parametrize("path", DBS, ids=lambda p: f"{p.parents[2].name}/{p.name}" if len(p.parents) > 2 else p.name)
def test_every_sample_db_copies_alike_through_both_readers(path):
    assert path.is_file(), path
    specs = profiler_specs(path)
    used: list[str] = []
    fast_rows, fast_copied = copy_all(path, specs, fast=True, used=used)
    slow_rows, slow_copied = copy_all(path, specs, fast=False)
    assert used, "ADBC read no table of a clean profiler db"
    assert fast_copied == slow_copied
    for dest in specs:
        assert fast_rows[dest] == slow_rows[dest], dest
    assert sum(map(len, fast_rows.values())) > 1000


def hostile(tmp_path: Path) -> Path:
    path = tmp_path / "hostile.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE late (i INTEGER, d REAL, s TEXT, loose)")  # every column NULL for 3,000 rows first
    con.executemany("INSERT INTO late VALUES (?, ?, ?, ?)",
                    [(None, None, None, None)] * 3000 + [(1 << 62, 2.5, "é", 3), (-1, 3, "x", 4.0)])
    con.execute("CREATE TABLE mixed (i, d, s)")  # values of another SQLite type than the column's
    con.executemany("INSERT INTO mixed VALUES (?, ?, ?)",
                    [(n, float(n), str(n)) for n in range(2000)]
                    + [("12", "x", 5), (4.0, "1e3", b"bytes"), (4.5, None, 2.5), ("no", 7, None)])
    con.execute("CREATE TABLE nulls (i INTEGER, s TEXT)")  # nothing but NULLs
    con.executemany("INSERT INTO nulls VALUES (?, ?)", [(None, None)] * 10)
    # more rows than a batch: clean, and with a value of another type only past the first batch
    con.execute("CREATE TABLE long_clean (i INTEGER, s TEXT)")
    con.executemany("INSERT INTO long_clean VALUES (?, ?)", [(n, f"s{n}") for n in range(70_000)])
    con.execute("CREATE TABLE long_mixed (i INTEGER, s TEXT)")
    con.executemany("INSERT INTO long_mixed VALUES (?, ?)", [(n, f"s{n}") for n in range(70_000)])
    con.execute("UPDATE long_mixed SET i = 'late text' WHERE i = 69000")
    con.execute("CREATE TABLE empty (i INTEGER)")
    con.execute("CREATE TABLE badtext (s TEXT)")  # a TEXT value that is not UTF-8
    con.executemany("INSERT INTO badtext VALUES (?)", [("ok",)] * 5)
    con.execute("INSERT INTO badtext VALUES (CAST(X'FF00FE' AS TEXT))")
    con.commit()
    con.close()
    return path


HOSTILE = {
    "late": ("late", (Col("i", "BIGINT", ("i",)), Col("d", "DOUBLE", ("d",)), Col("s", "VARCHAR", ("s",)),
                      Col("loose", "DOUBLE", ("loose",)), Col("gone", "BIGINT", ("gone",)))),
    "mixed": ("mixed", (Col("i", "BIGINT", ("i",)), Col("d", "DOUBLE", ("d",)), Col("s", "VARCHAR", ("s",)))),
    "nulls": ("nulls", (Col("i", "BIGINT", ("i",)), Col("s", "VARCHAR", ("s",)))),
    "long_clean": ("long_clean", (Col("i", "BIGINT", ("i",)), Col("s", "VARCHAR", ("s",)))),
    "long_mixed": ("long_mixed", (Col("i", "BIGINT", ("i",)), Col("s", "VARCHAR", ("s",)))),
    "empty": ("empty", (Col("i", "BIGINT", ("i",)),)),
    "absent": ("absent", (Col("i", "BIGINT", ("i",)),)),
}


def test_a_hostile_db_copies_alike_through_both_readers(tmp_path):
    path = hostile(tmp_path)
    used: list[str] = []
    fast_rows, fast_copied = copy_all(path, HOSTILE, fast=True, used=used)
    slow_rows, slow_copied = copy_all(path, HOSTILE, fast=False)
    assert fast_copied == slow_copied
    assert fast_rows == slow_rows
    # the columns that begin with NULLs went through ADBC, and kept their type and every value; the tables with a
    # value of another type did not
    assert any('FROM "late"' in sql for sql in used) and any('FROM "long_clean"' in sql for sql in used)
    assert not any('FROM "mixed"' in sql or 'FROM "long_mixed"' in sql for sql in used)
    assert fast_rows["late"][-2:] == [(7, 1 << 62, 2.5, "é", 3.0, None), (7, -1, 3.0, "x", 4.0, None)]
    assert fast_copied["late"][2] == ["gone"]
    assert len(fast_rows["long_clean"]) == 70_000 and fast_rows["long_clean"][-1] == (7, 69_999, "s69999")
    assert fast_copied["long_mixed"][3] == {"i": 1} and fast_rows["long_mixed"][69_000] == (7, None, "s69000")
    # values of another type: read as Python reads them (converted where exact, else NULL and counted)
    assert fast_copied["mixed"][3] == {"i": 2, "d": 1}
    assert fast_rows["mixed"][-4:] == [(7, 12, None, "5"), (7, 4, 1000.0, "bytes"), (7, None, None, "2.5"),
                                       (7, None, 7.0, None)]


def test_text_that_is_not_utf8_names_its_table_through_both_readers(tmp_path):
    path = hostile(tmp_path)
    spec = {"badtext": ("badtext", (Col("s", "VARCHAR", ("s",)),))}
    for fast in (True, False):
        with pytest.raises(ValueError, match="table badtext cannot be read"):
            copy_all(path, spec, fast=fast)
