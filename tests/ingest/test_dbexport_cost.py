"""What made a small db export slow to open (issue #44): a process pool task per rank, pandas imported by every
process that read a db (pyarrow's builders of Python values import it, ~0.5 CPU-s), and each rank of a shard staged
on its own (~220 DuckDB statements a rank, each costing milliseconds, where the text export stages a shard's ranks
together). The time itself is measured by ``ascendscope bench ready`` (docs/bench-ingest.md); these tests hold the
causes away."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import duckdb
import pyarrow as pa
import pytest

from ascendscope.ingest import pipeline
from ascendscope.ingest.columns import arrow_array
from ascendscope.ingest.discover import discover
from ascendscope.ingest.readers import dbstage, dbtables, sqlitedb
from ascendscope.ingest.shards import plan_shards
from tests.samples import PYTORCH_TEXT, SAMPLE_RUNS

DB_RUN = SAMPLE_RUNS["db_level1"]


def test_small_db_export_ranks_share_one_shard():
    """Two ranks of a 1.7 MB db export are one pool task (as two text-export ranks are), not one each."""
    shards = plan_shards(discover(DB_RUN))
    assert [[s.rank for s in shard.sources] for shard in shards] == [[0, 1]]


def test_a_big_rank_keeps_a_shard_of_its_own():
    disc = discover(DB_RUN)
    shards = plan_shards(disc, group_bytes=1)  # every rank is bigger than that
    assert [[s.rank for s in shard.sources] for shard in shards] == [[0], [1]]


def test_small_db_export_ranks_are_staged_together():
    """A shard's two small db-export ranks are one stage (each file kind of both staged at once), as text-export
    ranks are; a rank of another format starts a stage of its own."""
    ranks = discover(DB_RUN).ranks
    assert pipeline.plan_groups(ranks) == [[0, 1]]
    text = discover(PYTORCH_TEXT / "level1").ranks
    assert pipeline.plan_groups([*ranks, *text]) == [[0, 1], [2, 3]]


class Counting:
    """A DuckDB connection (or cursor) that counts the statements run through it and its cursors."""

    def __init__(self, target, counter: list):
        self._target, self._counter = target, counter

    def execute(self, *args, **kwargs):
        with self._counter[1]:
            self._counter[0] += 1
        return self._target.execute(*args, **kwargs)

    def cursor(self):
        return Counting(self._target.cursor(), self._counter)

    def __getattr__(self, name):
        return getattr(self._target, name)


def shard_statements(monkeypatch, ranks, out) -> int:
    """The DuckDB statements of a shard task writing ``ranks`` into ``out``."""
    counter = [0, threading.Lock()]
    real = pipeline.atomic_duckdb

    @contextmanager
    def counted(path, config=None):
        with real(path, config) as con:
            yield Counting(con, counter)

    monkeypatch.setattr(pipeline, "atomic_duckdb", counted)
    pipeline.ingest_shard(ranks, DB_RUN, out, src_path=str(DB_RUN))
    monkeypatch.setattr(pipeline, "atomic_duckdb", real)
    return counter[0]


def test_a_second_db_rank_costs_a_few_statements_not_a_rank_of_them(tmp_path, monkeypatch):
    """Staged together, the second rank of a db shard adds the few statements of its own (its Overlap Analysis
    lane) to the ~320 of the shard, where staged alone it added ~220."""
    ranks = discover(DB_RUN).ranks
    one = shard_statements(monkeypatch, ranks[:1], tmp_path / "one.duckdb")
    two = shard_statements(monkeypatch, ranks, tmp_path / "two.duckdb")
    assert two - one <= 20, (one, two)


def test_a_db_group_that_fails_together_is_staged_again_rank_by_rank(tmp_path, monkeypatch):
    """When the group's statements fail (here: the CSV-shaped tables of two ranks at once), each rank is staged
    again alone, its tables included: the run is the one a group gives."""
    pipeline.ingest_path(DB_RUN, tmp_path / "group.duckdb")
    real = dbtables.build

    def not_two(cur, p, out, present, *args):
        if len(present) > 1:
            raise duckdb.OutOfMemoryException("the group does not fit")
        return real(cur, p, out, present, *args)

    monkeypatch.setattr(dbtables, "build", not_two)
    pipeline.ingest_path(DB_RUN, tmp_path / "alone.duckdb")
    queries = ["SELECT rank, kind, status FROM files ORDER BY ALL", "SELECT rank, has_trace FROM ranks ORDER BY rank",
               "SELECT * FROM kernels ORDER BY rank, src_row", "SELECT * FROM memory_record ORDER BY rank, src_row",
               "SELECT rank, count(*), sum(dur_ns) FROM slices GROUP BY rank ORDER BY rank",
               "SELECT rank, count(*) FROM flows GROUP BY rank ORDER BY rank",
               "SELECT rank, file, message FROM warnings ORDER BY ALL"]
    with duckdb.connect(str(tmp_path / "group.duckdb"), read_only=True) as group, \
            duckdb.connect(str(tmp_path / "alone.duckdb"), read_only=True) as alone:
        for sql in queries:
            assert group.execute(sql).fetchall() == alone.execute(sql).fetchall(), sql
        assert alone.execute("SELECT count(DISTINCT rank) FROM kernels").fetchone()[0] == 2


READ_A_DB_RANK = """
import sys, tempfile
from pathlib import Path
from ascendscope.ingest import pipeline
from ascendscope.ingest.discover import discover
disc = discover(sys.argv[1])
pipeline.ingest_shard(disc.ranks, disc.root, Path(tempfile.mkdtemp()) / "shard.duckdb", src_path=sys.argv[1])
print("pandas" in sys.modules)
"""


def test_reading_a_db_export_imports_no_pandas():
    out = subprocess.run([sys.executable, "-c", READ_A_DB_RANK, str(DB_RUN)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "False"


def test_arrow_arrays_from_python_values_keep_every_value_and_null():
    cols = {"i": ([1, None, -(1 << 63), (1 << 63) - 1], "BIGINT"), "f": ([0.5, None, -1e300, 2.0], "DOUBLE"),
            "s": (["a", None, "", "多字节 \x00 text"], "VARCHAR")}
    table = pa.Table.from_arrays([arrow_array(v, t) for v, t in cols.values()], names=list(cols))
    con = duckdb.connect()
    con.register("t", table)
    assert con.execute("SELECT i, f, s FROM t").fetchall() == list(zip(*(v for v, _ in cols.values())))


def test_a_group_copied_in_small_batches_gives_the_same_run(tmp_path, monkeypatch):
    """The SQLite rows of a group reach DuckDB in batches of several ranks; however they are cut (here a few rows
    a batch, and every table flushed when a few are pending in all), each rank's rows keep their order."""
    pipeline.ingest_path(DB_RUN, tmp_path / "big.duckdb")
    monkeypatch.setattr(sqlitedb, "BATCH_ROWS", 7)
    monkeypatch.setattr(sqlitedb, "PENDING_ROWS", 19)
    pipeline.ingest_path(DB_RUN, tmp_path / "small.duckdb")
    with duckdb.connect(str(tmp_path / "big.duckdb"), read_only=True) as big, \
            duckdb.connect(str(tmp_path / "small.duckdb"), read_only=True) as small:
        for table in ("slices", "flows", "counters", "kernels", "memory_record", "operator_memory", "warnings"):
            sql = f"SELECT * FROM {table}"
            assert big.execute(sql).fetchall() == small.execute(sql).fetchall(), table


@pytest.mark.parametrize("side", ["stage", "beside"])
def test_the_lanes_give_one_run_whichever_cursor_makes_them(tmp_path, monkeypatch, side):
    """The lanes are one queue that two cursors empty, each into its own table: when the stage's cursor makes them
    all (the second one late) or the second one does (the stage's late), the run is the same."""
    pipeline.ingest_path(DB_RUN, tmp_path / "shared.duckdb")
    take, owners = dbstage.LanesBeside.take, []

    def late(self, cur, mine):
        if (mine == 1) == (side == "stage"):  # the late cursor starts once the other has taken every lane
            while self.todo:
                time.sleep(0.001)
        take(self, cur, mine)
        if mine == 1:
            owners.append(dict(self.owner))

    monkeypatch.setattr(dbstage.LanesBeside, "take", late)
    pipeline.ingest_path(DB_RUN, tmp_path / "one.duckdb")
    assert owners and set(owners[0].values()) == {0 if side == "stage" else 1}
    with duckdb.connect(str(tmp_path / "shared.duckdb"), read_only=True) as shared, \
            duckdb.connect(str(tmp_path / "one.duckdb"), read_only=True) as one:
        for table in ("slices", "flows", "tracks", "counters", "kernels", "warnings"):
            sql = f"SELECT * FROM {table}"
            assert shared.execute(sql).fetchall() == one.execute(sql).fetchall(), table
