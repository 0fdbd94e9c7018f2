"""The SQL console's API (/api/runs/{id}/query): one read-only SELECT, time-limited, row-capped, without file or
network access — each refusal tested — on single-file and sharded runs, in read-only and token mode."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from fastapi.testclient import TestClient

from ascendscope import readonly
from ascendscope.server.app import create_app
from ascendscope.server.queries import sql_console as sc
from ascendscope.server.runs import RunStore
from ascendscope.server.settings import Settings
from tests import asyncrun
from tests.conftest import store_with_copy

ROOT = Path(__file__).resolve().parents[3]


def q(client, run_id, sql, **params):
    return client.get(f"/api/runs/{run_id}/query", params={"sql": sql, **params})


def test_a_select_answers_columns_types_and_rows(client, wait_runs):
    r = q(client, wait_runs.ids["waits"], "SELECT rank, count(*) AS n, min(ts_ns) AS first FROM slices "
                                          "GROUP BY rank ORDER BY rank")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["columns"] == ["rank", "n", "first"] and body["types"][:2] == ["INTEGER", "BIGINT"]
    assert [row[0] for row in body["rows"]] == [0, 1, 2, 3] and not body["truncated"]
    assert isinstance(body["rows"][0][2], str)  # epoch ns beyond 2**53 leave as decimal strings
    assert int(body["rows"][0][2]) == 1_736_408_883_000_000_000


# (what, sql, status, error code)
REFUSED = [
    ("ATTACH", "ATTACH '/tmp/other.duckdb' AS other", 400, "read_only"),
    ("DETACH", "DETACH cluster", 400, "read_only"),
    ("COPY to a file", "COPY (SELECT 1) TO '/tmp/ascendscope-console.csv'", 400, "read_only"),
    ("COPY from a file", "COPY slices FROM '/etc/hosts'", 400, "read_only"),
    ("INSTALL", "INSTALL httpfs", 400, "read_only"),
    ("LOAD", "LOAD httpfs", 400, "read_only"),
    ("SET", "SET enable_external_access = true", 400, "read_only"),
    ("PRAGMA", "PRAGMA database_list", 400, "read_only"),
    ("CALL", "CALL pragma_version()", 400, "read_only"),
    ("CREATE", "CREATE TABLE t AS SELECT 1", 400, "read_only"),
    ("DELETE", "DELETE FROM slices", 400, "read_only"),
    ("EXPORT", "EXPORT DATABASE '/tmp/ascendscope-export'", 400, "read_only"),
    ("two statements", "SELECT 1; SELECT 2", 400, "one_statement"),
    ("a statement hidden after a select", "SELECT 1; ATTACH '/tmp/x.duckdb' AS x", 400, "one_statement"),
    ("read a file by function", "SELECT * FROM read_csv('/etc/hosts')", 400, "file_access"),
    ("read a file by name", "SELECT * FROM '/etc/hosts'", 400, "file_access"),
    ("read a text file", "SELECT * FROM read_text('/etc/hostname')", 400, "file_access"),
    ("list files", "SELECT * FROM glob('/etc/*')", 400, "file_access"),
    ("network", "SELECT * FROM read_parquet('https://example.com/x.parquet')", 400, "file_access"),
    ("SQL from a string", "SELECT * FROM query('SELECT 42')", 400, "function_refused"),
    ("server paths", "SELECT * FROM duckdb_databases()", 400, "function_refused"),
    ("server settings", "SELECT current_setting('temp_directory')", 400, "function_refused"),
    ("settings table", "SELECT * FROM duckdb_settings()", 400, "function_refused"),
    # catalog views and spellings: refused by what the plan reads, not by how the query names it
    ("the databases view", "SELECT path FROM duckdb_databases", 400, "function_refused"),
    ("the pragma view", "SELECT * FROM pragma_database_list", 400, "function_refused"),
    ("pg_settings", "SELECT * FROM pg_settings", 400, "function_refused"),
    ("pg_catalog.pg_settings", "SELECT setting FROM pg_catalog.pg_settings", 400, "function_refused"),
    ("pg_database", "SELECT * FROM pg_catalog.pg_database", 400, "function_refused"),
    ("schema-qualified", "SELECT * FROM main.duckdb_settings()", 400, "function_refused"),
    ("upper case", "SELECT * FROM DUCKDB_Settings()", 400, "function_refused"),
    ("a view in a subquery", "SELECT (SELECT max(path) FROM duckdb_databases) AS p", 400, "function_refused"),
    ("SUMMARIZE a view", "SUMMARIZE duckdb_databases", 400, "function_refused"),
    ("SHOW DATABASES", "SHOW DATABASES", 400, "function_refused"),
    ("EXPLAIN behind a comment", "EXPLAIN/**/SELECT current_setting('temp_directory')", 400, "function_refused"),
    ("EXPLAIN with options", "EXPLAIN(FORMAT JSON)SELECT current_setting('temp_directory')", 400,
     "function_refused"),
    ("EXPLAIN ANALYZE a view", "EXPLAIN ANALYZE SELECT path FROM duckdb_databases", 400, "function_refused"),
    ("a quoted function name", "DESCRIBE SELECT \"current_setting\"('temp_directory') AS s", 400,
     "function_refused"),
    ("a quoted name behind a comment", "SUMMARIZE SELECT \"current_setting\"/**/('temp_directory') AS s", 400,
     "function_refused"),
    ("EXPLAIN, comment, quoted name", "EXPLAIN/**/SELECT \"current_setting\"('temp_directory')", 400,
     "function_refused"),
    ("a function name in upper case", "SELECT CURRENT_SETTING('temp_directory')", 400, "function_refused"),
    ("an empty query", "   ", 400, "empty_query"),
    ("a syntax error", "SELEC 1", 400, "syntax_error"),
]


@pytest.mark.parametrize("what,sql,status,code", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(client, wait_runs, what, sql, status, code):
    for run in ("waits", "waits_sharded"):
        r = q(client, wait_runs.ids[run], sql)
        assert r.status_code == status, (what, r.text)
        assert r.json()["error"]["code"] == code, (what, r.text)
        assert "/tmp/pytest" not in r.text  # no server path in the message
    assert not Path("/tmp/ascendscope-console.csv").exists() and not Path("/tmp/ascendscope-export").exists()


@pytest.mark.parametrize("what,sql,status,code", REFUSED, ids=[r[0] for r in REFUSED])
def test_python_refuses_the_same_with_the_same_rule(runs, wait_runs, what, sql, status, code):
    """One set of rules (ascendscope.readonly): Run.sql's connection refuses what the console refuses, by the same
    rule code."""
    conn = readonly.connect(RunStore(runs.data_dir).db_path(wait_runs.ids["waits"]))
    try:
        with pytest.raises(readonly.ReadOnlyQueryError) as caught:
            readonly.run_query(conn, sql, fetch="rows")
        assert caught.value.code == code, (what, str(caught.value))
    finally:
        conn.close()


def test_explain_runs_and_explains_no_blocked_function(client, wait_runs):
    run = wait_runs.ids["waits"]
    assert q(client, run, "EXPLAIN SELECT count(*) FROM slices").status_code == 200
    r = q(client, run, "EXPLAIN ANALYZE SELECT * FROM query('SELECT 42')")
    assert r.status_code == 400 and r.json()["error"]["code"] == "function_refused"
    r = q(client, run, "DESCRIBE SELECT getenv('HOME') AS h")
    assert r.status_code == 400 and r.json()["error"]["code"] == "function_refused"


def test_the_console_connection_stays_locked(runs, wait_runs, tmp_path):
    """Past the query rules, a console connection itself refuses any change of setting (lock_configuration): a SET
    run on it directly, as a query slipping past check_query would, fails and changes nothing."""
    from ascendscope.server.console import ConsoleDatabases

    store = RunStore(runs.data_dir)
    consoles = ConsoleDatabases(64, threads=2, temp_dir=tmp_path / "spill")
    try:
        for run in ("waits", "waits_sharded"):
            console = consoles.get(wait_runs.ids[run], store.db_path(wait_runs.ids[run]))
            cur = console.conn.cursor()
            try:
                for setting in ("SET enable_external_access = true", "SET memory_limit = '64GB'",
                                "SET lock_configuration = false", "RESET lock_configuration"):
                    with pytest.raises(duckdb.Error, match="(?i)lock"):
                        cur.execute(setting)
                threads, temp, temp_max, external, locked, memory = cur.execute(
                    "SELECT current_setting('threads'), current_setting('temp_directory'), "
                    "current_setting('max_temp_directory_size'), current_setting('enable_external_access'), "
                    "current_setting('lock_configuration'), current_setting('memory_limit')").fetchone()
                assert (threads, Path(temp), external, locked) == (2, tmp_path / "spill", False, True)
                assert temp_max.replace(" ", "").upper().startswith(("4GB", "3.7GIB", "4.0GB", "3.7GB")), temp_max
                assert memory.replace(" ", "").upper().startswith(("1.8GIB", "1.9GB", "2.0GB", "1.8GB")), memory
            finally:
                cur.close()
    finally:
        consoles.close_all()


def test_a_console_worker_is_held_to_its_limits(client, wait_runs):
    """Each console query runs in a worker process of its own: an address-space limit of DuckDB's memory_limit
    plus headroom, a lower CPU priority, a spill folder of its own in the data dir under a random name."""
    from ascendscope import sqlproc

    assert q(client, wait_runs.ids["waits"], "SELECT 1 AS one").json()["rows"] == [[1]]
    workers = client.portal.call(live_workers, client.app.state.console)
    assert 1 <= len(workers) <= client.app.state.query_pool.heavy_slots
    for pid, temp_dir in workers:
        limits = Path(f"/proc/{pid}/limits").read_text()
        space = next(line for line in limits.splitlines() if line.startswith("Max address space"))
        assert int(space.split()[3]) == sqlproc.Limits().address_space() == 2 * 10**9 + sqlproc.HEADROOM_BYTES
        nice = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
        assert nice == sqlproc.NICE
        folder = Path(temp_dir)
        assert folder.parent == Path(client.app.state.store.data_dir) / ".console-tmp" and folder.is_dir()
        assert re.fullmatch(rf"w{pid}-[a-z0-9_]{{8}}", folder.name), folder.name


async def live_workers(pool) -> list[tuple[int, str]]:
    """(pid, spill folder) of the console workers of the running loop."""
    return [(w.proc.pid, w.temp_dir) for w in pool.workers()]


def test_the_row_cap(client, wait_runs):
    r = q(client, wait_runs.ids["waits"], "SELECT range AS i FROM range(20000)")
    body = r.json()
    assert body["row_count"] == sc.MAX_ROWS and body["truncated"] and body["row_cap"] == sc.MAX_ROWS
    small = q(client, wait_runs.ids["waits"], "SELECT range AS i FROM range(20000)", limit=10).json()
    assert small["row_count"] == 10 and small["truncated"]
    csv = client.get(f"/api/runs/{wait_runs.ids['waits']}/query.csv",
                     params={"sql": "SELECT range AS i FROM range(20000)"})
    assert csv.status_code == 200 and csv.headers["X-Row-Count"] == "20000" and csv.headers["X-Truncated"] == "false"
    assert csv.text.splitlines()[:3] == ["i", "0", "1"]


def test_the_answer_is_bounded_in_bytes_nested_values_too(client, wait_runs):
    """Big values cannot make a big answer: lists and structs keep MAX_CELL_ITEMS items, rows stop at the byte cap
    (JSON and CSV), and the answer says it was cut."""
    run = wait_runs.ids["waits"]
    nested = q(client, run, "SELECT range(100000) AS l, {'a': range(5000)} AS s FROM range(3)").json()
    assert nested["row_count"] == 3 and not nested["truncated"] and nested["cells_cut"] == 6
    row = nested["rows"][0]
    assert len(row[0]) == sc.MAX_CELL_ITEMS + 1 and row[0][-1] == "…" and row[0][:3] == [0, 1, 2]
    assert len(row[1]["a"]) == sc.MAX_CELL_ITEMS + 1
    wide = q(client, run, f"SELECT repeat('x', {sc.MAX_CELL_CHARS}) AS s FROM range({sc.MAX_ROWS})")
    body = wide.json()
    assert body["truncated"] and body["truncated_by"] == "bytes" and body["byte_cap"] == sc.MAX_JSON_BYTES
    assert 0 < body["row_count"] < sc.MAX_ROWS and len(wide.content) <= sc.MAX_JSON_BYTES + 100_000
    csv = client.get(f"/api/runs/{run}/query.csv",
                     params={"sql": f"SELECT repeat('x', {sc.MAX_CELL_CHARS}) AS s FROM range(100000)"})
    assert csv.status_code == 200 and csv.headers["X-Truncated"] == "true"
    assert len(csv.content) <= sc.MAX_CSV_BYTES + 100_000 and 0 < int(csv.headers["X-Row-Count"]) < 100_000
    rows = q(client, run, "SELECT range AS i FROM range(20000)").json()
    assert rows["truncated_by"] == "rows"


def test_a_console_that_fails_to_open_answers_an_error_and_leaves_the_run_ready(tmp_path, runs):
    """The console's own connection failing to open (here: a file that is no database) answers 503 and marks
    nothing: the views read the run through a connection of their own."""
    store, run = store_with_copy(runs.dbs["generated"], tmp_path / "data")
    good = store.db_path(run).read_bytes()
    store.db_path(run).write_bytes(b"not a database" * 1000)
    app = create_app(Settings.from_env(environ={}, data_dir=str(tmp_path / "data")))
    with TestClient(app) as c:
        r = q(c, run, "SELECT 1 AS one")
        assert r.status_code == 503 and r.json()["error"]["code"] == "console_unavailable", r.text
        assert store.get(run).status == "ready"  # (the console marks nothing; the views judge the file)
        store.db_path(run).write_bytes(good)
        assert q(c, run, "SELECT count(*) AS n FROM ranks").json()["rows"] == [[2]]


def test_a_console_query_stops_when_its_client_goes(runs, wait_runs):
    """A client that goes away takes its job out of the worker (interrupted, or the worker ended), and the next
    query is answered."""
    import asyncio
    import time

    from ascendscope.server.consolepool import ConsolePool
    from ascendscope.server.requestclock import CancelToken, ClientGone

    store = RunStore(runs.data_dir)
    run = wait_runs.ids["waits"]
    pool = ConsolePool(runs.data_dir, size=1, timeout_s=60, max_loaded_ranks=64)
    job = {"kind": "console", "what": "json", "run_id": run, "path": str(store.db_path(run)), "ranks": None,
           "max_rows": 10, "max_bytes": 10**6,
           "sql": "SELECT sum(a.range * b.range) AS s FROM range(300000) a, range(300000) b"}

    async def scenario():
        await pool.ready()
        token = CancelToken()
        asyncio.get_running_loop().call_later(0.5, token.cancel)
        t0 = time.monotonic()
        with pytest.raises(ClientGone):
            await pool.run(job, client="a", deadline=time.monotonic() + 60, cancel=token)
        stopped_s = time.monotonic() - t0
        meta, body = await pool.run(dict(job, sql="SELECT 41 + 1 AS x"), client="a",
                                    deadline=time.monotonic() + 60)
        pool.close_all()
        return stopped_s, body

    stopped_s, body = asyncrun.run(scenario())
    assert stopped_s < 10 and b'"rows":[[42]]' in body


def test_the_time_limit(runs, wait_runs):
    app = create_app(Settings.from_env(environ={}, data_dir=str(runs.data_dir), query_timeout_s=2.0))
    with TestClient(app) as c:
        c.get(f"/api/runs/{wait_runs.ids['waits']}/query/schema")  # (the app's routes are built at a first request)
        c.portal.call(app.state.console.ready)  # (and a worker's start is no part of a query's time here)
        r = q(c, wait_runs.ids["waits"], "SELECT sum(a.range * b.range) FROM range(200000) a, range(200000) b")
        assert r.status_code == 504 and r.json()["error"]["code"] == "query_timeout"
        c.portal.call(app.state.console.ready)  # (a worker that did not stop in time was replaced)
        assert q(c, wait_runs.ids["waits"], "SELECT 1 AS one").json()["rows"] == [[1]]  # the console still answers


def test_schema_lists_the_documented_tables_and_examples(client, wait_runs):
    body = client.get(f"/api/runs/{wait_runs.ids['waits_sharded']}/query/schema").json()
    names = [t["name"] for t in body["tables"]]
    for table in ("slices", "flows", "kernels", "cluster_collectives", "cluster_steps", "meta"):
        assert table in names
    assert names.index("meta") < names.index("slices")  # documented order
    slices = next(t for t in body["tables"] if t["name"] == "slices")
    assert {"slice_id", "ts_ns", "dur_ns", "args"} <= {c["name"] for c in slices["columns"]}
    assert body["examples"] and body["loaded_ranks"] == [0, 1, 2, 3] and body["ranks"] == 4


def test_every_documented_table_has_a_note_and_the_examples_are_in_the_docs():
    doc = (ROOT / "docs" / "schema.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z_0-9]+)` \|", doc, re.M))
    assert documented and documented <= set(sc.TABLE_NOTES), documented - set(sc.TABLE_NOTES)
    for _title, sql in sc.EXAMPLES:
        assert sql in doc, sql


@pytest.mark.parametrize("run", ["waits", "waits_sharded", "generated"])
def test_every_example_runs(client, wait_runs, runs, run):
    run_id = wait_runs.ids.get(run) or runs.ids[run]
    for title, sql in sc.EXAMPLES:
        r = q(client, run_id, sql)
        assert r.status_code == 200, (title, r.text)


def test_a_big_sharded_run_loads_the_ranks_asked_for(runs, wait_runs):
    """Above max_loaded_ranks the rank tables hold the ranks asked for (else the first); the cluster tables hold all."""
    app = create_app(Settings.from_env(environ={}, data_dir=str(runs.data_dir), max_loaded_ranks=2))
    run = wait_runs.ids["waits_sharded"]
    with TestClient(app) as c:
        one = q(c, run, "SELECT DISTINCT rank FROM slices ORDER BY rank").json()
        assert one["rows"] == [[0]] and one["loaded_ranks"] == [0] and one["ranks"] == 4
        two = q(c, run, "SELECT DISTINCT rank FROM slices ORDER BY rank", ranks="2,3").json()
        assert two["rows"] == [[2], [3]] and two["loaded_ranks"] == [2, 3]
        capped = q(c, run, "SELECT count(DISTINCT rank) FROM slices", ranks="0,1,2,3").json()
        assert capped["rows"] == [[2]]  # at most max_loaded_ranks shards
        everyone = q(c, run, "SELECT count(DISTINCT rank) FROM cluster_collectives").json()
        assert everyone["rows"] == [[4]]


def test_read_only_and_token_mode(runs, wait_runs):
    run = wait_runs.ids["waits"]
    app = create_app(Settings.from_env(environ={}, data_dir=str(runs.data_dir), read_only=True, token="s3cret"))
    with TestClient(app) as c:
        assert q(c, run, "SELECT 1").status_code == 401
        r = c.get(f"/api/runs/{run}/query", params={"sql": "SELECT 1 AS one"},
                  headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200 and r.json()["rows"] == [[1]]


def test_cells_become_json():
    import datetime
    import decimal

    assert sc.cell(2 ** 60) == str(2 ** 60) and sc.cell(5) == 5 and sc.cell(float("nan")) is None
    assert sc.cell(decimal.Decimal("1.50")) == "1.50" and sc.cell(b"\x01\xff") == "01ff"
    assert sc.cell(datetime.date(2025, 1, 9)) == "2025-01-09" and sc.cell([2 ** 60, {"a": 1}]) == [str(2 ** 60),
                                                                                                   {"a": 1}]
    assert len(sc.cell("x" * 5000)) == sc.MAX_CELL_CHARS + 1
