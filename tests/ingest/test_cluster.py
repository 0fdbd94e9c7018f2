"""ingest/cluster.py: the cluster tables against their sources (step_trace_time.csv, communication_matrix.json,
msprof-analyze's cluster_analysis_output), shard by shard equal to the whole run, and bad cluster files warned
about by name."""

from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.cluster import build_cluster_tables, load_cluster_analysis
from tests.conftest import PYTORCH_TEXT, REAL_SAMPLES, needs_real

FIXTURES = REAL_SAMPLES / "msinsight_server_fixtures"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"real sample {FIXTURES} not found")


def us_ns(text: str) -> int:
    return int((Decimal(text.strip()) * 1000).to_integral_value())


def ms_ns(value) -> int:
    return int((Decimal(str(value)) * 1_000_000).to_integral_value())


@pytest.fixture()
def level1_con(level1_db, tmp_path):
    path = tmp_path / "level1.duckdb"
    shutil.copy(level1_db, path)
    con = duckdb.connect(str(path))
    build_cluster_tables(con)
    yield con
    con.close()


def test_cluster_steps_equal_step_trace_time_csv(level1_con):
    got = {(r, s): (step, comp, exposed, free, overlapped, comm)
           for r, s, step, comp, exposed, free, overlapped, comm in level1_con.execute(
               "SELECT rank, step, step_ns, computing_ns, exposed_comm_ns, free_ns, overlapped_ns, communication_ns "
               "FROM cluster_steps").fetchall()}
    want = {}
    for rank in (0, 1):
        path = PYTORCH_TEXT / "level1" / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
        for row in csv.DictReader(path.open()):
            comp, cno, free = (us_ns(row[k]) for k in ("Computing", "Communication(Not Overlapped)", "Free"))
            want[(rank, int(row["Step"]))] = (comp + cno + free, comp, cno, free, us_ns(row["Overlapped"]),
                                              us_ns(row["Communication"]))
    assert got == want
    assert level1_con.execute("SELECT DISTINCT source FROM cluster_steps").fetchall() == [("step_trace",)]


def test_cluster_ranks_count_each_rank(level1_con):
    rows = level1_con.execute("SELECT rank, has_trace, slice_count, kernel_count, step_count, folder "
                              "FROM cluster_ranks ORDER BY rank").fetchall()
    for rank, has_trace, slices, kernels, steps, folder in rows:
        assert has_trace and folder == f"rank{rank}_ascend_pt"
        assert slices == level1_con.execute("SELECT count(*) FROM slices WHERE rank = ?", [rank]).fetchone()[0]
        assert kernels == level1_con.execute("SELECT count(*) FROM kernels WHERE rank = ?", [rank]).fetchone()[0]
        assert steps == 1
    assert [r[0] for r in rows] == [0, 1]


def test_cluster_comm_matrix_equals_communication_matrix_json(level1_con):
    """The `total` slot of each op type, per rank file and link, as communication_matrix.json has it."""
    for rank in (0, 1):
        out_dir = PYTORCH_TEXT / "level1" / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        path = out_dir / "communication_matrix.json"
        want = {}
        for step, by_type in json.loads(path.read_text()).items():
            for comm_type, entries in by_type.items():
                for key, links in (entries or {}).items():
                    op, _, rest = key.partition("-total@")
                    if not rest:
                        continue
                    for link, v in links.items():
                        src, dst = (int(x) for x in link.split("-"))
                        want[(step, comm_type, rest, op, src, dst)] = (v["Transport Type"], v["Transit Size(MB)"],
                                                                       ms_ns(v["Transit Time(ms)"]),
                                                                       v["Bandwidth(GB/s)"])
        rows = level1_con.execute(
            "SELECT step, comm_type, group_id, op_type, src_rank, dst_rank, transport_type, transit_size_mb, "
            "transit_time_ns, bandwidth_gbps FROM cluster_comm_matrix WHERE rank = ?", [rank]).fetchall()
        got = {tuple(r[:6]): tuple(r[6:]) for r in rows}
        assert want and got == want


def _shard(run_path: Path, rank: int, out: Path) -> duckdb.DuckDBPyConnection:
    """One rank's tables of the run (every table with a rank column, filtered), as a shard would hold them."""
    con = duckdb.connect(str(out))
    con.execute(f"ATTACH '{run_path}' AS run (READ_ONLY)")
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'run'")
              .fetchall()]
    for t in tables:
        cols = {c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = 'run' "
                                          "AND table_name = ?", [t]).fetchall()}
        where = f"WHERE rank = {rank}" if "rank" in cols else ""
        con.execute(f"CREATE TABLE main.{t} AS SELECT * FROM run.{t} {where}")
    con.execute("DETACH run")
    return con


CLUSTER_TABLES = ("cluster_ranks", "cluster_steps", "cluster_comm_matrix")


def test_shards_concatenated_equal_the_whole_run(generated_db, tmp_path):
    """Rank 1 without step_trace rows takes the Overlap Analysis path; either way each rank's rows stand alone."""
    run = tmp_path / "run.duckdb"
    shutil.copy(generated_db, run)
    con = duckdb.connect(str(run))
    con.execute("DELETE FROM step_trace WHERE rank = 1")
    build_cluster_tables(con)
    whole = {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in CLUSTER_TABLES}
    assert sorted(con.execute("SELECT DISTINCT rank, source FROM cluster_steps").fetchall()) == \
        [(0, "step_trace"), (1, "overlap")]
    con.close()
    parts: dict[str, list] = {t: [] for t in CLUSTER_TABLES}
    for rank in (0, 1):
        shard = _shard(run, rank, tmp_path / f"rank_{rank}.duckdb")
        build_cluster_tables(shard)
        for t in CLUSTER_TABLES:
            parts[t] += shard.execute(f"SELECT * FROM {t}").fetchall()
        shard.close()
    for t in CLUSTER_TABLES:
        assert whole[t], t
        assert sorted(parts[t], key=repr) == whole[t], t


@needs_fixtures
def test_cluster_analysis_output_holds_every_row_of_its_files():
    """Every file of cluster_analysis_output loads, row for row (the real sample's, or its generated twin's)."""
    out = FIXTURES / "cluster_analysis_output"
    con = duckdb.connect()
    assert load_cluster_analysis(con, FIXTURES) == []
    assert {s for (s,) in con.execute("SELECT status FROM cluster_analysis_files").fetchall()} == {"loaded"}
    rows = list(csv.DictReader((out / "cluster_step_trace_time.csv").open(newline="")))
    assert con.execute("SELECT count(*) FILTER (WHERE type = 'rank'), count(*) FILTER (WHERE type = 'stage') "
                       "FROM cluster_analysis_step_trace").fetchone() == \
        (sum(r["Type"] == "rank" for r in rows), sum(r["Type"] == "stage" for r in rows))
    last = [r for r in rows if r["Type"] == "rank"][-1]
    assert con.execute("SELECT computing_ns, bubble_ns FROM cluster_analysis_step_trace WHERE rank = ?",
                       [int(last["Index"])]).fetchone() == (us_ns(last["Computing"]), us_ns(last["Bubble"]))
    matrix = json.loads((out / "cluster_communication_matrix.json").read_text())
    assert con.execute("SELECT count(*) FROM cluster_analysis_comm_matrix").fetchone()[0] == \
        sum(len(links) for group in matrix.values() for step in group.values() for links in step.values())
    groups = json.loads((out / "communication_group.json").read_text())
    assert con.execute("SELECT count(*) FROM cluster_analysis_groups").fetchone()[0] == \
        sum(len(v) for v in groups.values())


@needs_real
def test_cluster_analysis_output_of_the_real_sample():
    con = duckdb.connect()
    assert load_cluster_analysis(con, FIXTURES) == []
    files = con.execute("SELECT file, status FROM cluster_analysis_files ORDER BY file").fetchall()
    assert files == [(f"cluster_analysis_output/{n}", "loaded") for n in (
        "cluster_communication.json", "cluster_communication_matrix.json", "cluster_step_trace_time.csv",
        "communication_group.json")]
    assert con.execute("SELECT count(*) FILTER (WHERE type = 'rank'), count(*) FILTER (WHERE type = 'stage') "
                       "FROM cluster_analysis_step_trace").fetchone() == (16, 2)
    # rank 8: Computing 80072.45015234381 µs, Bubble 178320.2648359375 µs
    assert con.execute("SELECT step, computing_ns, bubble_ns FROM cluster_analysis_step_trace WHERE rank = 8"
                       ).fetchone() == (2, 80072450, 178320265)
    assert con.execute("SELECT \"index\" FROM cluster_analysis_step_trace WHERE type = 'stage' ORDER BY src_row"
                       ).fetchall()[0] == ("(0, 1, 2, 3, 4, 5, 6, 7)",)
    assert con.execute("SELECT count(*) FROM cluster_analysis_comm_matrix").fetchone()[0] == 10
    assert con.execute("SELECT transport_type, transit_time_ns, bandwidth_gbps FROM cluster_analysis_comm_matrix "
                       "WHERE group_name = 'p2p' AND matrix_key LIKE 'hcom_send%' AND src_rank = 0 AND dst_rank = 8"
                       ).fetchone() == ("RDMA", 863815, 24.2778)
    ops = con.execute("SELECT count(*), count(DISTINCT rank) FROM cluster_analysis_comm_ops").fetchone()
    assert ops[0] > 0
    assert con.execute("SELECT start_ns, elapse_time_ns FROM cluster_analysis_comm_ops WHERE group_name = 'p2p' "
                       "AND op_name = 'hcom_send__822_0' AND rank = 0").fetchone() == (1695115378810042500, 896487)
    assert con.execute("SELECT count(*) FROM cluster_analysis_groups").fetchone()[0] == 29


def test_no_cluster_analysis_output_gives_empty_tables(tmp_path):
    con = duckdb.connect()
    assert load_cluster_analysis(con, tmp_path) == []
    for t in ("cluster_analysis_files", "cluster_analysis_step_trace", "cluster_analysis_comm_matrix"):
        assert con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] == 0


def test_bad_cluster_files_are_warned_about_by_name(tmp_path):
    out = tmp_path / "job" / "cluster_analysis_output"
    out.mkdir(parents=True)
    (out / "cluster_step_trace_time.csv").write_text(
        "Step,Type,Index,Computing,Free\n"
        "2,rank,0,10.5,1\n"
        "2,rank,1,abc,2\n"       # not a number: kept as NULL, warned
        "2,rank,2,3\n")           # short row: skipped, warned
    (out / "cluster_communication_matrix.json").write_text(json.dumps(
        {"p2p": {"step2": {"op@1": {"0-1": {"Transport Type": "HCCS", "Transit Size(MB)": 1,
                                            "Transit Time(ms)": 0.5}, "x-y": {}}}}}))
    (out / "cluster_communication.json").write_text("{not json")
    (out / "cluster_analysis.db").write_bytes(b"")
    con = duckdb.connect()
    warnings = load_cluster_analysis(con, tmp_path)
    csv_name, matrix_name = "job/cluster_analysis_output/cluster_step_trace_time.csv", \
        "job/cluster_analysis_output/cluster_communication_matrix.json"
    assert any(w.startswith(csv_name) and "row 2" in w and "'abc'" in w for w in warnings), warnings
    assert any(w.startswith(csv_name) and "row 3" in w and "skipped" in w for w in warnings), warnings
    assert any(w.startswith(matrix_name) and "'x-y'" in w for w in warnings), warnings
    assert any(w.startswith("job/cluster_analysis_output/cluster_communication.json") and "not loaded" in w
               for w in warnings), warnings
    assert any(w.startswith("job/cluster_analysis_output/cluster_analysis.db") for w in warnings), warnings
    assert con.execute("SELECT rank, computing_ns, free_ns FROM cluster_analysis_step_trace ORDER BY rank"
                       ).fetchall() == [(0, 10500, 1000), (1, None, 2000)]
    assert con.execute("SELECT src_rank, dst_rank, transit_time_ns FROM cluster_analysis_comm_matrix").fetchall() == \
        [(0, 1, 500000)]
    status = dict(con.execute("SELECT file, status FROM cluster_analysis_files").fetchall())
    assert status[csv_name] == "partial" and status[matrix_name] == "partial"
    assert status["job/cluster_analysis_output/cluster_communication.json"] == "failed"
    assert status["job/cluster_analysis_output/cluster_analysis.db"] == "skipped"


@needs_fixtures
def test_discovery_does_not_call_the_loaded_cluster_output_unloaded():
    """cluster_analysis_output is read by load_cluster_analysis: discovery skips it as a rank folder without a
    warning that says it was not loaded."""
    from ascendscope.ingest.discover import discover

    disc = discover(FIXTURES)
    assert not [w for w in disc.warnings if "cluster_analysis_output" in str(w[1])], disc.warnings
