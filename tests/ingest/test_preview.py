"""A big rank's first time window is published before its shard (issue #39), from its slices before they are
nested: the preview's slices are exactly the final shard's rows of that window (ids, depths, parents, a slice
straddling the window's end whole), its tracks the final tracks but for their depth (the window's),
it is served with its loaded range while the rank is pending, and the final shard replaces it.

Generated data only; the preview's thresholds are lowered so a small rank gets one.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest import pipeline, preview
from ascendscope.ingest.layout import partial_ranks, ready_shards
from ascendscope.ingest.pipeline import Progress
from ascendscope.ingest.shards import ingest_sharded, read_manifest
from ascendscope.sample_data.generate import generate_run
from ascendscope.server.runs import RunStore
from tests.preview_helpers import WINDOW_SLICES, publish_preview, shard_task
from tests.run_helpers import pin


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("preview") / "run"
    generate_run(src, ranks=1, steps=3, ops_per_step=60, seed=11)
    return src


@pytest.fixture(scope="module")
def shard_and_preview(one_rank, tmp_path_factory):
    """The rank's shard and its preview, as a shard task writes them: (shard, preview, note, progress file)."""
    return shard_task(one_rank, tmp_path_factory.mktemp("task"))


def _rows(path: Path, sql: str, params=()):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def test_the_preview_holds_the_final_rows_of_its_window(shard_and_preview):
    shard, pv, note, _ = shard_and_preview
    assert note is not None and pv.is_file() and note["file"] == pv.name
    start, until = note["loaded_ns"]
    final = _rows(shard, "SELECT * FROM slices WHERE ts_ns < ? ORDER BY slice_id", [until])
    assert _rows(pv, "SELECT * FROM slices ORDER BY slice_id") == final
    assert WINDOW_SLICES - 50 <= len(final) <= WINDOW_SLICES < _rows(shard, "SELECT count(*) FROM slices")[0][0]
    # the tracks are the final ones, but for their depth: the window's deepest slice (the rest is not nested yet)
    assert _rows(pv, "SELECT * EXCLUDE (max_depth) FROM tracks ORDER BY track_id") == _rows(
        shard, "SELECT * EXCLUDE (max_depth) FROM tracks ORDER BY track_id")
    window_depths = {}
    for r in final:
        window_depths[r[1]] = max(window_depths.get(r[1], 0), r[5])
    depths = dict(_rows(pv, "SELECT track_id, max_depth FROM tracks"))
    assert {t: d for t, d in depths.items() if d is not None} == window_depths
    assert start == _rows(shard, "SELECT min(ts_ns) FROM slices")[0][0]
    assert note["end_ns"] == _rows(shard, "SELECT max(ts_ns + dur_ns) FROM slices")[0][0]
    # what the window's end cuts through is there whole, nested as in the final shard
    straddling = [r for r in final if r[3] < until < r[3] + r[4]]
    assert straddling and any(r[5] > 0 for r in final)
    ids = {r[0] for r in final}
    assert all(r[6] is None or r[6] in ids for r in final)  # every parent starts before its child: it is there
    # its level of detail covers exactly its slices
    assert _rows(pv, "SELECT sum(slice_count) FROM slice_lod WHERE level = 0")[0][0] == len(final)


def test_no_preview_for_a_rank_below_the_threshold(one_rank, tmp_path):
    disc = pipeline.prepare(one_rank, tmp_path / "x", Progress())
    out = tmp_path / "rank_00000.duckdb"
    progress = tmp_path / "rank_00000.bytes"
    pipeline.ingest_shard(disc.ranks, disc.root, out, src_path=str(one_rank), progress_path=str(progress))
    assert preview.read_note(progress) is None and not preview.path_for(out).exists()


def test_a_pending_rank_is_served_from_its_preview_with_its_loaded_range(one_rank, shard_and_preview, tmp_path):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    _, pv, note, progress = shard_and_preview
    store = RunStore(tmp_path / "data")
    run = store.create_run("big", str(one_rank))
    run_dir = store.run_dir(run.id)
    ingest_sharded(one_rank, run_dir, workers=1)
    publish_preview(run_dir, one_rank, pv, progress)
    manifest = read_manifest(run_dir)
    assert ready_shards(manifest) == {0: f"shards/{pv.name}"}
    assert partial_ranks(manifest) == {0: {"loaded_ns": note["loaded_ns"], "end_ns": note["end_ns"]}}
    store.set_status(run.id, "ingesting")
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir)))) as client:
        tracks = client.get(f"/api/runs/{run.id}/timeline/tracks").json()
        origin = int(tracks["origin_ns"])
        got = tracks["partial_ranks"]["0"]
        assert [got["loaded_start_ns"] + origin, got["loaded_end_ns"] + origin] == note["loaded_ns"]
        assert got["end_ns"] + origin == note["end_ns"] <= int(tracks["end_ns"])
        assert tracks["loaded_ranks"] == [0] and tracks["tracks"]
        info = client.get(f"/api/runs/{run.id}").json()
        assert info["pending_ranks"] == [0] and info["partial_ranks"] == [0]
        track = max(tracks["tracks"], key=lambda t: t["slice_count"])
        part = client.get(f"/api/runs/{run.id}/timeline/slices", params={"track_id": track["track_id"],
                                                                          "width_px": 4000}).json()
        pin(run_dir, [])  # the shard is ready: the preview is no longer read
        after = client.get(f"/api/runs/{run.id}/timeline/tracks").json()
        assert after["partial_ranks"] == {}
        whole = client.get(f"/api/runs/{run.id}/timeline/slices", params={"track_id": track["track_id"],
                                                                           "width_px": 4000}).json()
        assert 0 < part["tracks"][0]["count"] < whole["tracks"][0]["count"]


def test_the_preview_is_published_before_the_rank_is_nested(one_rank, tmp_path, monkeypatch):
    """The window is nested on its own once the slices are made: the rank's nesting may wait for it."""
    from ascendscope.ingest import trace

    nest = trace.TraceLoad._nest
    seen = {}

    def nest_after_the_preview(self, *args, **kwargs):
        progress = tmp_path / ".progress" / "rank_00000.bytes"
        deadline = time.monotonic() + 60
        while preview.read_note(progress) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["note"] = preview.read_note(progress)
        seen["nest_exists"] = self.cur.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [self.p.split(".")[-1] + "nest"]
        ).fetchone()[0]
        return nest(self, *args, **kwargs)

    monkeypatch.setattr(trace.TraceLoad, "_nest", nest_after_the_preview)
    shard, pv, note, _ = shard_task(one_rank, tmp_path)
    assert seen["note"] == note and note is not None and pv.is_file()
    assert seen["nest_exists"] == 0  # (the rank's own nesting had not begun)
    until = note["loaded_ns"][1]
    assert _rows(pv, "SELECT * FROM slices ORDER BY slice_id") == _rows(
        shard, "SELECT * FROM slices WHERE ts_ns < ? ORDER BY slice_id", [until])
