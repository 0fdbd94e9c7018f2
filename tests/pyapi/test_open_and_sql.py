"""``ascendscope.open`` on every kind of path, ``Run.sql``'s read-only rules, and that the API needs no web stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ascendscope
from ascendscope.readonly import ReadOnlyQueryError

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "sample_data" / "bundled"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("api-data")


@pytest.fixture(scope="module")
def ingested(data_dir):
    """The bundled sample opened from its profiling folder: ingested into ``data_dir`` as a run of the store."""
    with ascendscope.open(BUNDLED, data_dir=data_dir, quiet=True) as run:
        yield run


def test_a_profiling_folder_is_ingested_once_into_the_data_dir(ingested, data_dir):
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    (record,) = store.list()
    assert record.id == ingested.id and record.status == "ready" and record.source == str(BUNDLED.resolve())
    assert ingested.database == store.run_dir(record.id)  # the sharded run folder the server serves
    assert ingested.ranks == [0, 1]
    with ascendscope.open(BUNDLED, data_dir=data_dir) as again:  # unchanged source: reused, not ingested again
        assert again.id == ingested.id
    assert len(store.list()) == 1


def test_a_run_folder_or_file_opens_as_it_is(ingested, runs, tmp_path):
    with ascendscope.open(ingested.database) as by_folder:
        assert by_folder.id == ingested.id  # a data-dir run keeps its id
        assert by_folder.steps().equals(ingested.steps())
    with ascendscope.open(ingested.database / "cluster.duckdb") as by_cluster_file:
        assert by_cluster_file.ranks == ingested.ranks
    copy = tmp_path / "mine.duckdb"
    copy.write_bytes(runs.dbs["generated"].read_bytes())
    with ascendscope.open(copy) as single:
        assert single.id == "mine" and single.ranks == [0, 1]


def test_bad_paths_say_what_is_wrong(tmp_path, data_dir):
    with pytest.raises(FileNotFoundError, match="no such file"):
        ascendscope.open(tmp_path / "missing")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("no profiling data here")
    with pytest.raises(ascendscope.IngestFailed, match="junk"):
        ascendscope.open(junk, data_dir=data_dir, quiet=True)


def test_an_outdated_database_is_refused(tmp_path, runs):
    import duckdb

    old = tmp_path / "old.duckdb"
    old.write_bytes(runs.dbs["generated"].read_bytes())
    with duckdb.connect(str(old)) as con:
        con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    from ascendscope.server.schema_check import OutdatedDatabase

    with pytest.raises(OutdatedDatabase, match="older ascendscope"):
        ascendscope.open(old)


def test_sql_reads_the_documented_tables_with_parameters(opened):
    run = opened["generated"]
    frame = run.sql("SELECT rank, count(*) AS n FROM slices WHERE rank = ? GROUP BY rank", [1])
    assert list(frame.columns) == ["rank", "n"] and frame["rank"].tolist() == [1] and frame["n"].iloc[0] > 0
    named = run.sql("SELECT $x::INTEGER + 1 AS y", {"x": 41})
    assert named["y"].tolist() == [42]
    assert run.sql("DESCRIBE kernels")["column_name"].str.contains("duration_ns").any()
    import pyarrow as pa

    assert run.sql("FROM ranks WHERE rank = ?", [0], arrow=True).num_rows == 1
    assert isinstance(run.sql("FROM ranks", arrow=True), pa.Table)


@pytest.mark.parametrize("query, why", [
    ("CREATE TABLE x AS SELECT 1", "CREATE"),
    ("INSERT INTO ranks SELECT * FROM ranks", "INSERT"),
    ("DELETE FROM slices", "DELETE"),
    ("SELECT 1; SELECT 2", "one statement"),
    ("SET enable_external_access = true", "SET"),
    ("PRAGMA database_list", "PRAGMA"),
    ("ATTACH '/tmp/other.duckdb' AS o", "ATTACH"),
    ("COPY slices TO '/tmp/leak.csv'", "COPY"),
    ("INSTALL httpfs", "LOAD"),
    ("SELECT * FROM read_csv('/etc/passwd')", "reads files"),
    ("SELECT * FROM read_text('/etc/hostname')", "reads files"),
    ("", "empty"),
    ("SELEC 1", "syntax"),
])
def test_sql_refuses_anything_but_reading(opened, query, why):
    with pytest.raises(ReadOnlyQueryError, match=why):
        opened["generated"].sql(query)
    assert opened["generated"].sql("SELECT count(*) AS n FROM ranks")["n"].tolist() == [2]  # still usable


def test_a_long_query_is_stopped(opened):
    with pytest.raises(ReadOnlyQueryError, match="longer than"):
        opened["generated"].sql("SELECT count(*) FROM range(10000000000) a", timeout_s=0.2)


WEB_STACK = ("fastapi", "starlette", "uvicorn", "jinja2")
NO_WEB_SCRIPT = """
import json, sys
import ascendscope
run = ascendscope.open(sys.argv[1], data_dir=sys.argv[2], quiet=True)
for method in ("steps", "kernels", "operators", "memory", "communication", "advice", "communication_ops"):
    getattr(run, method)()
run.kernels(rank=0, arrow=True); run.sql("SELECT 1")
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


@pytest.mark.parametrize("source", ["profiling folder", "run folder"])
def test_the_api_imports_no_web_stack(ingested, data_dir, source):
    path = BUNDLED if source == "profiling folder" else ingested.database
    out = subprocess.run([sys.executable, "-c", NO_WEB_SCRIPT, str(path), str(data_dir)], capture_output=True,
                         text=True, timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "pandas" in loaded and "duckdb" in loaded
    assert not loaded & set(WEB_STACK), sorted(loaded & set(WEB_STACK))


def test_a_run_another_process_is_ingesting_is_waited_for(tmp_path, runs):
    """A server's worker holds the run's ingest lock: open() waits for its outcome instead of ingesting beside it."""
    import os
    import shutil
    import threading

    from ascendscope.server.runs import RunStore

    src = tmp_path / "src"
    shutil.copytree(BUNDLED, src)
    store = RunStore(tmp_path / "data")
    run = store.create_run_from_path(src)
    store.set_status(run.id, "ingesting")
    lock = store.hold_ingest_lock(run.id)  # as the other process's worker does

    seen = []

    def other_worker():
        seen.append(store.get(run.id).status)  # nobody re-queued the run under its worker
        shutil.copy(runs.dbs["generated"], store.db_path(run.id))
        store.set_status(run.id, "ready")
        os.close(lock)

    timer = threading.Timer(1.0, other_worker)
    timer.start()
    try:
        with ascendscope.open(src, data_dir=tmp_path / "data", quiet=True) as opened:
            assert opened.id == run.id and opened.ranks == [0, 1]
    finally:
        timer.join()
    assert len(store.list()) == 1 and seen == ["ingesting"]
