"""Shared fixtures: the real samples ingested once per session, a run store over them, a TestClient, a live
uvicorn server on a free port, and a Playwright page driving Debian's /usr/bin/chromium (headless).

Browser tests are skipped (with the reason) only when /usr/bin/chromium is missing; CI installs it.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# the real samples, or their generated twins (tests/samples.py); ASCENDSCOPE_REAL_SAMPLES=/nonexistent runs the
# suite as a checkout without ../shared would
from tests.samples import HAVE_REAL, PYTORCH_TEXT, REAL_SAMPLES, needs_real  # noqa: F401

# The files that take longest (test-seconds of a whole run, docs/development.md), collected first: xdist hands out
# whole files (--dist loadfile) in collection order, so a long file collected last would leave the other worker idle
# while it runs. Longest first; every other file keeps its place after them.
RUN_FIRST = ("tests/ingest/test_shards.py", "tests/test_corpus.py", "tests/bench/test_bench_suite.py",
             "tests/test_readme_examples.py", "tests/server/test_track_index.py",
             "tests/server/api/test_console_hostile.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(RUN_FIRST)))  # (a stable sort)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
VIEWPORT = {"width": 1600, "height": 1000}

needs_samples = pytest.mark.skipif(not PYTORCH_TEXT.is_dir(), reason=f"samples not found at {PYTORCH_TEXT}")


def _ingest(tmp_path_factory, level: str) -> Path:
    if not (PYTORCH_TEXT / level).is_dir():
        pytest.skip(f"real sample {PYTORCH_TEXT / level} not found")
    from ascendscope.ingest.pipeline import ingest_path

    out = tmp_path_factory.mktemp(f"db-{level}") / f"{level}.duckdb"
    ingest_path(PYTORCH_TEXT / level, out)
    return out


@pytest.fixture(scope="session")
def level1_db(tmp_path_factory) -> Path:
    """``msinsight_pytorch_2025/text/level1`` (2 ranks, every lane) ingested into a DuckDB file."""
    return _ingest(tmp_path_factory, "level1")


@pytest.fixture(scope="session")
def level0_db(tmp_path_factory) -> Path:
    """``…/level0``: no CANN lane (its process_name was pruned, so the pid is unnamed)."""
    return _ingest(tmp_path_factory, "level0")


@pytest.fixture(scope="session")
def generated_db(tmp_path_factory) -> Path:
    """A generated 2-rank run (sample_data.generate), ingested: every lane and flow kind, known ground truth."""
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.sample_data.generate import generate_run

    root = tmp_path_factory.mktemp("generated")
    generate_run(root / "run", ranks=2, steps=3, ops_per_step=120, seed=11)
    out = root / "generated.duckdb"
    ingest_path(root / "run", out)
    return out


@dataclass
class Runs:
    data_dir: Path
    ids: dict[str, str] = field(default_factory=dict)  # sample name -> run id
    dbs: dict[str, Path] = field(default_factory=dict)  # sample name -> its database in the store


@pytest.fixture(scope="session")
def runs(tmp_path_factory, level1_db, level0_db, generated_db) -> Runs:
    """A data dir whose store holds the two samples and a generated run as ready runs."""
    from ascendscope.server.runs import RunStore

    data_dir = tmp_path_factory.mktemp("data")
    store = RunStore(data_dir)
    out = Runs(data_dir=data_dir)
    for name, db in (("level1", level1_db), ("level0", level0_db), ("generated", generated_db)):
        run = store.create_run(name, str(PYTORCH_TEXT / name) if name != "generated" else "generated")
        shutil.copy(db, store.db_path(run.id))
        store.set_status(run.id, "ready")
        out.ids[name] = run.id
        out.dbs[name] = store.db_path(run.id)
    return out


@pytest.fixture(scope="session")
def app(runs):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    return create_app(Settings.from_env(environ={}, data_dir=str(runs.data_dir)))


@pytest.fixture(scope="session")
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    base_url: str
    runs: dict[str, str]


def store_with_copy(db_file: Path, data_dir: Path, name: str = "generated"):
    """A run store in ``data_dir`` holding a ready run ``name`` whose database is a copy of ``db_file``;
    ``(store, run_id)``."""
    import shutil

    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    run = store.create_run(name, name)
    shutil.copy(db_file, store.db_path(run.id))
    store.set_status(run.id, "ready")
    return store, run.id


@contextmanager
def serving(app, port: int | None = None):
    """uvicorn serving ``app`` on a free 127.0.0.1 port in a thread; yields the base URL."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="live-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the live server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def ingesting_server(data_dir: Path, *, start_queue: bool = True, **settings):
    """A live server over ``data_dir`` with its own ingest queue (uploads get ingested), as ``serve`` runs it.
    Yields ``(base_url, store, queue)``; with ``start_queue=False`` runs wait in the queue until ``queue.start()``."""
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings
    from ascendscope.server.worker import IngestQueue

    config = Settings.from_env(environ={}, data_dir=str(data_dir), **settings)
    store = RunStore(config.data_dir)
    queue = IngestQueue(store, workers=config.ingest_workers, retries=config.ingest_retries)
    if start_queue:
        queue.start()
    try:
        with serving(create_app(config, store=store, ingest_queue=queue)) as base:
            yield base, store, queue
    finally:
        queue.stop()


@pytest.fixture(scope="session")
def live_server(runs):
    """uvicorn serving the store of ``runs`` on a free 127.0.0.1 port, in a thread, for the whole session."""
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    port = free_port()
    app = create_app(Settings.from_env(environ={}, data_dir=str(runs.data_dir), port=port))
    with serving(app, port) as base:
        yield LiveServer(base_url=base, runs=dict(runs.ids))


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium); CI installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser):
    """A fresh page (1600×1000) under the server's real Content-Security-Policy; console errors (a CSP violation is
    one) and page errors fail the test at teardown.

    Wait with locators, or ``wait_for_function`` given a *function* ("() => …", "(arg) => …"): Playwright calls a
    function through the DevTools protocol, but runs a bare expression string through eval in the page, which the
    policy blocks. ``evaluate`` works either way."""
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    pg.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.set_default_timeout(10_000)
    yield pg
    context.close()
    assert not errors, errors


@pytest.fixture()
def strict_page(page):
    """The same as ``page`` (every page now runs under the real policy); kept for tests written against it."""
    return page


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


# --- operator / memory / summary / communication views ------------------------------------------------------------
VIEW_SAMPLES = {
    "level2": PYTORCH_TEXT / "level2",
    "st4": REAL_SAMPLES / "msinsight_st_4rank_2025q4",  # 4 ranks, no trace, partial files per rank
    "fixtures": REAL_SAMPLES / "msinsight_server_fixtures",  # 16-rank GPT-3 communication files of ranks 0/1
}


@pytest.fixture(scope="session")
def view_runs(runs) -> dict[str, str]:
    """``{name: run_id}``: level1 from ``runs`` plus level2, st4 and fixtures ingested into the same store, so that
    ``client`` and ``live_server`` serve them too (the store is read from disk on every request)."""
    return {"level1": runs.ids["level1"], **ingest_ready(runs.data_dir, VIEW_SAMPLES)}


def run_connection(data_dir: Path, run_id: str):
    """A read-only connection to a run of the store at ``data_dir``, one file or sharded, its tables by name."""
    import duckdb

    from ascendscope.ingest import layout
    from ascendscope.server.runs import RunStore

    path = RunStore(data_dir).db_path(run_id)
    if path.name == layout.CLUSTER_DB:
        return layout.connect(path.parent)[0]
    return duckdb.connect(str(path), read_only=True)


def ingest_ready(data_dir: Path, samples: dict[str, Path]) -> dict[str, str]:
    """Ingest each ``{name: folder}`` into the store at ``data_dir`` as a ready run, sharded as the server ingests
    it; ``{name: run_id}``. Skips the test when a folder is missing."""
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    ids = {}
    for name, src in samples.items():
        if not src.is_dir():
            pytest.skip(f"real sample {src} not found")
        run = store.create_run(name, str(src))
        summary = ingest_sharded(src, store.run_dir(run.id), workers=1)
        store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
        ids[name] = run.id
    return ids


DB_SAMPLES = {"db_level0": REAL_SAMPLES / "msinsight_pytorch_2025" / "db" / "level0",
              "db_level1": REAL_SAMPLES / "msinsight_pytorch_2025" / "db" / "level1"}


@pytest.fixture(scope="session")
def db_runs(runs) -> dict[str, str]:
    """``{name: run_id}``: the text level0/level1 runs of ``runs`` and the db exports of level0/level1, in the same
    store (so ``client`` serves them)."""
    return {"level0": runs.ids["level0"], "level1": runs.ids["level1"], **ingest_ready(runs.data_dir, DB_SAMPLES)}


# --- late arrivals, critical path, SQL console (issue #20) ----------------------------------------------------------
@pytest.fixture(scope="session")
def wait_runs(runs, tmp_path_factory):
    """``sample_data.waits`` runs (known late rank, critical path and what-if) in the store of ``runs``, so that
    ``client`` and ``live_server`` serve them: ``waits``, ``waits_sharded``, ``waits_level0``
    (tests/insight_sample.py)."""
    from tests.insight_sample import add_wait_runs

    return add_wait_runs(runs.data_dir, tmp_path_factory.mktemp("waits"))


@pytest.fixture(scope="session")
def late_synthetic(runs, tmp_path_factory):
    """A 1,000-rank run whose cluster_collectives has known late ranks, in the store of ``runs``."""
    from tests.insight_sample import synthetic_late_run

    return synthetic_late_run(runs.data_dir, tmp_path_factory.mktemp("late-synthetic"))


@pytest.fixture(scope="session")
def phase_runs(runs, tmp_path_factory):
    """``sample_data.phases`` runs (pipeline bubbles, RL roles and chains known by construction) in the store of
    ``runs`` (tests/phases_sample.py)."""
    from tests.phases_sample import add_phase_runs

    return add_phase_runs(runs.data_dir, tmp_path_factory.mktemp("phases"))
