"""What made a small db export slow to open (issue #44): a process pool task per rank, and pandas imported by every
process that read a db (pyarrow's builders of Python values import it, ~0.5 CPU-s). The time itself is measured by
``ascendscope bench ready`` (docs/bench-ingest.md); these tests hold the causes away."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pyarrow as pa

from ascendscope.ingest.columns import arrow_array
from ascendscope.ingest.discover import discover
from ascendscope.ingest.shards import plan_shards
from tests.samples import SAMPLE_RUNS

DB_RUN = SAMPLE_RUNS["db_level1"]


def test_small_db_export_ranks_share_one_shard():
    """Two ranks of a 1.7 MB db export are one pool task (as two text-export ranks are), not one each."""
    shards = plan_shards(discover(DB_RUN))
    assert [[s.rank for s in shard.sources] for shard in shards] == [[0, 1]]


def test_a_big_rank_keeps_a_shard_of_its_own():
    disc = discover(DB_RUN)
    shards = plan_shards(disc, group_bytes=1)  # every rank is bigger than that
    assert [[s.rank for s in shard.sources] for shard in shards] == [[0], [1]]


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
