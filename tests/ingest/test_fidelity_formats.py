"""Numbers that must not depend on the export format: the kernels' Wait Time of a db run by the profiler's rule,
the kernels of a rank whose output has only its trace, and the db export's memory names — each checked against
the source files read independently (the real samples, or their generated twins)."""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.pipeline import ingest_path
from tests.samples import PYTORCH_TEXT, REAL_SAMPLES
from tests.shared_runs import single_file

DB = REAL_SAMPLES / "msinsight_pytorch_2025" / "db"
LEVELS = ("level0", "level1", "level2")


def us_ns(text: str) -> int:
    return int((Decimal(text.strip()) * 1000).to_integral_value())


def rule_waits(rows: list[tuple[int, int]]) -> list[int]:
    """kernel_details' Wait Time: start minus the end of the previous kernel in start order, all streams, >= 0."""
    out, prev_end = [], None
    for start, end in rows:
        out.append(0 if prev_end is None else max(0, start - prev_end))
        prev_end = end
    return out


def kernel_csv(level: str, rank: int) -> Path:
    return PYTORCH_TEXT / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("rank", (0, 1))
def test_the_wait_rule_reproduces_kernel_details(level, rank):
    """The rule the db reader follows is the one behind the text export's own column (every row within 1 µs)."""
    with kernel_csv(level, rank).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    spans = sorted((us_ns(r["Start Time(us)"]), us_ns(r["Start Time(us)"]) + us_ns(r["Duration(us)"]),
                    us_ns(r["Wait Time(us)"])) for r in rows)
    expected = rule_waits([(s, e) for s, e, _ in spans])
    assert all(abs(got - want) <= 1000 for (_, _, got), want in zip(spans, expected))


def db_source_kernels(level: str, rank: int) -> list[tuple[int, int]]:
    """(start, end) of every kernel the db holds: tasks with compute info, and the communication operators."""
    path = DB / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)) as src:
        rows = src.execute("SELECT t.startNs, t.endNs, 0, t.rowid FROM COMPUTE_TASK_INFO c JOIN TASK t "
                           "USING (globalTaskId) UNION ALL SELECT startNs, endNs, 1, rowid FROM COMMUNICATION_OP "
                           "ORDER BY 1, 3, 4").fetchall()
    return [(s, e) for s, e, _, _ in rows]


@pytest.fixture(scope="module", params=LEVELS)
def db_run(request, tmp_path_factory):
    out, _ = single_file(tmp_path_factory, DB / request.param)  # (shared: tests/shared_runs.py)
    con = duckdb.connect(str(out), read_only=True)
    yield request.param, con
    con.close()


@pytest.mark.parametrize("rank", (0, 1))
def test_db_kernel_wait_follows_the_profilers_rule(db_run, rank):
    level, con = db_run
    spans = db_source_kernels(level, rank)
    got = [w for (w,) in con.execute("SELECT wait_time_ns FROM kernels WHERE rank = ? ORDER BY src_row",
                                     [rank]).fetchall()]
    assert got == rule_waits(spans)
    assert None not in got  # the communication operators have theirs too


def test_text_and_db_export_of_one_run_agree_on_wait_time(tmp_path):
    """The generator writes both exports of one simulation: the db run's derived column equals the CSV's."""
    from ascendscope.sample_data.generate import generate_run

    for export in ("text", "db"):
        generate_run(tmp_path / export, ranks=2, steps=2, ops_per_step=120, seed=19, export=export)
        ingest_path(tmp_path / export, tmp_path / f"{export}.duckdb")
    text, db = (duckdb.connect(str(tmp_path / f"{e}.duckdb"), read_only=True) for e in ("text", "db"))
    sql = "SELECT rank, start_ns, duration_ns, wait_time_ns, accelerator_core FROM kernels ORDER BY rank, src_row"
    assert db.execute(sql).fetchall() == text.execute(sql).fetchall()


def test_db_ge_allocations_are_named_like_the_text_export(db_run):
    """A GE block (no stream, no active totals) is "cann::<op>" in operator_memory.csv; the db reader names it so."""
    level, con = db_run
    blocks = 0
    for rank in (0, 1):
        path = DB / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)) as src:
            ge = src.execute("SELECT count(*) FROM OP_MEMORY WHERE streamPtr IS NULL "
                             "AND allocationTotalActive IS NULL").fetchone()[0]
            total = src.execute("SELECT count(*) FROM OP_MEMORY").fetchone()[0]
        got = con.execute("SELECT count(*) FILTER (WHERE starts_with(name, 'cann::')), count(*) FROM operator_memory "
                          "WHERE rank = ?", [rank]).fetchone()
        assert got == (ge, total)
        blocks += ge
    assert blocks > 0  # every real rank has some; a short generated one may not


def test_db_group_lanes_are_named_by_index_with_the_group_in_the_args(db_run):
    level, con = db_run
    lanes = con.execute("SELECT DISTINCT thread_name FROM tracks WHERE kind = 'communication' "
                        "AND NOT starts_with(thread_name, 'Plane') ORDER BY 1").fetchall()
    assert lanes == [("Group 0 Communication",)]
    path = DB / level / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)) as src:
        group = src.execute("SELECT DISTINCT s.value FROM COMMUNICATION_OP o JOIN STRING_IDS s "
                            "ON s.id = o.groupName").fetchall()
    args = con.execute("SELECT DISTINCT s.args->>'group' FROM slices s JOIN tracks t USING (track_id) "
                       "WHERE s.rank = 0 AND t.thread_name = 'Group 0 Communication'").fetchall()
    assert args == group


@pytest.fixture(scope="module")
def trace_only(tmp_path_factory):
    """Rank 0 of the text level1 run with only its trace (and profiler_info): a trace-only rank."""
    src = PYTORCH_TEXT / "level1" / "rank0_ascend_pt"
    root = tmp_path_factory.mktemp("trace-only")
    dst = root / "run" / "rank0_ascend_pt"
    (dst / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    shutil.copy(src / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", dst / "ASCEND_PROFILER_OUTPUT")
    shutil.copy(src / "profiler_info_0.json", dst)
    ingest_path(root / "run", root / "run.duckdb")
    con = duckdb.connect(str(root / "run.duckdb"), read_only=True)
    yield con
    con.close()


def test_a_trace_only_rank_gets_its_kernels_from_the_trace(trace_only):
    """The trace's compute tasks and communication ops are kernel_details' rows: same starts, cores that agree
    with the CSV's (HCCL rows exactly), the wait rule within 1 µs."""
    with kernel_csv("level1", 0).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    want = sorted((us_ns(r["Start Time(us)"]), us_ns(r["Wait Time(us)"]), r["Accelerator Core"] == "HCCL")
                  for r in rows)
    got = trace_only.execute("SELECT start_ns, wait_time_ns, accelerator_core = 'HCCL' FROM kernels "
                             "ORDER BY src_row").fetchall()
    assert len(got) == len(want)
    assert all(abs(g[0] - w[0]) <= 1 and abs(g[1] - w[1]) <= 1000 and g[2] == w[2] for g, w in zip(got, want))
    note = trace_only.execute("SELECT message FROM warnings WHERE file = 'kernel_details.csv'").fetchone()[0]
    assert note.startswith("not in this rank's output") and f"{sum(not w[2] for w in want)} Ascend Hardware" in note


def level0_trace_ops(rank: int) -> list[tuple[str, int, int]]:
    """The communication operators of the Level0 trace (the HCCL lane's Group threads), read independently."""
    path = PYTORCH_TEXT / "level0" / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(path.read_text())
    hccl = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
            and e["args"]["name"] in ("HCCL", "Communication")}
    groups = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
              and e["pid"] in hccl and not e["args"]["name"].startswith("Plane")}
    return sorted((e["name"], us_ns(str(e["ts"])), round(Decimal(str(e["dur"])) * 1000)) for e in events
                  if e.get("ph") == "X" and (e["pid"], e["tid"]) in groups)


def test_level0_communication_ops_come_from_the_trace(level0_db):
    con = duckdb.connect(str(level0_db), read_only=True)
    try:
        for rank in (0, 1):
            got = con.execute("SELECT op_name, start_ns, elapse_time_ns FROM comm_ops WHERE rank = ? "
                              "ORDER BY op_name, start_ns", [rank]).fetchall()
            assert got == level0_trace_ops(rank) and got
            assert con.execute("SELECT count(*) FROM comm_ops WHERE rank = ? AND (transit_time_ns IS NOT NULL "
                               "OR wait_time_ns IS NOT NULL)", [rank]).fetchone()[0] == 0
    finally:
        con.close()
