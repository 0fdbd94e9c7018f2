"""Issue #10 item 5: a view section without rows says which file or table would have fed it, per rank and in the
rank's format — text export files (st4 with its partial ranks and no trace, a run with an empty and two damaged
files) or db export tables (msinsight_pytorch_2025/db/level0) — and says nothing where every rank has rows."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from tests.conftest import REAL_SAMPLES, VIEW_SAMPLES, needs_samples

pytestmark = needs_samples

DB_LEVEL0 = REAL_SAMPLES / "msinsight_pytorch_2025" / "db" / "level0"
FIXTURE_RANK = VIEW_SAMPLES["fixtures"] / "test_rank_0"


@pytest.fixture(scope="module")
def more_runs(runs, view_runs, tmp_path_factory) -> dict[str, str]:
    """view_runs plus the db export (Level0) and a text export whose files are empty or damaged, in the same store."""
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.server.runs import RunStore

    if not DB_LEVEL0.is_dir() or not FIXTURE_RANK.is_dir():
        pytest.skip("real samples missing")
    bad = tmp_path_factory.mktemp("bad") / "run"
    shutil.copytree(FIXTURE_RANK, bad / "test_rank_0")
    out = bad / "test_rank_0" / "ASCEND_PROFILER_OUTPUT"
    header = (out / "operator_memory.csv").read_text().splitlines()[0]
    (out / "operator_memory.csv").write_text(header + "\n")  # present, no data row
    (out / "kernel_details.csv").write_bytes(b'not,a,kernel\n\x00\x01\x02,"unterminated\n')
    (out / "communication.json").write_text('{"broken": [1, 2')
    store = RunStore(runs.data_dir)
    ids = dict(view_runs)
    for name, src in (("db0", DB_LEVEL0), ("bad", bad)):
        run = store.create_run(name, str(src))
        ingest_path(src, store.db_path(run.id))
        store.set_status(run.id, "ready")
        ids[name] = run.id
    return ids


def get(client, ids, run, path, **params):
    r = client.get(f"/api/runs/{ids[run]}/{path}", params=params)
    assert r.status_code == 200, (path, r.text)
    return r.json()


def reasons(section) -> list[tuple]:
    return [(r["rank"], r["reason"], r["message"]) for r in section["ranks"]]


def test_text_export_missing_files(client, more_runs):
    """st4: ranks 1 and 3 kept only communication and step files; nobody kept operator_details.csv or a trace."""
    op = get(client, more_runs, "st4", "operators", rank=1)["empty_sources"]
    assert reasons(op["kernels"]) == [(1, "missing", "kernel_details.csv was not in rank 1's output")]
    assert op["kernels"]["label"] == "kernels" and "kernel_details.csv" in op["kernels"]["sources"]
    assert "TASK + COMPUTE_TASK_INFO (ascend_pytorch_profiler_N.db)" in op["kernels"]["sources"]
    op0 = get(client, more_runs, "st4", "operators", rank=0)["empty_sources"]
    assert op0["kernels"]["ranks"] == []  # rank 0 has kernels: nothing to explain
    assert reasons(op0["torch"]) == [(0, "missing", "operator_details.csv was not in rank 0's output")]
    mem = get(client, more_runs, "st4", "memory", rank=3)["empty_sources"]
    assert [m for _, _, m in reasons(mem["records"])] == ["memory_record.csv was not in rank 3's output"]
    assert [m for _, _, m in reasons(mem["allocations"])] == ["operator_memory.csv was not in rank 3's output"]
    assert [m for _, _, m in reasons(mem["modules"])] == ["npu_module_mem.csv was not in rank 3's output"]
    tracks = get(client, more_runs, "st4", "timeline/tracks")
    assert tracks["tracks"] == []
    assert reasons(tracks["empty_sources"]) == [(r, "missing", f"trace_view.json was not in rank {r}'s output")
                                                for r in range(4)]
    comm = get(client, more_runs, "st4", "communication")["empty_sources"]
    assert comm["ops"]["ranks"] == [] and comm["matrix"]["ranks"] == []
    summary = get(client, more_runs, "st4", "summary")["empty_sources"]
    assert summary["breakdown"]["ranks"] == []  # every rank has step_trace_time.csv
    overlap = get(client, more_runs, "st4", "summary", source="overlap")["empty_sources"]["breakdown"]
    assert [r for r, _, _ in reasons(overlap)] == [0, 1, 2, 3]
    assert all("trace_view.json was not in rank" in m for _, _, m in reasons(overlap))


def test_text_export_empty_and_damaged_files(client, runs, more_runs):
    op = get(client, more_runs, "bad", "operators", rank=0)["empty_sources"]
    (rank, reason, message), = reasons(op["kernels"])
    assert (rank, reason) == (0, "failed")
    assert message.startswith("rank 0's kernel_details.csv failed to load: ") and "CSV" in message
    mem = get(client, more_runs, "bad", "memory", rank=0)["empty_sources"]
    assert reasons(mem["allocations"]) == [(0, "empty", "rank 0's operator_memory.csv was present but empty")]
    assert mem["records"]["ranks"] == []
    comm = get(client, more_runs, "bad", "communication")["empty_sources"]
    (rank, reason, message), = reasons(comm["ops"])
    assert (rank, reason) == (0, "failed") and message.startswith("rank 0's communication.json failed to load: ")
    from ascendscope.server.runs import RunStore

    con = duckdb.connect(str(RunStore(runs.data_dir).db_path(more_runs["bad"])), read_only=True)
    warning, = con.execute("SELECT message FROM warnings WHERE file LIKE '%communication.json'").fetchone()
    assert message.endswith(warning.removeprefix("not loaded: "))


def test_db_export_names_its_tables(client, more_runs):
    """Level0 db export: no torch ops in any db, and analysis.db holds only StepTraceTime (no communication): the
    ops come from the trace's group lanes (elapse only, said by ``from_trace_ranks``), the matrix has no source."""
    op = get(client, more_runs, "db0", "operators", rank=0)["empty_sources"]
    assert op["kernels"]["ranks"] == []
    assert reasons(op["torch"]) == [(0, "no_source", "rank 0 was read from the db export "
                                     "(ascend_pytorch_profiler_0.db), which has no torch ops (operator_details.csv "
                                     "has no db counterpart)")]
    body = get(client, more_runs, "db0", "communication")
    comm = body["empty_sources"]
    assert reasons(comm["ops"]) == [] and body["from_trace_ranks"] == [0, 1]
    assert [m for _, _, m in reasons(comm["matrix"])] == [
        f"rank {r}'s analysis.db gave no CommAnalyzerMatrix rows (the table is absent or empty)" for r in (0, 1)]
    for section in ("records", "allocations", "modules"):
        assert get(client, more_runs, "db0", "memory", rank=1)["empty_sources"][section]["ranks"] == []
    assert get(client, more_runs, "db0", "summary")["empty_sources"]["breakdown"]["ranks"] == []
    assert get(client, more_runs, "db0", "timeline/tracks")["empty_sources"]["ranks"] == []


def test_complete_run_lists_nothing(client, more_runs):
    for path, sections in (("operators", ("kernels", "torch")), ("memory", ("records", "allocations", "modules")),
                           ("communication", ("ops", "matrix")), ("summary", ("breakdown", "top_operators"))):
        why = get(client, more_runs, "level1", path)["empty_sources"]
        assert all(why[s]["ranks"] == [] and why[s]["more"] == 0 for s in sections), path
    assert get(client, more_runs, "level1", "timeline/tracks")["empty_sources"]["ranks"] == []


def test_the_list_is_bounded():
    """A run of 40 ranks without kernels lists 32 of them and counts the rest."""
    from ascendscope.server.queries import DuckRunner, sources

    con = duckdb.connect()
    con.execute("CREATE TABLE ranks (rank INTEGER)")
    con.execute("INSERT INTO ranks SELECT range FROM range(40)")
    con.execute("CREATE TABLE files (rank INTEGER, file VARCHAR, kind VARCHAR, rows BIGINT, status VARCHAR)")
    con.execute("INSERT INTO files SELECT range, 'r' || range || '/trace_view.json', 'trace_view', 5, 'loaded' "
                "FROM range(40)")
    con.execute("CREATE TABLE warnings (rank INTEGER, file VARCHAR, message VARCHAR)")
    con.execute("CREATE TABLE kernels (rank INTEGER)")
    con.execute("CREATE TABLE operators (rank INTEGER)")
    why = sources.explain(DuckRunner(con), "operator")["kernels"]
    assert len(why["ranks"]) == sources.MAX_RANKS_LISTED == 32 and why["more"] == 8
    assert why["ranks"][0]["message"] == "kernel_details.csv was not in rank 0's output"


def test_run_without_ranks():
    from ascendscope.server.queries import DuckRunner, sources

    con = duckdb.connect()
    con.execute("CREATE TABLE ranks (rank INTEGER)")
    con.execute("CREATE TABLE files (rank INTEGER, file VARCHAR, kind VARCHAR, rows BIGINT, status VARCHAR)")
    con.execute("CREATE TABLE warnings (rank INTEGER, file VARCHAR, message VARCHAR)")
    con.execute("INSERT INTO warnings VALUES (NULL, 'x/msprof_0.db', 'not loaded: a database of a kind not "
                "supported yet')")
    con.execute("CREATE TABLE comm_ops (rank INTEGER)")
    con.execute("CREATE TABLE comm_matrix (rank INTEGER)")
    why = sources.explain(DuckRunner(con), "communication")["ops"]
    assert why["ranks"] == [{"rank": None, "reason": "missing", "source": None, "file": None,
                             "message": "no rank of this run was loaded (msprof_0.db: a database of a kind not "
                                        "supported yet)"}]

