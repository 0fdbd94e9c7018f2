"""Issue #45: hostile SQL console queries cannot take the dashboard down. Each row of the issue's table, through
HTTP against ``ascendscope serve`` (a subprocess, as users run it) over the real 2-rank sample (or its twin):

* ``repeat('x', 10^9)`` (folded while DuckDB plans, before any interrupt) ends at the deadline, in a worker
  process that is then replaced; the web process does not grow; the heavy views (search) keep answering;
* ``list_transform(range(8e6), …) FROM range(10)`` answers cut (or is stopped) while ``/api/health`` stays prompt;
* 60 clients looping a 10 s query get 429 + Retry-After beyond their share, and every sync route and page stays
  prompt (waiting holds no thread);
* deep SQL (a 600-term sum, 500 nested subqueries) answers or is a 400 with a rule code, never a 500;
* no file the console can name: a file planted in the console's spill folders and in a run's shard folder, tried
  with every file-reading function of DuckDB's catalog and as a table name, is never read.

The server runs with a 4 s deadline (``ASCENDSCOPE_QUERY_TIMEOUT_S``; 10 s by default): what is checked is that a
query ends at the deadline, whatever it is, and the queries meant to reach it (the folded ``repeat``, the clients'
cross join) outlast any deadline. Timing bounds are generous (a loaded 2-core machine); ``ascendscope bench
console-abuse`` measures them at the default.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from ascendscope import sqlrules
from ascendscope.bench.served import Server
from tests.conftest import ingest_ready
from tests.samples import PYTORCH_TEXT

TIMEOUT_S = 4.0  # the served query_timeout_s
SLACK_S = 4.0  # beyond deadline + 1 s, for a machine shared by other work
PROMPT_S = 5.0  # "prompt" here: the issue saw 9.4-25.9 s; the benchmark measures the real figures
SECRET = "planted-secret-4f1c"


@pytest.fixture(scope="module")
def served(runs):
    """``ascendscope serve`` over the session's data dir, with the real level1 sample also ingested sharded."""
    ids = dict(runs.ids, **ingest_ready(runs.data_dir, {"level1_sharded": PYTORCH_TEXT / "level1"}))
    with Server(runs.data_dir, extra_env={"ASCENDSCOPE_QUERY_TIMEOUT_S": str(TIMEOUT_S)}) as srv:
        srv.wait_ready("/api/runs")
        srv.wait_query_processes()
        srv.ids = ids
        console(srv, ids["level1"], "SELECT 1 AS one")  # its console worker started
        yield srv


def get(srv: Server, path: str, params: dict | None = None, headers: dict | None = None, timeout_s: float = 60):
    """(status, headers, body bytes, seconds) of a GET."""
    url = srv.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout_s) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read(), time.monotonic() - t0
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read(), time.monotonic() - t0


def console(srv: Server, run: str, sql: str, **headers):
    return get(srv, f"/api/runs/{run}/query", {"sql": sql}, headers)


def processes(srv: Server) -> dict[str, list[psutil.Process]]:
    out: dict[str, list] = {"web": [], "query": [], "console": []}
    for p in srv.processes():
        try:
            cmd = " ".join(p.cmdline())
        except psutil.NoSuchProcess:
            continue
        kind = "console" if "consoleworker" in cmd else "query" if "queryserver" in cmd else "web"
        out[kind].append(p)
    return out


def rss(procs) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class Prober:
    """GETs ``paths`` in turn every ``every_s`` on a thread, keeping each answer's (path, status, seconds), and the
    highest RSS of the web processes seen: those there when it starts (a worker the server starts meanwhile is, from
    its fork to its exec, a copy of the web process under its name: its shared pages would count twice)."""

    def __init__(self, srv: Server, paths: list[str], every_s: float = 0.25):
        self.srv, self.paths, self.every_s = srv, paths, every_s
        self.seen: list[tuple[str, int, float]] = []
        self.web_peak = 0
        self.web_pids = {p.pid for p in processes(srv)["web"]}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            path = self.paths[i % len(self.paths)]
            status, _, _, took = get(self.srv, path, timeout_s=30)
            self.seen.append((path, status, took))
            web = [p for p in processes(self.srv)["web"] if p.pid in self.web_pids]
            self.web_peak = max(self.web_peak, rss(web))
            i += 1
            self._stop.wait(self.every_s)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)


def test_a_query_folded_while_planning_ends_at_its_deadline_in_a_replaced_worker(served):
    """``length(repeat('x', 10^9))``: 504 after 39 s with the server at 5.2 GB and the heavy slot held (search,
    Advice, Range Stats, Compare answered 504 for everyone). Now: 504 at the deadline, the worker ended and
    replaced, the web process as it was, the heavy views answering meanwhile."""
    run = served.ids["level1"]
    before = {p.pid for p in processes(served)["console"]}
    web_before = rss(processes(served)["web"])
    with Prober(served, [f"/api/runs/{run}/timeline/search?q=aten", "/api/health"]) as probe:
        status, _, body, took = console(served, run, "SELECT length(repeat('x', 1000000000)) AS n")
    assert status == 504 and json.loads(body)["error"]["code"] == "query_timeout", body
    assert took < TIMEOUT_S + 1 + SLACK_S, took
    assert probe.seen and all(s == 200 for _, s, _ in probe.seen), probe.seen
    assert probe.web_peak - web_before < 300e6, (web_before, probe.web_peak)
    assert console(served, run, "SELECT 41 + 1 AS x")[0] == 200  # a new worker answers
    after = {p.pid for p in processes(served)["console"]}
    assert after and not after & before, (before, after)


def test_huge_values_answer_cut_while_health_stays_prompt(served):
    """``list_transform(range(8e6), x -> x::VARCHAR) FROM range(10)``: 504 after 41 s, 9.6 GB, /api/health
    25.9 s (rows became Python objects on the event loop's process). Now the worker cuts the lists where DuckDB
    hands them over (or its limits stop it), and health answers at once meanwhile."""
    run = served.ids["level1"]
    web_before = rss(processes(served)["web"])
    with Prober(served, ["/api/health"], every_s=0.2) as probe:
        status, _, body, took = console(
            served, run, "SELECT list_transform(range(8000000), lambda x: x::VARCHAR) AS l FROM range(10)")
    assert took < TIMEOUT_S + 1 + SLACK_S, took
    if status == 200:
        answer = json.loads(body)
        assert answer["row_count"] >= 1 and answer["cells_cut"] >= 1
        assert len(answer["rows"][0][0]) == 1001 and answer["rows"][0][0][-1] == "…"
        assert len(body) <= answer["byte_cap"] + 100_000
    else:
        assert status in (400, 504), body
        assert json.loads(body)["error"]["code"] in ("out_of_memory", "query_crashed", "query_timeout"), body
    assert probe.seen and max(t for _, _, t in probe.seen) < PROMPT_S, sorted(t for _, _, t in probe.seen)[-3:]
    assert probe.web_peak - web_before < 300e6, (web_before, probe.web_peak)


def test_sixty_clients_looping_a_slow_query_leave_every_other_request_prompt(served):
    """60 clients looping a 10 s console query held all 40 threadpool threads: /api/runs, the Summary and the
    HTML pages took 9.4-10.3 s. Now a waiting console request holds no thread, the queue is bounded and fair (429
    with Retry-After past a client's share), and those answer at once."""
    run = served.ids["level1"]
    slow = "SELECT sum(a.range * b.range) AS s FROM range(400000) a, range(400000) b"
    results: list[tuple[int, dict, float]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(i: int) -> None:
        while not stop.is_set():
            status, headers, _, took = console(served, run, slow)
            with lock:
                results.append((status, headers, took))
            if status == 429:
                stop.wait(1.0)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(60)]
    pages = ["/api/runs", f"/api/runs/{run}/summary", f"/runs/{run}/timeline", f"/runs/{run}/summary",
             "/api/health"]
    with Prober(served, pages) as probe:
        for t in threads:
            t.start()
        # until the load has been refused (429), held a query to its deadline (504), and every page was asked for
        # twice meanwhile
        until = time.monotonic() + TIMEOUT_S + 60
        while time.monotonic() < until:
            with lock:
                seen = {s for s, _, _ in results}
            if {429, 504} <= seen and len(probe.seen) >= 2 * len(pages):
                break
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(TIMEOUT_S + 10)
    statuses = [s for s, _, _ in results]
    assert 429 in statuses and set(statuses) <= {200, 429, 504}, sorted(set(statuses))
    assert all(h.get("retry-after", "").isdigit() for s, h, _ in results if s == 429)
    assert max(took for _, _, took in results) < TIMEOUT_S + 1 + SLACK_S
    assert probe.seen and all(s == 200 for _, s, _ in probe.seen), probe.seen
    assert max(t for _, _, t in probe.seen) < PROMPT_S, sorted(probe.seen, key=lambda x: -x[2])[:3]


@pytest.mark.parametrize("sql, rows", [
    ("SELECT " + "+".join(["1"] * 600) + " AS n", [[600]]),
    ("SELECT * FROM " + "(SELECT * FROM " * 499 + "ranks" + ") t" * 499 + " ORDER BY rank", [[0], [1]]),
    ("SELECT " + "(SELECT " * 500 + "1" + ")" * 500 + " AS n", None),
], ids=["600-term sum", "500 nested FROM subqueries", "500 nested scalar subqueries"])
def test_deep_sql_answers_or_is_a_400_with_a_rule_never_a_500(served, sql, rows):
    status, _, body, _ = console(served, served.ids["level1"], sql)
    if rows is not None:
        assert status == 200, body
        assert [r[:1] for r in json.loads(body)["rows"]] == rows
    else:
        assert status == 400, body
        assert json.loads(body)["error"]["code"] in ("syntax_error", "query_failed", "query_too_deep"), body


def test_no_file_the_console_can_name_is_read(served, runs):
    """The spill folder (``glob('<data dir>/.console-tmp/*')`` answered 200, ``read_text``/``read_blob`` read other
    users' spill files and the run's shards). Now a planted file in each place, tried with every file-reading
    function DuckDB has and as a table name, is refused (400 ``file_access``) and never read."""
    from ascendscope.server.runs import RunStore

    run = served.ids["level1_sharded"]
    tmp = Path(runs.data_dir) / ".console-tmp"
    workers = [p for p in tmp.iterdir() if p.is_dir() and p.name.startswith("w")]
    assert workers, list(tmp.iterdir())
    shard_dir = RunStore(runs.data_dir).run_dir(run) / "shards"
    shard = next(shard_dir.glob("*.duckdb"))
    planted = []
    for folder in (tmp, *workers, shard_dir):
        for name in ("planted.csv", "planted.txt", "planted.json", "planted.parquet"):
            (folder / name).write_text(f"a,b\n{SECRET},1\n")
            planted.append(folder / name)
    try:
        import duckdb

        _, readers, _ = sqlrules._catalog(duckdb.connect())
        assert {"glob", "read_text", "read_blob", "read_csv", "read_json", "read_parquet"} <= readers
        paths = [str(p) for p in planted] + [str(shard), f"{tmp}/*", f"{workers[0]}/*", f"{shard_dir}/*"]
        tried = 0
        for path in paths:
            quoted = path.replace("'", "''")
            queries = [f"SELECT * FROM {fn}('{quoted}')" for fn in sorted(readers)]
            queries += [f"SELECT * FROM '{quoted}'", f"FROM '{quoted}'", f"DESCRIBE '{quoted}'",
                        f"SUMMARIZE '{quoted}'", f"SELECT * FROM main.read_text(['{quoted}'])"]
            for sql in queries:
                status, _, body, _ = console(served, run, sql)
                tried += 1
                assert status == 400, (sql, body)
                assert json.loads(body)["error"]["code"] in ("file_access", "function_refused"), (sql, body)
                assert SECRET not in body.decode() and "SQLite" not in body.decode(), (sql, body)
        assert tried >= len(paths) * len(readers)
    finally:
        for p in planted:
            p.unlink(missing_ok=True)


def test_a_killed_worker_is_replaced_and_workers_stay_within_the_heavy_slots(served):
    run = served.ids["level1"]
    assert console(served, run, "SELECT 1 AS one")[0] == 200
    workers = processes(served)["console"]
    assert 1 <= len(workers) <= max(1, psutil.cpu_count() // 2)
    for w in workers:
        w.kill()
    time.sleep(0.5)
    status, _, body, _ = console(served, run, "SELECT count(*) AS n FROM ranks")
    assert status == 200 and json.loads(body)["rows"] == [[2]], body
