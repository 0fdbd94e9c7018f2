"""How many times a CSV's cells are gone over (issue #46): the CPU per byte of the CSVs is the passes over their
text. A kernel_details.csv, whose metric columns are typed from their data, was read into a table of text, which a
pass typed, a second copied into the typed table and further passes checked; now DuckDB reads its layout, the first
rows (the types of the columns without a unit, from them) and the typed table, and stores no text; only a file with
a cell to name (no number, scientific notation) or one the first rows did not foresee is read again. The figures are in
docs/bigtrace.md; these tests hold the passes down, and check that what they give is unchanged."""

from __future__ import annotations

import duckdb
import pytest

from ascendscope.ingest import csvcells, csvmany, sqlfuncs
from ascendscope.ingest.csvfiles import CsvLoad

HEADER = "Step Id,Name,Type,Start Time(us),Duration(us),Block Dim,aic_total_cycles,aic_mac_ratio,Note\n"
PLAIN = ("1,MatMul,MatMul,1736408883600785.646\t,522.342,24,1000,0.5,fine\n"
         "1,hcom_allReduce_,HCCL,1736408883601184.566\t,22.5,N/A,N/A,N/A,\n")  # an HCCL row: blank metrics
ROWS = PLAIN + "2,Cast,Cast,1.736408883601300E+15\t,1.25,8,7,0.125,\"two\nlines\"\n"  # a spreadsheet's exponent


class Recording:
    """A DuckDB connection that keeps the text of each statement run through it."""

    def __init__(self, con):
        self.con, self.sql = con, []

    def execute(self, sql, *args):
        self.sql.append(sql)
        return self.con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.con, name)


@pytest.fixture
def cur():
    con = duckdb.connect()
    sqlfuncs.install(con)
    yield Recording(con)
    con.close()


def _reads_of_file(sql: list[str]) -> int:
    return sum("read_csv(" in s for s in sql)


def _created(sql: list[str]) -> list[str]:
    return [s.split(" AS ")[0] for s in sql if s.lstrip().upper().startswith("CREATE")]


def test_a_csv_typed_from_its_data_is_read_three_times_and_no_text_table_is_stored(cur, tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text(HEADER + PLAIN)
    cl = CsvLoad(cur, "p_", "kernel_details", path, 3, path.name, tmp_path)
    assert cl.load() == 2
    assert (cl.status, cl.warnings) == ("loaded", [])
    assert _created(cur.sql) == ["CREATE OR REPLACE TABLE p_kernels"]
    assert _reads_of_file(cur.sql) == 3, cur.sql  # its layout, the first rows, the typed rows
    assert "LIMIT 2048" in cur.sql[1]
    types = dict(cur.execute("SELECT column_name, column_type FROM (DESCRIBE p_kernels)").fetchall())
    assert list(types) == ["rank", "src_row", "step_id", "name", "type", "start_ns", "duration_ns", "block_dim",
                           "aic_total_cycles", "aic_mac_ratio", "note"]  # (no column of the passes' own left)
    assert (types["aic_total_cycles"], types["aic_mac_ratio"], types["note"], types["block_dim"]) == \
        ("BIGINT", "DOUBLE", "VARCHAR", "BIGINT")


def test_a_csv_typed_by_its_header_is_read_twice(cur, tmp_path):
    path = tmp_path / "operator_details.csv"
    path.write_text("Name,Call Stack,Host Self Duration(us)\nop,\"a.py(1): f;\nb.py(2): g\",1.5\nop2,,N/A\n")
    cl = CsvLoad(cur, "p_", "operator_details", path, 0, path.name, tmp_path)
    assert cl.load() == 2
    assert (cl.status, cl.warnings) == ("loaded", [])
    assert _created(cur.sql) == ["CREATE OR REPLACE TABLE p_operators"]
    assert _reads_of_file(cur.sql) == 2, cur.sql  # its layout, the typed rows
    assert cur.execute("SELECT * FROM p_operators").fetchall() == [
        (0, 1, "op", "a.py(1): f;\nb.py(2): g", 1500), (0, 2, "op2", None, None)]


def test_a_value_in_scientific_notation_takes_one_more_read(cur, tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text(HEADER + ROWS)
    cl = CsvLoad(cur, "p_", "kernel_details", path, 3, path.name, tmp_path)
    assert cl.load() == 3
    assert _created(cur.sql) == ["CREATE OR REPLACE TABLE p_kernels"]
    assert _reads_of_file(cur.sql) == 4, cur.sql
    # what the passes give: the types decided from the data, the blanks left empty without a warning, the exponent
    assert cur.execute("SELECT src_row, block_dim, aic_total_cycles, aic_mac_ratio, start_ns, note FROM p_kernels "
                       "ORDER BY src_row").fetchall() == [
        (1, 24, 1000, 0.5, 1736408883600785646, "fine"),
        (2, None, None, None, 1736408883601184566, None),
        (3, 8, 7, 0.125, 1736408883601300000, "two\nlines")]
    assert (cl.status, cl.warnings) == ("loaded", [
        "column 'Start Time(us)': 1 values in scientific notation (a spreadsheet re-saved this file); "
        "they were loaded but keep only the digits shown"])


@pytest.mark.parametrize("late, kind", [("0.75", "DOUBLE"), ("x", "VARCHAR"), ("N/A", "BIGINT")])
def test_a_type_the_first_rows_did_not_foresee_is_counted_over_every_cell(cur, tmp_path, monkeypatch, late, kind):
    """Integers in the first rows, then a decimal or a word: the column is what counting every cell makes it,
    the table made again (a blank changes nothing)."""
    monkeypatch.setattr(csvcells, "HEAD_ROWS", 2)
    path = tmp_path / "kernel_details.csv"
    path.write_text(HEADER + PLAIN + f"2,Cast,Cast,1736408883601300.5\t,1.25,8,{late},0.125,x\n")
    cl = CsvLoad(cur, "p_", "kernel_details", path, 3, path.name, tmp_path)
    assert cl.load() == 3
    assert (cl.status, cl.warnings) == ("loaded", [])
    types = dict(cur.execute("SELECT column_name, column_type FROM (DESCRIBE p_kernels)").fetchall())
    assert types["aic_total_cycles"] == kind and "__flags" not in types
    assert cur.execute("SELECT aic_total_cycles::VARCHAR FROM p_kernels ORDER BY src_row").fetchall() == {
        "DOUBLE": [("1000.0",), (None,), ("0.75",)], "VARCHAR": [("1000",), ("N/A",), ("x",)],
        "BIGINT": [("1000",), (None,), (None,)]}[kind]
    made = len(_created(cur.sql))  # (and the file read once more, for the types, when it is made again)
    assert made == (1 if kind == "BIGINT" else 2) and _reads_of_file(cur.sql) == 1 + 2 * made, cur.sql


def test_a_bad_cell_is_still_named(cur, tmp_path):
    """The cells that gave no number are looked for in the file again, when the typed rows say one may hold
    something else than a blank."""
    path = tmp_path / "kernel_details.csv"
    path.write_text(HEADER + ROWS + "3,Add,Add,1736408883601400.5\t,abc,4,9,NaN,x\n")
    cl = CsvLoad(cur, "p_", "kernel_details", path, 0, path.name, tmp_path)
    assert cl.load() == 4
    assert cl.status == "partial"
    assert cl.warnings[:2] == [
        "column 'Duration(us)': 1 values that are not numbers were left empty (the first, 'abc', in data row 4)",
        "column 'aic_mac_ratio': 1 values that are not numbers were left empty (the first, 'NaN', in data row 4)"]
    assert _created(cur.sql) == ["CREATE OR REPLACE TABLE p_kernels"]
    assert _reads_of_file(cur.sql) == 6, cur.sql  # and the blanks, the bad cells, the exponents


@pytest.mark.parametrize("rows, reads", [(PLAIN, 4), (ROWS, 5)])
def test_a_batch_of_ranks_reads_its_file_four_times_and_stores_no_text_table(cur, tmp_path, monkeypatch, rows,
                                                                            reads):
    """Its layout, the markers, the first rows, the typed rows; and once more for the ranks' values in scientific
    notation. (No column is typed in place.)"""
    items = []
    for rank in (0, 1, 2):
        path = tmp_path / f"rank{rank}" / "kernel_details.csv"
        path.parent.mkdir()
        path.write_text(HEADER + rows)
        items.append((rank, path, f"rank{rank}/kernel_details.csv"))

    def no_fallback(self):
        raise AssertionError(f"{self.path} was loaded alone: the batch did not load")

    monkeypatch.setattr(CsvLoad, "load", no_fallback)
    results = csvmany.load_many(cur, "s_", "kernel_details", items, tmp_path / "w", "o_")
    sci = ["column 'Start Time(us)': 1 values in scientific notation (a spreadsheet re-saved this file); "
           "they were loaded but keep only the digits shown"]
    assert {r: (res.rows, res.warnings) for r, res in results.items()} == \
        {r: (rows.count("\n") - rows.count("two\nlines"), sci if rows is ROWS else []) for r in (0, 1, 2)}
    assert _created(cur.sql) == ["CREATE OR REPLACE TABLE o_kernels__b0"]
    assert _reads_of_file(cur.sql) == reads, cur.sql
    assert not any(" ALTER COLUMN " in sql for sql in cur.sql)
    types = dict(cur.execute("SELECT column_name, column_type FROM (DESCRIBE o_kernels)").fetchall())
    assert (types["aic_total_cycles"], types["aic_mac_ratio"], types["note"]) == ("BIGINT", "DOUBLE", "VARCHAR")
    assert "__flags" not in types
