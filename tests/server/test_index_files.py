"""Index entries written once to files in the run's folder and mapped by every server process
(server.indexfiles): the round trip of every structure track_index keeps, a track, its level of detail, a counter
track and the flows of a sharded run read by one server and answered by another with no read of the database, the
same answers as the SQL path; a damaged file read again, a store that cannot be written, older versions removed."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ascendscope.server import indexfiles, querypool
from ascendscope.server.app import create_app
from ascendscope.server.settings import Settings

# the whole reads of server.queries.track_index: a track (names as codes), a table's flows, its slices' depths
WHOLE_READS = ("JOIN n ON", "list_position", "slice_id, depth")


def client_for(data_dir, **settings) -> TestClient:
    app = create_app(Settings.from_env(environ={}, data_dir=str(data_dir), query_cache_mb=0, **settings))
    app.state.query_pool.background_index = False  # (each entry read by the request needing it: deterministic)
    return TestClient(app)


def test_every_structure_of_an_entry_comes_back_equal_and_mapped(tmp_path):
    entry = {"ts": np.array([5, 1, 9], dtype=np.int64), "flags": np.array([True, False, True]),
             "depth": (np.array([0, 2, 1], dtype=np.int8), 7, None),
             "slice_id": (np.array([3, 0], dtype=np.int16), -2, np.array([False, True])),
             "empty": np.zeros(0, dtype=np.float64), "value": np.array([1.5, np.nan, -0.0]),
             "names": ["aten::mm", None, "算子"], "cat_names": np.array(["async_npu", ""], dtype=object),
             "segments": [(0, 0, 3, 12), (1, 3, 3, 0)], "sorted": True, "max_dur": 2 ** 62, "grid": np.eye(2)}
    path = tmp_path / "e.bin"
    indexfiles.write(path, entry)
    back = indexfiles.read(path)
    assert back.keys() == entry.keys()
    for name, value in entry.items():
        got = back[name]
        if isinstance(value, np.ndarray):
            assert got.dtype == value.dtype and got.shape == value.shape
            np.testing.assert_array_equal(got, value)
            if value.dtype != object and value.size:
                assert indexfiles.mapped(got) and not got.flags.writeable
        elif name in ("depth", "slice_id"):
            assert isinstance(got, tuple) and got[1] == value[1]
            np.testing.assert_array_equal(got[0], value[0])
            assert (got[2] is None) == (value[2] is None)
        else:
            assert got == value and type(got) is type(value)
    assert all(p.name == "e.bin" for p in tmp_path.iterdir())  # no temporary file left
    with pytest.raises(TypeError):
        indexfiles.write(tmp_path / "f.bin", {"bad": object()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.bin"]


def two_rank_run(tmp_path_factory, name: str) -> tuple:
    """(store, run id) of a run of 2 ranks in a shard each (flows, counters, a level of detail), ingested, not yet
    marked ready."""
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.generate import generate_run
    from ascendscope.server.runs import RunStore

    source = tmp_path_factory.mktemp(f"{name}-src") / "run"
    generate_run(source, ranks=2, steps=2, ops_per_step=1500, seed=3)
    store = RunStore(tmp_path_factory.mktemp(name))
    run = store.create_run("files", str(source))
    ingest_sharded(source, store.run_dir(run.id), workers=1, group_bytes=0)  # (small ranks are not grouped)
    return store, run.id


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    store, run_id = two_rank_run(tmp_path_factory, "ixfiles")
    store.set_status(run_id, "ready")
    return store, run_id


def asks(client, run_id, **extra) -> list[tuple[str, dict]]:
    meta = client.get(f"/api/runs/{run_id}/timeline/tracks", params=extra).json()
    start, end = int(meta["start_ns"]), int(meta["end_ns"])
    tracks = [t for t in meta["tracks"] if not extra.get("ranks") or t["rank"] == int(extra["ranks"])]
    slices = sorted((t for t in tracks if t["kind"] != "counter" and t["slice_count"]),
                    key=lambda t: -t["slice_count"])[:3]
    counters = [t["track_id"] for t in tracks if t["kind"] == "counter"]
    assert slices and counters
    mid = start + (end - start) // 3
    out = []
    for t in slices:
        for width in (40, 1600):  # a level of detail, then exact rows
            out.append(("slices", {"track_id": t["track_id"], "start_ns": start, "end_ns": end, "width_px": width}))
        out.append(("slices", {"track_id": t["track_id"], "start_ns": mid, "end_ns": mid + (end - start) // 40,
                               "width_px": 1600}))
    out.append(("counters", {"track_id": counters, "start_ns": mid, "end_ns": end, "width_px": 1600}))
    out.append(("flows", {"start_ns": start, "end_ns": mid}))
    return [(kind, {**params, **extra}) for kind, params in out]


def answers(client, run_id, wanted) -> list:
    got = []
    for kind, params in wanted:
        resp = client.get(f"/api/runs/{run_id}/timeline/{kind}", params=params)
        assert resp.status_code == 200, resp.text
        got.append(resp.json())
    return got


def whole_reads(monkeypatch) -> list:
    from ascendscope.server.api.deps import RunDb

    calls = []
    real = RunDb.arrays
    monkeypatch.setattr(RunDb, "arrays", lambda self, sql, params=(): (
        calls.append(sql) if any(w in sql for w in WHOLE_READS) else None) or real(self, sql, params))
    return calls


def entry_files(store, run_id) -> list:
    return sorted((store.run_dir(run_id) / indexfiles.FOLDER).rglob("*.bin"))


def test_what_one_server_read_another_maps_with_no_read_of_the_database(sharded, monkeypatch):
    store, run_id = sharded
    calls = whole_reads(monkeypatch)
    with client_for(store.data_dir, track_cache_mb=0) as sql:
        wanted = asks(sql, run_id)
        expected = answers(sql, run_id, wanted)
    assert calls == []
    with client_for(store.data_dir) as first:
        assert answers(first, run_id, wanted) == expected
        assert any("list_position" in c for c in calls) and any("JOIN n ON" in c for c in calls)
        kinds = {key[2] for key in first.app.state.query_pool._index}
        assert {"track_slices", "track_lod", "counter_samples", "flows"} <= kinds, kinds
    files = entry_files(store, run_id)
    assert len(files) >= len(kinds)
    calls.clear()
    with client_for(store.data_dir) as second:  # another process, or the same after a restart
        assert answers(second, run_id, wanted) == expected
        assert calls == []  # every entry mapped from its file
        pool = second.app.state.query_pool
        arrays = [v for entry, _ in pool._index.values() for v in walk(entry) if isinstance(v, np.ndarray)
                  and v.dtype != object and v.size]
        assert arrays and all(indexfiles.mapped(a) for a in arrays)
        # a mapped array counts the same small amount against the budget, whatever its size (its pages are the
        # page cache's); a copy of it in memory counts its bytes
        assert {querypool.approx_bytes(a) for a in arrays} == {querypool.MAPPED_ARRAY_BYTES}
        big = max(arrays, key=lambda a: a.nbytes)
        assert querypool.approx_bytes(big.copy()) == big.nbytes > querypool.MAPPED_ARRAY_BYTES
    assert entry_files(store, run_id) == files  # nothing written again


def walk(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from walk(v)
    else:
        yield value


def test_a_damaged_file_is_read_from_the_database_again_and_rewritten(sharded, monkeypatch, caplog):
    store, run_id = sharded
    with client_for(store.data_dir, track_cache_mb=0) as sql:
        wanted = asks(sql, run_id)
        expected = answers(sql, run_id, wanted)
    with client_for(store.data_dir) as first:
        answers(first, run_id, wanted)
    files = entry_files(store, run_id)
    assert files
    for i, path in enumerate(files):  # cut short, emptied, not an index file at all, or naming arrays it lacks
        data = path.read_bytes()
        if i % 4 == 3:  # a whole header whose value names an array the file does not list
            header = json.dumps({"format": indexfiles.FORMAT, "arrays": [], "value": {"d": {"ts": {"a": 0}}}})
            at = len(indexfiles.MAGIC) + 16
            path.write_bytes(indexfiles.MAGIC + struct.pack("<QQ", at, len(header)) + header.encode())
            with pytest.raises(IndexError):
                indexfiles.read(path)
        else:
            path.write_bytes(data[:len(data) // 2] if i % 4 == 0 else b"" if i % 4 == 1 else b"x" * len(data))
    calls = whole_reads(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="ascendscope.indexfiles"), client_for(store.data_dir) as again:
        assert answers(again, run_id, wanted) == expected
    assert calls  # read from the database again
    assert "cannot be read" in caplog.text
    for path in entry_files(store, run_id):
        indexfiles.read(path)  # whole again


def test_a_store_that_cannot_be_written_answers_from_memory(sharded, monkeypatch, caplog):
    store, run_id = sharded
    monkeypatch.setattr(indexfiles, "_unwritable", set())

    def refuse(path, value):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(indexfiles, "write", refuse)
    shutil.rmtree(store.run_dir(run_id) / indexfiles.FOLDER, ignore_errors=True)  # (the files of earlier tests)
    with client_for(store.data_dir, track_cache_mb=0) as sql:
        wanted = asks(sql, run_id)
        expected = answers(sql, run_id, wanted)
    with caplog.at_level(logging.WARNING, logger="ascendscope.indexfiles"), client_for(store.data_dir) as mem:
        assert answers(mem, run_id, wanted) == expected
        assert mem.app.state.query_pool.index_used() > 0  # kept in memory instead
    assert caplog.text.count("cannot write index files") == 1  # said once, not per entry
    assert store.run_dir(run_id) in indexfiles._unwritable


def test_folders_of_older_versions_are_removed_once_no_process_writes_to_them(sharded):
    store, run_id = sharded
    root = store.run_dir(run_id) / indexfiles.FOLDER
    old, recent = root / ("0" * 20), root / ("1" * 20)
    for folder in (old, recent):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "x.bin").write_bytes(b"")
    past = time.time() - indexfiles.STALE_S - 60
    os.utime(old, (past, past))
    files = indexfiles.IndexFiles(store.run_dir(run_id), ("another version",))
    assert files.save(("scope", "kind", (), 1), {"a": np.arange(3)})["a"].tolist() == [0, 1, 2]
    assert not old.exists() and recent.exists() and files.dir.exists()


def test_a_track_is_shared_between_scopes_of_ranks_and_flows_are_not(sharded, monkeypatch):
    """A track's entry is the same whichever ranks are loaded (its track_id is the run's), so a server that loads
    rank 0 alone maps what one loading both ranks wrote. The run's view of the flows holds the ranks attached: with
    rank 0 alone and with rank 1 alone it is the same table name and other flows, so each scope reads its own.
    Every answer is the SQL path's for the same ranks."""
    store, run_id = sharded
    shutil.rmtree(store.run_dir(run_id) / indexfiles.FOLDER, ignore_errors=True)  # (the files of earlier tests)
    wanted, expected = {}, {}
    with client_for(store.data_dir, track_cache_mb=0, max_loaded_ranks=1) as sql:
        for rank in ("0", "1"):
            wanted[rank] = asks(sql, run_id, ranks=rank)
            expected[rank] = answers(sql, run_id, wanted[rank])
    assert expected["0"][-1] != expected["1"][-1] and expected["0"][-1]["count"]  # other flows
    with client_for(store.data_dir) as both:  # the same windows of rank 0's tracks, both ranks loaded
        answers(both, run_id, [(kind, {k: v for k, v in p.items() if k != "ranks"}) for kind, p in wanted["0"]])
        assert len(both.app.state.query_pool._index) > 3
    for rank in ("0", "1"):
        calls = whole_reads(monkeypatch)
        with client_for(store.data_dir, max_loaded_ranks=1) as one:
            assert answers(one, run_id, wanted[rank]) == expected[rank]
            assert any(key[2] == "flows" for key in one.app.state.query_pool._index)
        if rank == "0":
            assert not [c for c in calls if "JOIN n ON" in c]  # no track read: every one mapped
        assert [c for c in calls if "list_position" in c]  # the flows of this scope read, not another's mapped
        monkeypatch.undo()


def test_removing_a_runs_database_removes_its_index_files(tmp_path):
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    run = store.create_run("gone", str(tmp_path))
    folder = store.run_dir(run.id) / indexfiles.FOLDER / "v"
    folder.mkdir(parents=True)
    (folder / "e.bin").write_bytes(b"")
    store.remove_database(run.id)
    assert not (store.run_dir(run.id) / indexfiles.FOLDER).exists()


def test_an_entry_written_after_its_run_was_deleted_does_not_bring_the_folder_back(tmp_path, caplog):
    """A request (or the ingest worker writing ahead, server.prewarm) may still hold a run's index when the run is
    deleted: its write is dropped quietly, and the run's folder stays gone."""
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    run = store.create_run("gone", str(tmp_path))
    files = indexfiles.IndexFiles(store.run_dir(run.id), (1, 2, 3))
    store.delete(run.id)
    with caplog.at_level(logging.WARNING, logger="ascendscope.indexfiles"):
        assert files.save(("s", "track_slices", (), 7), {"ts": np.arange(3)}) is None
    assert not store.run_dir(run.id).exists() and caplog.records == []
    assert files.writable  # (nothing marked unwritable: another run under the same name would write)
