"""``Run.sql`` bounded as the SQL console is (issue #45): a deadline and a memory limit by default, in a process
of its own that is ended when it cannot be interrupted; deep SQL is refused or answered, never a RecursionError;
sums of integers come back as integers (issue #44). On the real 2-rank sample (or its twin)."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

from ascendscope import sqlproc
from ascendscope.readonly import QueryTimedOut, ReadOnlyQueryError

SUM_600 = "SELECT " + "+".join(["1"] * 600) + " AS n"
NESTED_500 = "SELECT " + "(SELECT " * 500 + "1" + ")" * 500 + " AS n"
FROM_NESTED_500 = "SELECT * FROM " + "(SELECT * FROM " * 499 + "ranks" + ") t" * 499


def test_a_hostile_query_is_stopped_by_default(opened):
    """``list_sum(range(10^8))`` ran 88 s and took 7.4 GB of the caller's process: now it runs in a process of its
    own under the default deadline and memory limit, so the caller's memory does not move whether it answers (a
    quiet machine sums 10^8 within the deadline) or is stopped; four times as much cannot fit the default limit and
    is always stopped; and the run still answers."""
    import psutil

    run = opened["level1"]
    run.sql("SELECT 1 AS one")  # (its process started: the deadline counts from the query)
    me = psutil.Process()
    rss0 = me.memory_info().rss
    t0 = time.monotonic()
    try:
        assert run.sql("SELECT list_sum(range(100000000)) AS s")["s"].tolist() == [100000000 * 99999999 // 2]
    except ReadOnlyQueryError as stopped:
        assert stopped.code in ("query_timeout", "out_of_memory", "query_crashed"), stopped
    with pytest.raises(ReadOnlyQueryError) as caught:
        run.sql("SELECT list_sum(range(400000000)) AS s")  # 3.2 GB of list: past the 2 GB limit
    assert caught.value.code in ("query_timeout", "out_of_memory", "query_crashed"), caught.value
    assert time.monotonic() - t0 < 2 * sqlproc.DEFAULT_TIMEOUT_S + 10  # (it ran 88 s: bounded, not timed)
    assert me.memory_info().rss - rss0 < 256 * 2**20  # (it took 7.4 GB of the caller)
    assert run.sql("SELECT count(*) AS n FROM ranks")["n"].tolist() == [2]


def test_an_uninterruptible_query_ends_with_its_process(opened):
    """Constant folding runs while DuckDB plans, where no interrupt reaches it: the process is ended at the deadline
    and replaced for the next query."""
    run = opened["level1"]
    run.sql("SELECT 1 AS one")
    t0 = time.monotonic()
    with pytest.raises(QueryTimedOut):
        run.sql("SELECT length(repeat('x', 1000000000)) AS n", timeout_s=1.0)
    assert time.monotonic() - t0 < 1.0 + sqlproc.KILL_GRACE_S + 3
    assert run.sql("SELECT 1 AS one")["one"].tolist() == [1]


def test_the_memory_limit_holds_in_the_worker_not_the_caller(opened):
    run = opened["level1"]
    with pytest.raises(ReadOnlyQueryError) as caught:
        run.sql("SELECT list_transform(range(8000000), lambda x: x::VARCHAR) AS l FROM range(10)",
                memory_limit="256MB", timeout_s=120)
    assert caught.value.code in ("out_of_memory", "query_crashed"), caught.value
    space = sqlproc.Limits(memory_limit="256MB").address_space()
    assert space == 256 * 10**6 + sqlproc.HEADROOM_BYTES
    pid = run._sql._proc.pid if run._sql._proc is not None else None  # (replaced, if it had to end)
    assert pid is None or pid != os.getpid()


def test_an_order_by_beyond_the_memory_limit_spills_and_runs(opened):
    """An ordinary large ORDER BY needs address space beyond DuckDB's memory_limit (at the limit alone it fails):
    the headroom lets it spill and answer, every row."""
    rows = opened["level1"].sql("SELECT range AS a, hash(range) AS b FROM range(4000000) ORDER BY b",
                                memory_limit="128MB", timeout_s=300, arrow=True)
    assert rows.num_rows == 4_000_000


def test_lifted_limits_run_in_this_process(opened):
    run = opened["generated"]
    before = run._sql
    assert run.sql("SELECT 41 + 1 AS x", timeout_s=None, memory_limit=None)["x"].tolist() == [42]
    assert run._sql is before  # no process started for it


@pytest.mark.parametrize("limits", [{}, {"timeout_s": None, "memory_limit": None}], ids=["bounded", "lifted"])
def test_deep_sql_answers_or_is_refused_never_a_recursion_error(opened, limits):
    run = opened["level1"]
    assert run.sql(SUM_600, **limits)["n"].tolist() == [600]
    assert run.sql(FROM_NESTED_500, **limits)["rank"].tolist() == [0, 1]
    with pytest.raises(ReadOnlyQueryError) as caught:
        run.sql(NESTED_500, **limits)
    assert caught.value.code in ("syntax_error", "query_failed", "query_too_deep")


def test_integer_sums_come_back_as_integers(opened):
    """``sum`` of BIGINT is a HUGEINT in DuckDB: it was a float64 column (epoch ns lose digits past 2**53)."""
    run = opened["level1"]
    frame = run.sql("SELECT rank, sum(dur_ns) AS ns, sum(ts_ns) AS ts FROM slices GROUP BY rank ORDER BY rank")
    assert str(frame["ns"].dtype) == "int64"
    exact = run.sql("SELECT rank, sum(dur_ns)::VARCHAR AS ns, sum(ts_ns)::VARCHAR AS ts FROM slices GROUP BY rank "
                    "ORDER BY rank")
    assert [str(v) for v in frame["ns"]] == exact["ns"].tolist()
    assert all(isinstance(v, int) for v in frame["ts"])  # beyond int64 (epoch ns summed): Python ints, exact
    assert [str(v) for v in frame["ts"]] == exact["ts"].tolist()
    table = run.sql("SELECT sum(dur_ns) AS ns FROM slices", arrow=True)
    assert table.schema.field("ns").type == pa.int64()
    beyond = run.sql("SELECT sum(ts_ns::HUGEINT * 1000000) AS big FROM slices")["big"].iloc[0]
    assert isinstance(beyond, int) and beyond > 2 ** 63
    assert run.sql("SELECT 1.5::DECIMAL(4,1) AS d")["d"].tolist() == [1.5]  # a fraction stays what it was


def test_sql_answers_rows_as_before(opened):
    frame = opened["generated"].sql("SELECT rank, count(*) AS n, min(ts_ns) AS first, NULL::BIGINT AS gap, "
                                    "[1, 2] AS l FROM slices GROUP BY rank ORDER BY rank")
    assert frame["rank"].tolist() == [0, 1] and str(frame["n"].dtype) == "int64"
    assert str(frame["gap"].dtype) == "Int64" and list(frame["l"].iloc[0]) == [1, 2]
