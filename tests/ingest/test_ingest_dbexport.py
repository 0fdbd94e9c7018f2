"""The db-export reader (ingest/readers) on the real samples: every source row becomes a slice, a counter value, a
flow or a table row; a db run agrees with the text export of the same level where the two collections must agree;
the views answer for it; broken and partial databases say what was not read."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.pipeline import ingest_path
from tests.conftest import HAVE_REAL, REAL_SAMPLES
from tests.shared_runs import single_file

PYTORCH = REAL_SAMPLES / "msinsight_pytorch_2025"
DB, TEXT = PYTORCH / "db", PYTORCH / "text"
MSPROF_DB = REAL_SAMPLES / "msinsight_server_fixtures" / "full_db" / "msprof_0.db"
RANKS = (0, 1)

pytestmark = pytest.mark.skipif(not DB.is_dir(), reason=f"real samples not found at {DB}")


def out_dir(root: Path, rank: int) -> Path:
    return root / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"


def source(level: str, rank: int, name: str | None = None) -> sqlite3.Connection:
    path = out_dir(DB / level, rank) / (name or f"ascend_pytorch_profiler_{rank}.db")
    return sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)


def one(con, sql: str, params=()):
    return con.execute(sql, params).fetchone()[0]


# the parent row of an FFTS+ task (its subtasks share stream and task id, each with a context id)
FFTS_PARENTS = """(SELECT t.globalTaskId FROM TASK t WHERE t.contextId = 4294967295 AND EXISTS (
                       SELECT 1 FROM TASK s WHERE s.streamId = t.streamId AND s.taskId = t.taskId
                       AND s.contextId <> 4294967295 AND s.startNs BETWEEN t.startNs AND t.endNs))"""


def has_table(src: sqlite3.Connection, table: str) -> bool:
    return bool(one(src, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [table]))


@pytest.fixture(scope="module")
def db_export(tmp_path_factory):
    """``db_export(level)``: ``(database, summary)`` of the level's db export ingested as one file, made once
    (``run`` and ``db_client`` read the same one, as do other modules: tests/shared_runs.py)."""
    return lambda level: single_file(tmp_path_factory, DB / level)


@pytest.fixture(scope="module", params=["level0", "level1", "level2"])
def run(request, tmp_path_factory, db_export):
    """(level, db-export run, text-export run of the same level, summary of the db run)."""
    level = request.param
    path, summary = db_export(level)
    if level in ("level0", "level1"):  # the session's ingest of the same text folder (tests/conftest.py)
        text_path = request.getfixturevalue(f"{level}_db")
    else:
        text_path = tmp_path_factory.mktemp(f"text-{level}") / "text.duckdb"
        ingest_path(TEXT / level, text_path)
    db = duckdb.connect(str(path), read_only=True)
    text = duckdb.connect(str(text_path), read_only=True)
    yield level, db, text, summary
    db.close()
    text.close()


def test_two_ranks_read_from_the_db_files(run):
    level, db, _, summary = run
    assert summary["ranks"] == [0, 1]
    assert db.execute("SELECT list(rank_source ORDER BY rank), bool_and(has_trace) FROM ranks").fetchone() == \
        (["profiler_info_file", "profiler_info_file"], True)
    kinds = db.execute("SELECT rank, kind, status FROM files ORDER BY rank, kind").fetchall()
    assert kinds == [(r, k, "loaded") for r in RANKS for k in ("analysis_db", "db_export", "profiler_info")]
    # the one table nothing reads yet is named, not dropped silently
    for rank in RANKS:
        with closing(source(level, rank)) as src:
            n = one(src, "SELECT count(*) FROM NPU_OP_MEM")
        notes = [m for (m,) in db.execute("SELECT message FROM warnings WHERE rank = ?", [rank]).fetchall()]
        assert n and any(f"NPU_OP_MEM ({n} rows)" in m for m in notes), notes


@pytest.mark.parametrize("rank", RANKS)
def test_every_timed_row_is_a_slice_of_its_lane(run, rank):
    level, db, _, _ = run
    got = dict(db.execute("SELECT t.kind, count(*) FROM slices s JOIN tracks t USING (track_id) "
                          "WHERE s.rank = ? AND NOT t.derived GROUP BY t.kind", [rank]).fetchall())
    with closing(source(level, rank)) as src:
        expected = {
            "python": one(src, "SELECT count(*) FROM PYTORCH_API"),
            "cann": one(src, "SELECT count(*) FROM CANN_API"),
            "hardware": one(src, f"SELECT count(*) FROM TASK WHERE globalTaskId NOT IN {FFTS_PARENTS}"),
            "communication": one(src, "SELECT (SELECT count(*) FROM COMMUNICATION_OP) + (SELECT count(*) FROM "
                                      "COMMUNICATION_TASK_INFO c JOIN TASK t USING (globalTaskId))"),
        }
        own_overlap = has_table(src, "OVERLAP_ANALYSIS")
        if own_overlap:
            expected["overlap"] = one(src, "SELECT count(*) FROM OVERLAP_ANALYSIS")
        first_task = one(src, f"SELECT min(startNs) FROM TASK WHERE globalTaskId NOT IN {FFTS_PARENTS}")
    assert got == expected
    derived = db.execute("SELECT count(*) FROM tracks WHERE rank = ? AND derived AND slice_count > 0",
                         [rank]).fetchone()[0]
    assert (derived > 0) != own_overlap  # the lane comes from the db when it has one, else it is derived
    assert db.execute("SELECT overlap_source FROM ranks WHERE rank = ?", [rank]).fetchone()[0] == \
        ("trace" if own_overlap else "derived")
    assert db.execute("SELECT min(s.ts_ns) FROM slices s JOIN tracks t USING (track_id) "
                      "WHERE s.rank = ? AND t.kind = 'hardware'", [rank]).fetchone()[0] == first_task


@pytest.mark.parametrize("rank", RANKS)
def test_counter_values_equal_the_source_rows(run, rank):
    level, db, _, _ = run
    with closing(source(level, rank)) as src:
        expected = one(src, """SELECT 3 * (SELECT count(*) FROM NPU_MEM) + (SELECT count(*) FROM HBM)
                                      + 2 * (SELECT count(*) FROM LLC) + 8 * (SELECT count(*) FROM ACC_PMU)
                                      + 2 * (SELECT count(*) FROM SOC_BANDWIDTH_LEVEL)
                                      + (SELECT count(*) FROM AICORE_FREQ)""")
        app_kb = one(src, "SELECT sum(hbm) / 1024.0 FROM NPU_MEM n JOIN STRING_IDS s ON s.id = n.type "
                          "WHERE s.value = 'app'")
    assert db.execute("SELECT count(*) FROM counters WHERE rank = ?", [rank]).fetchone()[0] == expected
    assert db.execute("SELECT sum(value) FROM counters WHERE rank = ? AND name = 'APP/HBM'",
                      [rank]).fetchone()[0] == pytest.approx(app_kb)


# a connection id's device ends: tasks (a communication task's end is its operator) and communication operators
TARGETS = f"""(SELECT connectionId AS cid FROM TASK
               WHERE globalTaskId NOT IN (SELECT globalTaskId FROM COMMUNICATION_TASK_INFO)
                 AND globalTaskId NOT IN {FFTS_PARENTS}
               UNION ALL SELECT connectionId FROM COMMUNICATION_OP)"""
OP_CIDS = """(SELECT ci.connectionId FROM PYTORCH_API p JOIN CONNECTION_IDS ci ON ci.id = p.connectionId
              WHERE p.type IN (50001, 50004))"""


@pytest.mark.parametrize("rank", RANKS)
def test_flows_follow_the_connection_ids(run, rank):
    level, db, _, _ = run
    with closing(source(level, rank)) as src:
        expected = {
            "HostToDevice": one(src, f"SELECT count(*) FROM {TARGETS} "
                                     "WHERE cid IN (SELECT connectionId FROM CANN_API)"),
            "async_npu": one(src, f"SELECT count(*) FROM {TARGETS} WHERE cid IN {OP_CIDS}"),
            "async_task_queue": one(src, """SELECT count(*) FROM PYTORCH_API p JOIN STRING_IDS s ON s.id = p.name
                                            JOIN CONNECTION_IDS ci ON ci.id = p.connectionId
                                            WHERE p.type = 50002 AND s.value LIKE 'Dequeue%'"""),
            # ops sharing a connection id that reaches no task: forward -> backward
            "fwdbwd": one(src, f"""SELECT coalesce(sum(n - 1), 0) FROM (
                                       SELECT connectionId, count(*) AS n FROM {OP_CIDS} ops
                                       WHERE connectionId NOT IN (SELECT cid FROM {TARGETS})
                                       GROUP BY connectionId HAVING count(*) > 1)"""),
        }
    got = dict(db.execute("SELECT cat, count(*) FROM flows WHERE rank = ? GROUP BY cat", [rank]).fetchall())
    assert got == expected and min(got.values()) > 0
    assert db.execute("SELECT count(*) FROM flows WHERE rank = ? AND (src_slice_id IS NULL OR dst_slice_id IS NULL)",
                      [rank]).fetchone()[0] == 0
    # an async_npu arrow leaves the torch op that holds the connection id and ends on a device lane
    ends = db.execute("""SELECT DISTINCT s.cat, t.kind FROM flows f JOIN slices s ON s.slice_id = f.src_slice_id
                         JOIN slices d ON d.slice_id = f.dst_slice_id JOIN tracks t ON t.track_id = d.track_id
                         WHERE f.rank = ? AND f.cat = 'async_npu' ORDER BY ALL""", [rank]).fetchall()
    assert ends == [("cpu_op", "communication"), ("cpu_op", "hardware")]


@pytest.mark.parametrize("rank", RANKS)
def test_tables_hold_every_source_row(run, rank):
    level, db, _, _ = run
    with closing(source(level, rank)) as src:
        expected = {
            "kernels": one(src, "SELECT (SELECT count(*) FROM COMPUTE_TASK_INFO JOIN TASK USING (globalTaskId)) "
                                "+ (SELECT count(*) FROM COMMUNICATION_OP)"),
            "memory_record": one(src, "SELECT (SELECT count(*) FROM MEMORY_RECORD) + (SELECT count(*) FROM NPU_MEM n "
                                      "JOIN STRING_IDS s ON s.id = n.type WHERE s.value = 'app')"),
            "operator_memory": one(src, "SELECT count(*) FROM OP_MEMORY"),
            "npu_module_mem": one(src, "SELECT count(*) FROM NPU_MODULE_MEM"),
        }
        compute_ns = one(src, "SELECT sum(endNs - startNs) FROM COMPUTE_TASK_INFO JOIN TASK USING (globalTaskId)")
    with closing(source(level, rank, "analysis.db")) as analysis:
        expected["step_trace"] = one(analysis, "SELECT count(*) FROM StepTraceTime")
        computing = one(analysis, "SELECT computing FROM StepTraceTime")
        comm = {  # Level0 has no communication tables
            "comm_ops": "SELECT count(*) FROM CommAnalyzerTime",
            "comm_matrix": "SELECT count(*) FROM CommAnalyzerMatrix",
            "comm_bandwidth": "SELECT count(*) FROM (SELECT DISTINCT step, type, hccl_op_name, group_name, "
                              "transport_type FROM CommAnalyzerBandwidth)",
            "comm_size_distribution": "SELECT count(*) FROM CommAnalyzerBandwidth WHERE count > 0"}
        for table, sql in comm.items():
            expected[table] = one(analysis, sql) if has_table(analysis, "CommAnalyzerTime") else 0
        if not has_table(analysis, "CommAnalyzerTime"):  # the ops come from the trace, with their elapse only
            with closing(source(level, rank)) as src:
                expected["comm_ops"] = one(src, "SELECT count(*) FROM COMMUNICATION_OP")
    got = {t: db.execute(f"SELECT count(*) FROM {t} WHERE rank = ?", [rank]).fetchone()[0] for t in expected}
    assert got == expected
    assert db.execute("SELECT sum(duration_ns) FROM kernels WHERE rank = ? AND accelerator_core IS DISTINCT FROM "
                      "'HCCL'", [rank]).fetchone()[0] == compute_ns
    assert db.execute("SELECT computing_ns FROM step_trace WHERE rank = ?", [rank]).fetchone()[0] == \
        round(computing * 1000)
    with closing(source(level, rank)) as src:
        step = one(src, "SELECT id FROM STEP_TIME")
    assert db.execute("SELECT count(*) FROM kernels WHERE rank = ? AND step_id = ?", [rank, step]).fetchone()[0] == \
        expected["kernels"]


def test_the_db_run_agrees_with_the_text_export_of_its_level(run):
    """The db and text folders are two collections of one script: what does not vary between runs agrees."""
    _, db, text, _ = run
    for sql in [
        "SELECT rank, accelerator_core, count(*), count(DISTINCT type) FROM kernels GROUP BY ALL ORDER BY ALL",
        "SELECT rank, tid, slice_count FROM tracks WHERE kind = 'hardware' ORDER BY ALL",  # device tasks per stream
        "SELECT rank, step, name FROM steps ORDER BY ALL",
        "SELECT rank, step FROM step_trace ORDER BY ALL",
        "SELECT rank, count(*) FROM operator_memory GROUP BY ALL ORDER BY ALL",
        "SELECT s.rank, count(*) FROM slices s JOIN tracks t USING (track_id) "
        "WHERE t.kind = 'communication' AND t.thread_name LIKE 'Group %' GROUP BY ALL ORDER BY ALL",
        "SELECT DISTINCT cat FROM flows ORDER BY ALL",
        "SELECT rank, count(*) FROM flows WHERE cat = 'fwdbwd' GROUP BY ALL ORDER BY ALL",
    ]:
        assert db.execute(sql).fetchall() == text.execute(sql).fetchall(), sql
    # the same model's compute time in one step: close, not equal (communication waits on the peer: it varies)
    sql = "SELECT rank, computing_ns FROM step_trace ORDER BY rank"
    for (rank, ours), (_, theirs) in zip(db.execute(sql).fetchall(), text.execute(sql).fetchall(), strict=True):
        assert ours == pytest.approx(theirs, rel=0.05), rank
    if HAVE_REAL:  # the real text export's counter lanes (the generator writes fewer)
        counters = "SELECT DISTINCT counter_name FROM tracks WHERE kind = 'counter'"
        ours, theirs = ({n for (n,) in c.execute(counters).fetchall()} for c in (db, text))
        assert ours <= theirs and theirs - ours == {"QoS OTHERS"}  # the db export has no QoS table


def test_a_derived_overlap_lane_equals_the_db_own(tmp_path):
    """level1 rank0 holds OVERLAP_ANALYSIS: without it, the lane derived from the tasks gives the same intervals."""
    folder = out_dir(tmp_path, 0)
    folder.mkdir(parents=True)
    copy = folder / "ascend_pytorch_profiler_0.db"
    shutil.copyfile(out_dir(DB / "level1", 0) / copy.name, copy)
    with closing(sqlite3.connect(copy)) as con:
        con.execute("PRAGMA journal_mode = DELETE")
        own = con.execute("SELECT type, count(*), sum(endNs - startNs) FROM OVERLAP_ANALYSIS GROUP BY type "
                          "ORDER BY type").fetchall()
        con.execute("DROP TABLE OVERLAP_ANALYSIS")
        con.commit()
    ingest_path(tmp_path, tmp_path / "run.duckdb")
    with duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True) as con:
        derived = con.execute("SELECT t.tid, count(*), sum(s.dur_ns) FROM slices s JOIN tracks t USING (track_id) "
                              "WHERE t.kind = 'overlap' AND t.derived GROUP BY t.tid ORDER BY t.tid").fetchall()
        assert con.execute("SELECT overlap_source FROM ranks").fetchone()[0] == "derived"
    assert derived == own and len(own) == 4


def test_text_beside_the_db_is_what_is_read(tmp_path):
    rank_dir = tmp_path / "rank0_ascend_pt"
    shutil.copytree(TEXT / "level1" / "rank0_ascend_pt", rank_dir)
    for name in ("ascend_pytorch_profiler_0.db", "analysis.db"):
        shutil.copyfile(out_dir(DB / "level1", 0) / name, out_dir(tmp_path, 0) / name)
    ingest_path(tmp_path, tmp_path / "run.duckdb")
    with duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True) as con:
        kinds = {k for (k,) in con.execute("SELECT kind FROM files").fetchall()}
        assert "trace_view" in kinds and not kinds & {"db_export", "analysis_db"}
        notes = dict(con.execute("SELECT file, message FROM warnings WHERE file LIKE '%.db'").fetchall())
    assert sorted(Path(f).name for f in notes) == ["analysis.db", "ascend_pytorch_profiler_0.db"]
    assert all("text export beside it was loaded" in m for m in notes.values())


@pytest.mark.skipif(not MSPROF_DB.is_file(), reason=f"{MSPROF_DB} not found")
def test_a_cann_msprof_db_opens_on_its_own(tmp_path):
    summary = ingest_path(MSPROF_DB, tmp_path / "run.duckdb")
    with closing(sqlite3.connect(f"{MSPROF_DB.as_uri()}?mode=ro&immutable=1", uri=True)) as src:
        tasks = one(src, "SELECT count(*) FROM TASK")
        planes = one(src, "SELECT count(*) FROM COMMUNICATION_TASK_INFO JOIN TASK USING (globalTaskId)")
        orphans = one(src, "SELECT count(*) FROM COMMUNICATION_TASK_INFO") - planes
        marks = one(src, "SELECT count(*) FROM MSTX_EVENTS")
    assert summary["slices_per_kind"]["hardware"] == tasks
    assert summary["slices_per_kind"]["communication"] == planes
    assert summary["slices_per_kind"]["other"] == marks
    messages = [w["message"] for w in summary["warnings"]]
    assert f"table COMMUNICATION_TASK_INFO: {orphans} rows without a TASK row (no times) were skipped" in messages
    with closing(sqlite3.connect(f"{MSPROF_DB.as_uri()}?mode=ro&immutable=1", uri=True)) as src:
        ddr = one(src, "SELECT count(*) FROM DDR")
    assert any(m.startswith("tables not loaded") and f"DDR ({ddr} rows)" in m for m in messages), messages


def test_a_partial_or_broken_db_says_what_was_not_read(tmp_path):
    good = out_dir(tmp_path / "good", 0)
    good.mkdir(parents=True)
    with closing(sqlite3.connect(good / "ascend_pytorch_profiler_0.db")) as con:
        con.executescript("""
            CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
            INSERT INTO STRING_IDS VALUES (1, 'KERNEL_AIVEC'), (2, 'Add');
            CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER,
                               globalTaskId INTEGER, globalPid INTEGER, taskType INTEGER, streamId INTEGER);
            INSERT INTO TASK VALUES (1000, 2000, 0, 7, 1, 42, 1, 2), ('soon', 3000, 0, 8, 2, 42, 1, 2),
                                    (5000000000000000000, 5000000000000000010, 0, 9, 3, 42, 1, 2);
            CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER, taskType INTEGER);
            INSERT INTO COMPUTE_TASK_INFO VALUES (2, 1, 1);
            CREATE TABLE LATER_TABLE (x INTEGER);
            INSERT INTO LATER_TABLE VALUES (1);""")
    (tmp_path / "bad" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (out_dir(tmp_path / "bad", 1) / "ascend_pytorch_profiler_1.db").write_bytes(b"not a database at all")
    summary = ingest_path(tmp_path, tmp_path / "run.duckdb")
    messages = {(w["rank"], w["message"]) for w in summary["warnings"]}
    assert (0, "table TASK: 1 values of start_ns are not numbers and were read as NULL") in messages
    assert (0, "table TASK: 1 rows without a start or end time were skipped") in messages
    assert (0, "table TASK has no column context_id, task_id, model_id: read as empty") in messages
    assert (0, "table COMPUTE_TASK_INFO has no column block_dim, mix_block_dim, op_type, input_formats, "
               "input_data_types, input_shapes, output_formats, output_data_types, output_shapes: read as empty") \
        in messages
    assert (0, "tables not loaded (not shown by ascendscope yet): LATER_TABLE (1 rows)") in messages
    assert (0, "1 events of the Ascend Hardware lane with a time before 1970 or beyond 2^62 ns (146 years from the "
               "epoch) were skipped") in messages
    assert (1, "not loaded: not an SQLite database") in messages
    assert summary["slices_per_kind"] == {"hardware": 1, "overlap": 1}  # the task, and the Computing it makes
    assert summary["tables"]["kernels"] == 1
    with duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True) as con:
        assert con.execute("SELECT rank, status FROM files WHERE kind = 'db_export' ORDER BY rank").fetchall() == \
            [(0, "loaded"), (1, "failed")]
        assert con.execute("SELECT name, ts_ns, dur_ns, args->>'Task Type' FROM slices s JOIN tracks t "
                           "USING (track_id) WHERE t.kind = 'hardware'").fetchall() == \
            [("Add", 1000, 1000, "KERNEL_AIVEC")]


@pytest.fixture(scope="module")
def db_client(tmp_path_factory, db_export):
    """A TestClient over a store holding the level1 db export as a ready run; yields (client, run id)."""
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    data_dir = tmp_path_factory.mktemp("dbexport-store")
    store = RunStore(data_dir)
    run = store.create_run("level1-db", str(DB / "level1"))
    path, summary = db_export("level1")
    shutil.copy(path, store.db_path(run.id))
    store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data_dir)))) as client:
        yield client, run.id


def test_the_views_answer_for_a_db_run(db_client):
    client, run_id = db_client

    def get(path):
        r = client.get(f"/api/runs/{run_id}/{path}")
        assert r.status_code == 200, (path, r.text)
        return r.json()

    with closing(source("level1", 0)) as src:
        kernels = one(src, "SELECT (SELECT count(*) FROM COMPUTE_TASK_INFO JOIN TASK USING (globalTaskId)) "
                           "+ (SELECT count(*) FROM COMMUNICATION_OP)")
        allocations = one(src, "SELECT count(*) FROM OP_MEMORY")
        step = one(src, "SELECT id FROM STEP_TIME")
    comm_ops = 0
    for rank in RANKS:
        with closing(source("level1", rank, "analysis.db")) as analysis:
            comm_ops += one(analysis, "SELECT count(*) FROM CommAnalyzerTime")
    assert get("operators")["kernel_count"] == kernels
    assert {r["accelerator_core"] for r in get("operators/groups?group_by=core")["rows"]} >= {"AI_CORE", "HCCL"}
    assert get("operators/instances")["total"] == kernels
    assert [r["records"] for r in get("memory")["ranks"]] and get("memory/allocations")["total"] == allocations
    assert any(s["t_ns"] for s in get("memory/curves")["series"])
    assert get("memory/modules")["series"]
    assert get("summary")["base"]["steps"] == [step]
    assert get("communication/ops")["total"] == comm_ops
    assert get("communication/bandwidth")["transports"]
    assert get("communication/matrix")["cells"]
    kinds = {t["kind"] for t in get("timeline/tracks")["tracks"]}
    assert {"python", "cann", "hardware", "communication", "overlap", "counter"} <= kinds
