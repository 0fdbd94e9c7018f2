"""The batch paths of small ranks: ``ingest.csvmany`` types one CSV kind of many ranks in one batch, and
``ingest.tracegroup`` reads their traces in one multi-file read; each gives what the per-rank loads give.

A batch that fails falls back to loading rank by rank, with the same result, only slower. So these tests also
check that well-formed input really takes the batch paths: a change that broke a batch's SQL would otherwise
pass every other test, with the ingest of wide runs several times slower.
"""
from __future__ import annotations

import duckdb
import pytest

from ascendscope.ingest import csvmany, pipeline, sqlfuncs
from ascendscope.ingest.csvfiles import CsvLoad
from ascendscope.ingest.trace import TraceLoad
from ascendscope.ingest.tracegroup import TraceGroup
from ascendscope.sample_data.generate import generate_run

HEADER = "Step Id,Name,Type,Start Time(us),Duration(us),Input Shapes,aic_total_cycles,aic_mac_ratio\n"


def kernel_rows(rank: int) -> str:
    return "".join([
        f"1,MatMul_{rank},MatMul,1736408883600785.646\t,522.342,\"\"\"4,2048\"\";\n\"\"8\"\"\",{100 + rank},0.5\n",
        f"1,Add_{rank},Add,1736408883601184.566\t,22.5,\"\"\"16,512\"\"\",N/A,N/A\n",
        f"2,Cast_{rank},Cast,1736408883601300.001\t,1.25,,{7 * rank},0.125\n",
    ])


@pytest.fixture
def cur():
    con = duckdb.connect()
    sqlfuncs.install(con)
    yield con
    con.close()


def write(tmp_path, rank: int, text: str):
    path = tmp_path / f"rank{rank}" / "kernel_details.csv"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def per_file(cur, items, work) -> list[tuple]:
    rows = []
    for rank, path, display in items:
        loader = CsvLoad(cur, f"pf{rank}_", "kernel_details", path, rank, display, work)
        loader.load()
        rows += cur.execute(f"SELECT * FROM {loader.out}").fetchall()
    return sorted(rows, key=lambda r: (r[0], r[1]))


def test_files_of_one_header_load_as_one_batch_with_the_per_file_rows(cur, tmp_path, monkeypatch):
    items = [(r, write(tmp_path, r, HEADER + kernel_rows(r)), f"rank{r}/kernel_details.csv") for r in (0, 1, 5)]
    expected = per_file(cur, items, tmp_path / "w")

    def no_fallback(self):
        raise AssertionError(f"{self.path} was loaded alone: the batch did not load")

    monkeypatch.setattr(CsvLoad, "load", no_fallback)
    results = csvmany.load_many(cur, "s_", "kernel_details", items, tmp_path / "w", "o_")
    got = cur.execute("SELECT * FROM o_kernels").fetchall()
    assert got == expected  # the same rows, columns and types, and in (rank, src_row) order
    assert {r: res.rows for r, res in results.items()} == {0: 3, 1: 3, 5: 3}
    assert all(res.status == "loaded" and not res.warnings for res in results.values())
    # the multi-line cell stays one value, and the rows count from 1 in each file
    assert [(r[0], r[1]) for r in got] == [(rank, row) for rank in (0, 1, 5) for row in (1, 2, 3)]


@pytest.mark.parametrize("files", [2, 7, 33])
def test_a_batch_typed_from_its_first_column_names_each_rank_and_row(cur, tmp_path, monkeypatch, files):
    """The markers that separate the files are in the first column: here one whose type comes from its data
    (integers), and up to 33 files of differing lengths, each row given its file's rank and row number. One rank's
    value in scientific notation is reported for that rank alone, as the per-file load does."""
    header = "aic_total_cycles,Name,Start Time(us),aic_mac_ratio\n"
    ranks = [3 * i + 1 for i in range(files)]
    items = []
    for r in ranks:
        start = "1.73640888360E+15" if r == ranks[-2] else "1736408883600785.646"
        text = (f"{10 * r},Op_{r},{start}\t,0.{r}\n" + f"N/A,Idle_{r},1736408883600800.5\t,N/A\n"
                + "".join(f"{r + k},Op_{r}_{k},17364088836{k:05d}.25\t,0.5\n" for k in range(r % 5)))
        items.append((r, write(tmp_path, r, header + text), f"rank{r}/kernel_details.csv"))
    expected = per_file(cur, items, tmp_path / "w")
    warned = {}
    for rank, path, display in items:
        loader = CsvLoad(cur, f"pw{rank}_", "kernel_details", path, rank, display, tmp_path / "w")
        loader.load()
        warned[rank] = loader.warnings

    def no_fallback(self):
        raise AssertionError(f"{self.path} was loaded alone: the batch did not load")

    monkeypatch.setattr(CsvLoad, "load", no_fallback)
    results = csvmany.load_many(cur, "s_", "kernel_details", items, tmp_path / "w", "o_")
    assert cur.execute("SELECT * FROM o_kernels").fetchall() == expected
    assert [r[0] for r in cur.execute("DESCRIBE o_kernels").fetchall()][:3] == ["rank", "src_row", "aic_total_cycles"]
    assert {r: res.rows for r, res in results.items()} == {r: 2 + r % 5 for r in ranks}
    assert {r: res.warnings for r, res in results.items()} == warned
    assert warned[ranks[-2]] and not any(warned[r] for r in ranks if r != ranks[-2])


def test_a_file_with_another_header_loads_alone_beside_the_batch(cur, tmp_path, monkeypatch):
    items = [(r, write(tmp_path, r, HEADER + kernel_rows(r)), f"rank{r}/kernel_details.csv") for r in (0, 1, 2)]
    odd = (HEADER.replace(",aic_mac_ratio", "")  # an older version's columns
           + "1,MatMul_3,MatMul,1736408883600785.646\t,522.342,,103\n"
           + "1,Add_3,Add,1736408883601184.566\t,22.5,,N/A\n"
           + "2,Cast_3,Cast,1736408883601300.001\t,1.25,,21\n")
    items.append((3, write(tmp_path, 3, odd), "rank3/kernel_details.csv"))
    alone = []
    load = CsvLoad.load

    def counted(self):
        alone.append(self.rank)
        return load(self)

    monkeypatch.setattr(CsvLoad, "load", counted)
    results = csvmany.load_many(cur, "s_", "kernel_details", items, tmp_path / "w", "o_")
    assert alone == [3]
    assert {r: res.rows for r, res in results.items()} == {0: 3, 1: 3, 2: 3, 3: 3}
    ranks = cur.execute("SELECT rank, count(*), count(aic_mac_ratio) FROM o_kernels GROUP BY rank ORDER BY rank")
    assert ranks.fetchall() == [(0, 3, 2), (1, 3, 2), (2, 3, 2), (3, 3, 0)]


def test_a_group_of_well_formed_ranks_takes_the_batch_paths(tmp_path, monkeypatch):
    """A shard of small ranks reads their traces in one multi-file read and their CSVs in batches. Each path falls
    back to rank-by-rank loads when it fails, with the same run as the result: only these spies see a broken one."""
    generate_run(tmp_path / "src", ranks=3, steps=2, ops_per_step=20)
    disc = pipeline.discover(tmp_path / "src")
    alone: list[str] = []
    for owner, name in ((TraceGroup, "_read_one_by_one"), (TraceLoad, "read"), (CsvLoad, "load")):
        real = getattr(owner, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            alone.append(_name)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, spy)
    summary = pipeline.ingest_shard(disc.ranks, disc.root, tmp_path / "shard.duckdb", src_path=str(tmp_path / "src"))
    assert summary["ranks"] == [0, 1, 2] and alone == []
    with duckdb.connect(str(tmp_path / "shard.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT rank) FROM slices").fetchone()[0] == 3
        assert con.execute("SELECT count(DISTINCT rank) FROM kernels").fetchone()[0] == 3


def test_a_batched_file_names_its_odd_cells_as_alone(tmp_path):
    """A cell that gives no number, or an integer in scientific notation, in one file of a batch: that file's
    warnings are those it gives loaded alone (the batch goes file by file), and the rows are the same."""
    header = "Name,Type,Start Time(us),Duration(us),Block Num\n"
    good = "op_a,MatMul,1000.5\t,10.25,8\nop_b,Add,2000.125\t,5.5,4\n"
    odd = {"not_a_number": "op_a,MatMul,1000.5\t,abc,8\nop_b,Add,2000.125\t,5.5,4\n",
           "exponent": "op_a,MatMul,1000.5\t,10.25,8\nop_b,Add,2000.125\t,5.5,4E0\n"}
    for name, text in odd.items():
        folder = tmp_path / name
        items = []
        for rank, body in enumerate((good, text, good)):
            path = folder / f"rank{rank}" / "kernel_details.csv"
            path.parent.mkdir(parents=True)
            path.write_text(header + body)
            items.append((rank, path, f"rank{rank}/kernel_details.csv"))
        cur = duckdb.connect()
        sqlfuncs.install(cur)
        results = csvmany.load_many(cur, "s_", "kernel_details", items, folder / "w", "")
        for rank, path, display in items:
            alone = duckdb.connect()
            sqlfuncs.install(alone)
            loader = CsvLoad(alone, "a_", "kernel_details", path, rank, display, folder / "a")
            loader.load()
            assert (results[rank].status, results[rank].warnings) == (loader.status, loader.warnings), (name, rank)
            assert cur.execute(f"SELECT * EXCLUDE (rank) FROM kernels WHERE rank = {rank} ORDER BY src_row"
                               ).fetchall() == alone.execute("SELECT * EXCLUDE (rank) FROM a_kernels ORDER BY src_row"
                                                             ).fetchall(), (name, rank)
        assert results[1].warnings, name


def test_blank_words_in_a_batch_keep_it_one_batch(tmp_path, monkeypatch):
    """A numeric cell that reads None or null is a blank, not a cell to name: the batch is loaded as one."""
    header = "Name,Type,Start Time(us),Duration(us),Block Num\n"
    items = []
    for rank, dur in enumerate(("10.25", "None", "null")):
        path = tmp_path / f"rank{rank}" / "kernel_details.csv"
        path.parent.mkdir(parents=True)
        path.write_text(header + f"op_a,MatMul,1000.5\t,{dur},8\nop_b,Add,2000.125\t,5.5,4\n")
        items.append((rank, path, f"rank{rank}/kernel_details.csv"))

    def no_fallback(self):
        raise AssertionError(f"{self.path} was loaded alone: the batch did not load")

    monkeypatch.setattr(CsvLoad, "load", no_fallback)
    cur = duckdb.connect()
    sqlfuncs.install(cur)
    results = csvmany.load_many(cur, "s_", "kernel_details", items, tmp_path / "w", "")
    assert all(res.status == "loaded" and not res.warnings for res in results.values())
    assert cur.execute("SELECT rank, duration_ns FROM kernels ORDER BY rank, src_row").fetchall() == [
        (0, 10250), (0, 5500), (1, None), (1, 5500), (2, None), (2, 5500)]
