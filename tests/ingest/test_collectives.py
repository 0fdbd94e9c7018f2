"""cluster_collectives (ingest/collectives.py): the instances, their group and occurrence, and each window's split,
checked against runs built so that every number is known, and against the real samples' own files."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from ascendscope.ingest import collectives
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.sample_data.waits import T0_US, write_wait_run
from tests.conftest import PYTORCH_TEXT, REAL_SAMPLES
from tests.samples import STEP, needs_real

US = 1000
T0_NS = T0_US * 1000
COLUMNS = [c for c, _ in collectives.COLUMNS]


def rows(con, where="TRUE") -> list[dict]:
    cur = con.execute(f"SELECT * FROM cluster_collectives WHERE {where} ORDER BY rank, start_ns")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


@pytest.fixture(scope="module")
def waits(tmp_path_factory):
    root = tmp_path_factory.mktemp("collectives")
    truth = write_wait_run(root / "src", ranks=4, late_rank=2, extra_us=300, steps=2)
    ingest_path(root / "src", root / "run.duckdb")
    con = duckdb.connect(str(root / "run.duckdb"), read_only=True)
    yield con, truth, root / "run.duckdb"
    con.close()


def test_instances_and_windows_of_a_constructed_run(waits):
    con, truth, _ = waits
    got = rows(con)
    assert [d[0] for d in con.execute("SELECT * FROM cluster_collectives LIMIT 0").description] == COLUMNS
    assert len(got) == 4 * 2
    for r in got:
        step = r["step"]  # ProfilerStep#1, #2: the op of step k is hcom_allReduce__123_{k-1}_1
        base = (step - 1) * 5_000 * US
        assert r["op_name"] == f"hcom_allReduce__123_{step - 1}_1" and r["op_type"] == "hcom_allReduce_"
        assert r["group_id"] == "0" and r["seq"] == 0 and r["source"] == "trace"
        assert r["start_ns"] - T0_NS - base == truth["arrival_us"][r["rank"]] * US
        assert r["end_ns"] - T0_NS - base == (max(truth["arrival_us"]) + 200) * US
        # the window runs from the step's start (no earlier collective of the group in the step) to the arrival
        assert r["window_start_ns"] - T0_NS == base
        late = r["rank"] == truth["late_rank"]
        assert r["computing_ns"] == (400 if late else 100) * US + 50 * US  # MatMul + Add
        assert r["top_kernel"] == "MatMul" and r["top_kernel_ns"] == (400 if late else 100) * US
        # every kernel of the window by name, most time first, with its type (Task Type: no kernel_details)
        assert json.loads(r["window_kernels"]) == [["MatMul", "AI_CORE", (400 if late else 100) * US],
                                                   ["Add", "AI_VECTOR_CORE", 50 * US]]
        assert r["window_kernel_names"] == 2
        assert r["other_comm_ns"] == 0
        # Add's end to the op's start (10 µs) is idle, the synchronize no launch
        if step == 1:  # the lane (device idle) begins at the run's first task, 30 µs into the step
            assert (r["preparing_ns"], r["launch_bound_ns"], r["free_ns"]) == (30 * US, 0, 10 * US)
        else:  # idle since step 1: the CANN launches at 12-18, 21-23, 25-27, 29-30 µs are launch-bound
            assert (r["preparing_ns"], r["launch_bound_ns"], r["free_ns"]) == (0, 11 * US, 29 * US)
        parts = r["computing_ns"] + r["other_comm_ns"] + r["launch_bound_ns"] + r["free_ns"] + r["preparing_ns"]
        assert parts == r["start_ns"] - r["window_start_ns"]


def test_a_rank_without_cann_has_no_launch_split(tmp_path):
    write_wait_run(tmp_path / "src", ranks=2, late_rank=1, steps=1, cann=False)
    ingest_path(tmp_path / "src", tmp_path / "run.duckdb")
    con = duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)
    got = rows(con)
    assert len(got) == 2 and all(r["launch_bound_ns"] is None for r in got)
    assert all(r["free_ns"] == 10 * US for r in got)


def test_shards_concatenated_equal_the_whole_run(waits, tmp_path):
    """Each row is one rank's own: the table built per rank equals the rows of the whole run."""
    _, _, path = waits
    whole = duckdb.connect(str(path), read_only=True)
    expected = sorted(whole.execute("SELECT * FROM cluster_collectives").fetchall())
    parts = []
    for rank in range(4):
        con = duckdb.connect(str(tmp_path / f"r{rank}.duckdb"))
        con.execute(f"ATTACH '{path}' AS run (READ_ONLY)")
        for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'run'").fetchall():
            cols = [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = 'run' "
                                              "AND table_name = ?", [t]).fetchall()]
            where = f"WHERE rank = {rank}" if "rank" in cols else ""
            con.execute(f"CREATE TABLE main.{t} AS SELECT * FROM run.{t} {where}")
        con.execute("DETACH run")
        collectives.build(con)
        parts += con.execute("SELECT * FROM cluster_collectives").fetchall()
        con.close()
    assert sorted(parts) == expected
    whole.close()


def test_point_to_point_ops_are_left_out():
    assert collectives.is_p2p("hcom_batchSendRecv__764_3_1") and collectives.is_p2p("hcom_send__1_0_1")
    assert collectives.is_p2p("HCOM_RECEIVE_x") and not collectives.is_p2p("hcom_allReduce__586_0_1")
    assert collectives.op_type("hcom_allReduce__586_0_1") == "hcom_allReduce_"
    assert collectives.lane_group("Group 0 Communication") == "0"
    assert collectives.lane_group("Group 90.91.105.46%enp189s0f0_60000_0_1 Communication") == \
        "90.91.105.46%enp189s0f0_60000_0_1"


def test_cover_counts_time_inside_windows():
    import numpy as np

    c = collectives.Cover([0, 10, 15, 40], [5, 20, 30, 50])  # merged: [0,5) [10,30) [40,50)
    got = c.within(np.array([0, 3, 12, 31, 0]), np.array([100, 11, 45, 39, 0]))
    assert got.tolist() == [35, 3, 23, 0, 0]


# --- the real samples (or their generated twins; the real data's own numbers: needs_real) ---------------------------

def _real(tmp_path_factory, rel: str):
    src = REAL_SAMPLES / rel
    if not src.is_dir():
        pytest.skip(f"real sample {src} not found")
    out = tmp_path_factory.mktemp("real") / "run.duckdb"
    ingest_path(src, out)
    return duckdb.connect(str(out), read_only=True), src


@pytest.fixture(scope="module")
def level1(tmp_path_factory):
    con, _ = _real(tmp_path_factory, "msinsight_pytorch_2025/text/level1")
    yield con
    con.close()


def test_level1_ops_match_the_trace_and_communication_json(level1):
    """Every op of the HCCL lane is an instance, ns-exact, grouped by communication.json's group of that op."""
    got = rows(level1)
    trace = {}
    for rank in (0, 1):
        events = json.loads((PYTORCH_TEXT / "level1" / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
                             "trace_view.json").read_text())
        names = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
                 and e["args"].get("name") == "HCCL"}
        threads = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
                   and e["args"]["name"].endswith("Communication")}
        for e in events:
            if e.get("ph") == "X" and e["pid"] in names and (e["pid"], e["tid"]) in threads:
                whole, frac = e["ts"].split(".")
                trace[(rank, e["name"])] = int(whole) * 1000 + int(frac.ljust(3, "0"))
    assert {(r["rank"], r["op_name"]): r["start_ns"] for r in got} == trace
    comm = json.loads((PYTORCH_TEXT / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
                       "communication.json").read_text())
    groups = {k.split("@")[1] for step in comm.values() for ops in step.values() for k in ops if "@" in k}
    assert {r["group_id"] for r in got} == groups and len(groups) == 1
    assert all(r["step"] == STEP and r["seq"] == 0 for r in got)
    for x in got:  # each window splits exactly into the lane's parts
        assert x["computing_ns"] + x["other_comm_ns"] + x["launch_bound_ns"] + x["free_ns"] + x["preparing_ns"] == \
            x["start_ns"] - x["window_start_ns"]


@needs_real
def test_level1_first_allreduce_window(level1):
    """Rank 1 reaches hcom_allReduce__586_0_1 5.608 ms after rank 0: its window (from its ProfilerStep#50 start)
    is longer by that much minus its later step start, split exactly into the lane's parts."""
    r = {x["rank"]: x for x in rows(level1, "op_name = 'hcom_allReduce__586_0_1'")}
    assert r[1]["start_ns"] - r[0]["start_ns"] == 5_607_716
    steps = dict(level1.execute("SELECT rank, host_start_ns FROM steps").fetchall())
    assert r[0]["window_start_ns"] == steps[0] and r[1]["window_start_ns"] == steps[1]
    for x in r.values():
        assert x["computing_ns"] + x["other_comm_ns"] + x["launch_bound_ns"] + x["free_ns"] + x["preparing_ns"] == \
            x["start_ns"] - x["window_start_ns"]
        assert x["launch_bound_ns"] > 0 and x["top_kernel"]


def test_st4_ops_come_from_communication_json(tmp_path_factory):
    """No trace on any rank: communication.json's collectives (p2p left out), grouped by its groups."""
    con, src = _real(tmp_path_factory, "msinsight_st_4rank_2025q4/level2")
    got = rows(con)
    assert got and all(r["source"] == "communication" and r["computing_ns"] is None for r in got)
    assert not any(collectives.is_p2p(r["op_name"]) for r in got)
    expected = set()
    for rank in range(4):
        comm = json.loads((src / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json")
                          .read_text())
        for step in comm.values():
            for op in step.get("collective", {}):
                if op != "Total Op Info":
                    expected.add((rank, op.split("@")[0], op.split("@")[1]))
    assert {(r["rank"], r["op_name"], r["group_id"]) for r in got} == expected
    con.close()


@needs_real
def test_st4_group_503_runs_on_ranks_2_and_3(tmp_path_factory):
    con, _ = _real(tmp_path_factory, "msinsight_st_4rank_2025q4/level2")
    g503 = {r["rank"]: r["start_ns"] for r in rows(con) if r["op_name"] == "hcom_allReduce__503_2_1"}
    assert g503 == {2: 1764246877265345800, 3: 1764246877271840000}
    con.close()


def test_a_copy_without_the_table_is_rebuilt_by_build(waits, tmp_path):
    """build() replaces the table (ingest of a run again): the same rows."""
    _, _, path = waits
    copy = tmp_path / "copy.duckdb"
    shutil.copy(path, copy)
    con = duckdb.connect(str(copy))
    before = sorted(con.execute("SELECT * FROM cluster_collectives").fetchall())
    con.execute("DROP TABLE cluster_collectives")
    collectives.build(con)
    assert sorted(con.execute("SELECT * FROM cluster_collectives").fetchall()) == before
    con.close()


def test_ops_without_a_group_id_match_across_ranks(waits, tmp_path):
    """msprof's older timeline has one ``Communication Kernel`` lane, and the communication.json of
    ``msprof --analyze`` names no group: the ops are still one instance per (name, occurrence) across ranks (group:
    the lane's name), so late arrivals find the constructed late rank."""
    from ascendscope.server.queries import DuckRunner, Page
    from ascendscope.server.queries.late_arrivals import table

    _, truth, path = waits
    copy = tmp_path / "nogroup.duckdb"
    shutil.copy(path, copy)
    con = duckdb.connect(str(copy))
    con.execute("UPDATE tracks SET thread_name = 'Communication Kernel' "
                "WHERE regexp_matches(thread_name, '^Group .* Communication$')")
    con.execute("UPDATE comm_ops SET group_id = NULL")
    collectives.build(con)
    got = rows(con)
    assert got and {r["group_id"] for r in got} == {"Communication Kernel"}
    ranks_per_instance = con.execute("SELECT count(DISTINCT rank) FROM cluster_collectives "
                                     "GROUP BY op_name, seq").fetchall()
    assert {n for (n,) in ranks_per_instance} == {truth["ranks"]}
    for step in sorted({r["step"] for r in got}):  # the table lists one step at a time
        late = table(DuckRunner(con), step, Page(0, 50))["rows"]
        assert late and {r["last_rank"] for r in late} == {truth["late_rank"]}
    con.close()
