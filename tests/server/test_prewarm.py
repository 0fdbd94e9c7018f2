"""Index files written right after an ingest (server.prewarm): a server then answers a page's viewport requests
(every kind of entry: a track, its level of detail, counters, flows) with no whole read of the database and no
file of its own, the same answers as the SQL path; again, it finds everything and writes nothing; the ingest worker
does it once a run of at least ``prewarm_min_slices`` is ready, and says so in the run's log; index files off,
nothing is written."""

from __future__ import annotations

import shutil

import pytest

from ascendscope.server.prewarm import prewarm
from ascendscope.server.settings import Settings
from tests.server.test_index_files import answers, asks, client_for, entry_files, two_rank_run, whole_reads


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    return two_rank_run(tmp_path_factory, "prewarm")


@pytest.fixture()
def sharded(ingested):
    """That run, ready, with no index file yet."""
    from ascendscope.server.runs import INDEX_DIR

    store, run_id = ingested
    shutil.rmtree(store.run_dir(run_id) / INDEX_DIR, ignore_errors=True)
    store.set_status(run_id, "ready")
    return store, run_id


def settings_for(store, **extra) -> Settings:
    return Settings.from_env(environ={}, data_dir=str(store.data_dir), **extra)


def test_after_prewarm_a_page_reads_nothing_whole_and_writes_no_file(sharded, monkeypatch):
    store, run_id = sharded
    with client_for(store.data_dir, track_cache_mb=0) as sql:  # the SQL path: what every answer must be
        wanted = asks(sql, run_id)
        expected = answers(sql, run_id, wanted)
    assert entry_files(store, run_id) == []
    done = prewarm(store, run_id, settings_for(store), nice=0)
    assert done["entries"] > 0 and done["skipped"] == 0 and "reason" not in done, done
    files = entry_files(store, run_id)
    assert len(files) == done["entries"]
    calls = whole_reads(monkeypatch)
    with client_for(store.data_dir) as client:
        assert answers(client, run_id, wanted) == expected
        kinds = {key[2] for key in client.app.state.query_pool._index}
        assert {"track_slices", "track_lod", "counter_samples", "flows"} <= kinds, kinds
        # a page on one rank (its own scope): the tracks' entries are shared between scopes, so still no read of
        # a track; its flows belong to the scope and are read (and written) as before
        one_rank = [(k, p) for k, p in asks(client, run_id, ranks="1") if k != "flows"]
        answers(client, run_id, one_rank)
    assert calls == []  # every entry was mapped from the files prewarm wrote
    assert entry_files(store, run_id) == files  # and the server wrote none of its own
    again = prewarm(store, run_id, settings_for(store), nice=0)
    assert again["entries"] == done["entries"] and entry_files(store, run_id) == files


def test_nothing_is_written_when_index_files_are_off_or_the_run_is_not_ready(sharded):
    store, run_id = sharded
    assert prewarm(store, run_id, settings_for(store, index_files=False), nice=0) == {"reason": "index files are off"}
    assert prewarm(store, run_id, settings_for(store, track_cache_mb=0), nice=0)["reason"] == "index files are off"
    store.set_status(run_id, "ingesting")
    assert prewarm(store, run_id, settings_for(store), nice=0) == {"reason": "the run is ingesting"}
    assert entry_files(store, run_id) == []


def test_a_track_too_large_for_the_track_cache_keeps_the_database_path(sharded, monkeypatch):
    from ascendscope.server.queries import track_index

    store, run_id = sharded
    whole = prewarm(store, run_id, settings_for(store), nice=0)["entries"]
    for path in entry_files(store, run_id):
        path.unlink()
    monkeypatch.setattr(track_index, "BYTES_PER_SLICE", 1000)  # a track of over 1,000 slices: over 1 MB
    done = prewarm(store, run_id, settings_for(store, track_cache_mb=1), nice=0)
    assert done["skipped"] > 0 and done["entries"] + done["skipped"] == whole
    assert len(entry_files(store, run_id)) == done["entries"]


def test_a_run_wider_than_a_connection_gets_its_first_ranks_written_ahead(sharded, monkeypatch):
    """More ranks than ``max_loaded_ranks``: only the first ones (what a page opens first), and no flows (named by
    each page's scope); the others are left to their first look."""
    from ascendscope.ingest.layout import TRACK_ID_BITS
    from ascendscope.server import prewarm as module

    store, run_id = sharded
    written = []
    real = module._write
    monkeypatch.setattr(module, "_write", lambda db, done, kind, params, item, size, read: (
        written.append((kind, item)), real(db, done, kind, params, item, size, read)))
    done = prewarm(store, run_id, settings_for(store, max_loaded_ranks=1), nice=0)
    assert done["ranks_left"] == 1 and done["entries"] == len(written) == len(entry_files(store, run_id))
    assert {kind for kind, _ in written} == {"track_slices", "track_lod", "counter_samples"}
    assert {item >> TRACK_ID_BITS for _, item in written} == {0}
    written.clear()
    whole = prewarm(store, run_id, settings_for(store), nice=0)  # both ranks fit one connection: every entry
    assert "ranks_left" not in whole and {item >> TRACK_ID_BITS for k, item in written if k != "flows"} == {0, 1}
    assert any(k == "flows" for k, _ in written)


def test_the_ingest_worker_writes_them_once_a_large_enough_run_is_ready(tmp_path):
    from ascendscope.sample_data.generate import generate_run
    from ascendscope.server.runs import RunStore
    from ascendscope.server.worker import IngestQueue

    source = tmp_path / "src" / "run"
    generate_run(source, ranks=2, steps=2, ops_per_step=300, seed=5)
    store = RunStore(tmp_path / "data")
    small = store.create_run_from_path(source)
    queue = IngestQueue(store, workers=1).start(resume=True)  # the default: a run this small is not written ahead
    try:
        assert queue.wait_idle(120)
    finally:
        queue.stop()
    log = (store.run_dir(small.id) / "ingest.log").read_text()
    assert "index files not written ahead: a small run" in log and not entry_files(store, small.id), log
    again = shutil.copytree(source, tmp_path / "src2" / "run")  # (a path already added is the same run)
    run = store.create_run_from_path(again)
    assert run.id != small.id
    queue = IngestQueue(store, workers=1, ingest_options={"prewarm_min_slices": 0}).start(resume=True)
    try:
        assert queue.wait_idle(120)
    finally:
        queue.stop()
    assert store.get(run.id).status == "ready"
    log = (store.run_dir(run.id) / "ingest.log").read_text()
    assert "index files written ahead:" in log, log
    assert entry_files(store, run.id)


KILLED = r"""
import os, sys
from pathlib import Path
from ascendscope.server import prewarm
from ascendscope.server.runs import RunStore
from ascendscope.server.settings import Settings

def killed(*args, **kwargs):  # the worker killed while it writes ahead (its server stopped, the run deleted)
    os._exit(9)

prewarm._prewarm = killed
data, run_id = sys.argv[1], sys.argv[2]
prewarm.prewarm(RunStore(Path(data)), run_id, Settings.from_env(environ={}, data_dir=data))
"""


def test_a_worker_killed_while_writing_ahead_leaves_nothing_in_the_temp_folder(sharded, tmp_path):
    """The ingest worker writes a run's index files ahead in its own process, which dies with its server or its run:
    it makes nothing in the temp folder (a folder made there would outlive it)."""
    import os
    import subprocess
    import sys

    store, run_id = sharded
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    out = subprocess.run([sys.executable, "-c", KILLED, str(store.data_dir), run_id], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 9, out.stderr[-2000:]
    assert list(temp.iterdir()) == []
