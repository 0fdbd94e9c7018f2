"""Every lane of a big rank at the end of its parse (issue #46): the overview is published before the rank's
nesting, its tracks are the final ones but for their depth, each lane's busy time per bucket is the union of its
final slices cut at the buckets (checked against a reading of the final shard one slice at a time), nothing of it
can be clicked or searched, and the final shard replaces it.

Generated data only; the overview's threshold is lowered so a small rank gets one.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest import lod, overview, pipeline
from ascendscope.ingest.layout import partial_ranks, ready_shards
from ascendscope.ingest.pipeline import Progress
from ascendscope.ingest.shards import ingest_sharded, read_manifest
from ascendscope.sample_data.generate import generate_run
from ascendscope.server.runs import RunStore
from tests.overview_helpers import publish_overview, shard_task
from tests.run_helpers import pin


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("overview") / "run"
    generate_run(src, ranks=1, steps=3, ops_per_step=60, seed=11)
    return src


@pytest.fixture(scope="module")
def shard_and_overview(one_rank, tmp_path_factory):
    """The rank's shard and its overview, as a shard task writes them: (shard, overview, note, progress file)."""
    return shard_task(one_rank, tmp_path_factory.mktemp("task"))


def _rows(path: Path, sql: str, params=()):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def expected_level0(slices: list[tuple[int, int, int]], width: int) -> list[tuple]:
    """(track, bucket, slices starting in it, first busy instant, last busy end, busy ns) from the final slices
    (track, ts, dur), one slice at a time: a lane's busy time is the union of its slices (an instant a point)."""
    by_track: dict[int, list[tuple[int, int]]] = {}
    for track, ts, dur in slices:
        by_track.setdefault(track, []).append((ts, ts + dur))
    out = []
    for track, spans in sorted(by_track.items()):
        merged: list[list[int]] = []
        for s, e in sorted(spans):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        rows: dict[int, list[int]] = {}  # bucket -> [starts, lo, hi, busy]
        for s, _ in spans:
            r = rows.setdefault(s // width, [0, s, s, 0])
            r[0] += 1
            r[1], r[2] = min(r[1], s), max(r[2], s)
        for s, e in merged:
            for b in range(s // width, max(e - 1, s) // width + 1):
                lo, hi = max(s, b * width), max(min(e, (b + 1) * width), max(s, b * width))
                r = rows.setdefault(b, [0, lo, hi, 0])
                r[1], r[2], r[3] = min(r[1], lo), max(r[2], hi), r[3] + hi - lo
        out += [(track, b, *r) for b, r in sorted(rows.items())]
    return out


def test_the_overview_holds_every_lane_and_its_busy_time(shard_and_overview, one_rank, tmp_path):
    shard, ov, note, _ = shard_and_overview
    assert note is not None and ov.is_file() and note["file"] == ov.name
    final = _rows(shard, "SELECT track_id, ts_ns, dur_ns FROM slices")
    assert note["start_ns"] == min(ts for _, ts, _ in final)
    assert note["end_ns"] == max(ts + dur for _, ts, dur in final)
    assert note["rank_slices"] == len(final)
    width = note["bucket_ns"]
    assert (note["end_ns"] - note["start_ns"]) / width <= overview.BUCKETS < (note["end_ns"] - note["start_ns"]) / (
        width // lod.FACTOR)
    # every track, final but for the depth: an overview has none
    assert _rows(ov, "SELECT * EXCLUDE (max_depth) FROM tracks ORDER BY track_id") == _rows(
        shard, "SELECT * EXCLUDE (max_depth) FROM tracks ORDER BY track_id")
    assert {d for (d,) in _rows(ov, "SELECT DISTINCT max_depth FROM tracks WHERE slice_count > 0")} == {0}
    assert _rows(ov, "SELECT count(*) FROM slices") == [(0,)]
    level0 = _rows(ov, "SELECT track_id, bucket, slice_count, min_ts_ns, max_end_ns, total_dur_ns FROM slice_lod "
                       "WHERE level = 0 ORDER BY track_id, bucket")
    assert level0 == expected_level0(final, width)
    assert _rows(ov, "SELECT DISTINCT name, depth FROM slice_lod") == [("busy", 0)]
    assert _rows(ov, "SELECT count(*) FROM slice_lod WHERE ts_ns <> min_ts_ns OR dur_ns <> max_end_ns - min_ts_ns"
                 ) == [(0,)]
    # each coarser level sums the one below, FACTOR times wider; every level is stored in (track, bucket) order
    levels = _rows(ov, "SELECT level, bucket_ns, row_count, rank FROM lod_levels ORDER BY level")
    assert [lv for lv, *_ in levels] == list(range(len(levels))) and levels[0][1] == width
    assert all(b[1] == a[1] * lod.FACTOR for a, b in zip(levels, levels[1:]))
    stored = _rows(ov, "SELECT level, track_id, bucket FROM slice_lod")
    assert stored == sorted(stored)
    for lv, bucket_ns, count, rank in levels[1:]:
        got = _rows(ov, "SELECT track_id, bucket, slice_count, min_ts_ns, max_end_ns, total_dur_ns FROM slice_lod "
                        "WHERE level = ? ORDER BY ALL", [lv])
        assert got == _rows(ov, f"""SELECT track_id, bucket // {bucket_ns // width}, sum(slice_count)::BIGINT,
                                           min(min_ts_ns), max(max_end_ns), sum(total_dur_ns)::BIGINT
                                    FROM slice_lod WHERE level = 0 GROUP BY ALL ORDER BY ALL""")
        assert count == len(got) and rank == 0
    # read a part of a lane at a time (a track bigger than a batch), the same rows
    _, small, _, _ = shard_task(one_rank, tmp_path, batch=37)
    assert _rows(small, "SELECT * FROM slice_lod ORDER BY level, track_id, bucket") == _rows(
        ov, "SELECT * FROM slice_lod ORDER BY level, track_id, bucket")



@pytest.mark.parametrize("seed", range(6))
def test_a_lanes_buckets_read_at_their_edges_equal_the_union_cut_slice_by_slice(seed):
    """Random lanes (instants, touching and nested slices, several per bucket or one over many buckets): the rows
    found by binary searches at the buckets' edges are the reference's, made one slice at a time."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(rng.integers(1, 80))
        ts = np.sort(rng.integers(0, 500, n)).astype(np.int64)
        dur = np.where(rng.random(n) < 0.3, 0, rng.integers(0, 120, n)).astype(np.int64)
        width = int(rng.choice([1, 4, 16, 64, 1000]))
        s, e = overview._union(ts, ts + dur, None)
        got = overview._buckets(3, s, e, ts, width)
        rows = list(zip(got["track_id"], got["bucket"], got["slice_count"], got["lo"], got["hi"], got["busy"]))
        assert [tuple(int(v) for v in r) for r in rows] == expected_level0(
            [(3, int(t), int(d)) for t, d in zip(ts, dur)], width)

def test_the_overview_of_begin_and_end_events_is_the_union_of_their_slices(one_rank, tmp_path):
    """B/E pairs (nested, one left open, an E alone), instants and a negative dur on lanes of their own: the
    overview's spans pair them as the slices are paired, so its busy time is still the final slices' union."""
    src = tmp_path / "run"
    shutil.copytree(one_rank, src)
    path = next(src.rglob("trace_view.json"))
    events = json.loads(path.read_text(encoding="utf-8"))
    first = min(float(e["ts"]) for e in events if e.get("ph") == "X")
    pid = next(e["pid"] for e in events if e.get("ph") == "X")

    def at(us: float) -> str:
        return f"{first + us:.3f}"
    extra = [  # (tid 9101: nested pairs, one B never closed; tid 9102: an E alone, instants, a negative dur)
        {"ph": "B", "name": "outer", "pid": pid, "tid": 9101, "ts": at(1)},
        {"ph": "B", "name": "inner", "pid": pid, "tid": 9101, "ts": at(2)},
        {"ph": "E", "pid": pid, "tid": 9101, "ts": at(3.5)},
        {"ph": "E", "pid": pid, "tid": 9101, "ts": at(7)},
        {"ph": "B", "name": "again", "pid": pid, "tid": 9101, "ts": at(6.5)},
        {"ph": "E", "pid": pid, "tid": 9101, "ts": at(9)},
        {"ph": "B", "name": "open", "pid": pid, "tid": 9101, "ts": at(12)},
        {"ph": "E", "pid": pid, "tid": 9102, "ts": at(1)},
        {"ph": "i", "name": "mark", "pid": pid, "tid": 9102, "ts": at(2), "s": "t"},
        {"ph": "X", "name": "backwards", "pid": pid, "tid": 9102, "ts": at(4), "dur": -1.5},
        {"ph": "X", "name": "plain", "pid": pid, "tid": 9102, "ts": at(4.5), "dur": 2},
    ]
    path.write_text(json.dumps(events + extra), encoding="utf-8")
    shard, ov, note, _ = shard_task(src, tmp_path / "task")
    final = _rows(shard, "SELECT track_id, ts_ns, dur_ns FROM slices")
    assert note is not None and note["rank_slices"] == len(final)
    lanes = _rows(shard, "SELECT track_id FROM tracks WHERE tid IN (9101, 9102) ORDER BY tid")
    assert len(lanes) == 2 and _rows(shard, "SELECT count(*) FROM slices WHERE track_id = ?", [lanes[0][0]]) == [(4,)]
    level0 = _rows(ov, "SELECT track_id, bucket, slice_count, min_ts_ns, max_end_ns, total_dur_ns FROM slice_lod "
                       "WHERE level = 0 ORDER BY track_id, bucket")
    assert level0 == expected_level0(final, note["bucket_ns"])
    assert _rows(ov, "SELECT * EXCLUDE (max_depth) FROM tracks ORDER BY track_id") == _rows(
        shard, "SELECT * EXCLUDE (max_depth) FROM tracks ORDER BY track_id")



def test_a_rank_with_an_overview_still_bounds_its_deep_args(one_rank, tmp_path):
    """The deep args are bounded after the overview but for the lanes' name events: a slice's and a name event's
    args nested too deep are still not loaded, with one warning, as without an overview."""
    src = tmp_path / "run"
    shutil.copytree(one_rank, src)
    path = next(src.rglob("trace_view.json"))
    events = json.loads(path.read_text(encoding="utf-8"))
    first = min(float(e["ts"]) for e in events if e.get("ph") == "X")
    deep: list = []
    for _ in range(70):
        deep = [deep]
    extra = [{"ph": "M", "name": "process_name", "pid": 4242, "tid": 0, "args": {"name": "Deep lane", "x": deep}},
             {"ph": "X", "name": "deep", "pid": 4242, "tid": 1, "ts": f"{first + 1:.3f}", "dur": 2,
              "args": {"k": deep}}]
    path.write_text(json.dumps(events + extra), encoding="utf-8")
    shard, ov, note, _ = shard_task(src, tmp_path / "task")
    assert note is not None
    assert _rows(ov, "SELECT process_name FROM tracks WHERE pid = 4242") == [("Process 4242",)]
    assert _rows(shard, "SELECT process_name FROM tracks WHERE pid = 4242") == [("Process 4242",)]
    assert _rows(shard, "SELECT args FROM slices WHERE name = 'deep'") == [(overview_args_note(),)]
    (warning,) = [m for (m,) in _rows(shard, "SELECT message FROM warnings") if "nested deeper" in m]
    assert warning.startswith("2 events with args nested deeper than 64 levels were loaded without their args")



def test_the_deep_args_are_scanned_once_or_in_two_parts_with_an_overview(one_rank, tmp_path, monkeypatch):
    """With an overview: the name events at the read, the rest after the overview; without one: once, whole."""
    from ascendscope.ingest.trace_read import DEEP_ARGS_CANDIDATES, TraceRead

    seen, real = [], TraceRead.sql

    def sql(self, template, params=None, **names):
        if template.startswith(DEEP_ARGS_CANDIDATES):
            seen.append(template[len(DEEP_ARGS_CANDIDATES):])
        return real(self, template, params, **names)
    monkeypatch.setattr(TraceRead, "sql", sql)
    shard_task(one_rank, tmp_path / "task")
    assert seen == [" AND ph = 'M'", " AND ph IS DISTINCT FROM 'M'"]
    seen.clear()
    disc = pipeline.prepare(one_rank, tmp_path / "x", Progress())
    pipeline.ingest_shard(disc.ranks, disc.root, tmp_path / "whole.duckdb", src_path=str(one_rank))
    assert seen == [""]
    seen.clear()  # a db export's events are made in SQL, not read: none (as before the overview was moved)
    db = tmp_path / "db"
    generate_run(db, ranks=1, steps=2, ops_per_step=20, seed=3, export="db")
    disc = pipeline.prepare(db, tmp_path / "y", Progress())
    progress = tmp_path / "db.bytes"
    pipeline.ingest_shard(disc.ranks, disc.root, tmp_path / "db.duckdb", src_path=str(db), progress_path=str(progress))
    assert seen == []


@pytest.mark.parametrize("case", ["plain", "a time skipped", "events added"])
def test_the_slices_counted_at_the_read_are_those_the_events_make(tmp_path, case):
    """The count taken in the read's own pass is what derive() would count: kept while it holds, counted again
    once a time is skipped (a ts before 1970) or events are added (a derived Overlap Analysis lane)."""
    from ascendscope.ingest import overlap, sqlfuncs
    from ascendscope.ingest.trace import SLICE_COUNT, TraceLoad

    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Ascend Hardware"}},
              *({"ph": "X", "name": f"k{i}", "pid": 1, "tid": 2, "ts": f"{100 + i}.000", "dur": 0.5,
                 "args": {"Task Type": "AI_CORE"}} for i in range(5)),
              {"ph": "i", "name": "mark", "pid": 1, "tid": 2, "ts": "103.000", "s": "t"},
              {"ph": "C", "name": "c", "pid": 1, "tid": 0, "ts": "101.000", "args": {"v": 1}}]
    if case == "a time skipped":
        events.append({"ph": "X", "name": "early", "pid": 1, "tid": 2, "ts": "-5.000", "dur": 1})
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    con = duckdb.connect()
    sqlfuncs.install(con)
    tl = TraceLoad(con.cursor(), "s_", path, tmp_path / "work", "trace.json")
    tl.read()
    if case == "events added":
        assert overlap.derive(tl.cur, "s_", 0) > 0
    assert (tl.slices_at_read is None) is (case == "a time skipped")
    counted = con.execute(SLICE_COUNT.format(p="s_")).fetchone()[0]
    assert tl.slice_count() == counted
    if case == "events added":
        assert counted > tl.slices_at_read[0] == 6
    else:
        assert counted == 6  # (the early one skipped)
    con.close()

def overview_args_note() -> str:
    from ascendscope.ingest.trace_read import DEEP_ARGS_NOTE
    return DEEP_ARGS_NOTE

def test_no_overview_for_a_rank_below_the_threshold(one_rank, tmp_path):
    disc = pipeline.prepare(one_rank, tmp_path / "x", Progress())
    out = tmp_path / "rank_00000.duckdb"
    progress = tmp_path / "rank_00000.bytes"
    pipeline.ingest_shard(disc.ranks, disc.root, out, src_path=str(one_rank), progress_path=str(progress))
    assert overview.read_note(progress) is None and not overview.path_for(out).exists()


def test_a_pending_rank_is_served_from_its_overview(one_rank, shard_and_overview, tmp_path):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    _, ov, note, progress = shard_and_overview
    store = RunStore(tmp_path / "data")
    run = store.create_run("big", str(one_rank))
    run_dir = store.run_dir(run.id)
    ingest_sharded(one_rank, run_dir, workers=1)
    publish_overview(run_dir, one_rank, ov, progress)
    manifest = read_manifest(run_dir)
    assert ready_shards(manifest) == {0: f"shards/{ov.name}"}
    assert partial_ranks(manifest) == {0: {"overview": True, "start_ns": note["start_ns"], "end_ns": note["end_ns"]}}
    store.set_status(run.id, "ingesting")
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir)))) as client:
        tracks = client.get(f"/api/runs/{run.id}/timeline/tracks").json()
        origin = int(tracks["origin_ns"])
        got = tracks["partial_ranks"]["0"]
        assert got["overview"] is True and got["loaded_start_ns"] == got["loaded_end_ns"]
        assert got["loaded_start_ns"] + origin == note["start_ns"]
        assert got["end_ns"] + origin == note["end_ns"] <= int(tracks["end_ns"])
        assert tracks["loaded_ranks"] == [0] and tracks["tracks"]
        info = client.get(f"/api/runs/{run.id}").json()
        assert info["pending_ranks"] == [0] and info["partial_ranks"] == [0]
        track = max(tracks["tracks"], key=lambda t: t["slice_count"])
        # zoomed in to a tenth of a bucket, the lane still shows its busy time, coarse: the overview's rows
        mid = (note["start_ns"] + note["end_ns"]) // 2
        for window in ({}, {"start_ns": mid, "end_ns": mid + note["bucket_ns"] // 10}):
            part = client.get(f"/api/runs/{run.id}/timeline/slices",
                              params={"track_id": track["track_id"], "width_px": 1000} | window).json()["tracks"][0]
            assert part["lod"] is True and part["count"] >= 1 and set(part["depth"]) == {0}
        # nothing of it is searched or opened: its slices are still coming
        hits = client.get(f"/api/runs/{run.id}/timeline/search", params={"q": "busy"}).json()
        assert hits["total"] == 0
        assert client.get(f"/api/runs/{run.id}/timeline/slices/{part['slice_id'][0]}").status_code == 404
        pin(run_dir, [])  # the shard is ready: the overview is no longer read
        after = client.get(f"/api/runs/{run.id}/timeline/tracks").json()
        assert after["partial_ranks"] == {}
        whole = client.get(f"/api/runs/{run.id}/timeline/slices", params={"track_id": track["track_id"],
                                                                           "width_px": 4000}).json()
        assert whole["tracks"][0]["count"] > 0 and max(whole["tracks"][0]["depth"]) >= 0


def test_the_overview_is_published_before_the_rank_is_nested(one_rank, tmp_path, monkeypatch):
    """The overview is computed before the rank is nested: the nesting may wait for it."""
    from ascendscope.ingest import trace

    nest = trace.TraceLoad._nest
    seen = {}

    def nest_after_the_overview(self, *args, **kwargs):
        progress = tmp_path / ".progress" / "rank_00000.bytes"
        deadline = time.monotonic() + 60
        while overview.read_note(progress) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["note"] = overview.read_note(progress)
        seen["nest_exists"] = self.cur.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [self.p.split(".")[-1] + "nest"]
        ).fetchone()[0]
        return nest(self, *args, **kwargs)

    monkeypatch.setattr(trace.TraceLoad, "_nest", nest_after_the_overview)
    shard, ov, note, _ = shard_task(one_rank, tmp_path)
    assert seen["note"] == note and note is not None and ov.is_file()
    assert seen["nest_exists"] == 0  # (the rank's own nesting had not begun)
    assert _rows(ov, "SELECT count(*) FROM tracks") == _rows(shard, "SELECT count(*) FROM tracks")


def test_the_overview_is_published_before_the_slices_are_made(one_rank, tmp_path, monkeypatch):
    """The overview needs only where the slices are (their spans, narrow rows): it is written before the slices
    with their names, categories and args are made and sorted (``{p}x``), the costliest statement after the read."""
    from ascendscope.ingest import trace

    sql = trace.TraceLoad.sql
    seen = {}

    def note_when_the_slices_are_made(self, template, *args, **kwargs):
        if template == trace.RAW_SLICES:
            seen["note"] = overview.read_note(tmp_path / ".progress" / "rank_00000.bytes")
        return sql(self, template, *args, **kwargs)

    monkeypatch.setattr(trace.TraceLoad, "sql", note_when_the_slices_are_made)
    shard, ov, note, _ = shard_task(one_rank, tmp_path)
    assert note is not None and seen["note"] == note and ov.is_file()
    # and the spans it was made from are gone with it: the shard holds no staging table
    assert not _rows(shard, "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE '%ov'")


@pytest.mark.parametrize("wait_bytes, waits", [(1, True), (1 << 50, False)])
def test_a_big_ranks_csvs_wait_for_its_overview_and_a_smaller_ranks_do_not(one_rank, tmp_path, monkeypatch,
                                                                           wait_bytes, waits):
    """A lone rank whose trace is big enough to likely have an overview reads its CSVs once the overview is
    written (its trace is read and its slices made on every core); a smaller one reads them beside its trace. The
    shard is the same either way."""
    from ascendscope.ingest import csvfiles

    monkeypatch.setattr(overview, "WAIT_BYTES", wait_bytes)
    load, write = csvfiles.CsvLoad.load, overview.write
    times: dict[str, list[float]] = {"csv": [], "overview": []}

    def timed_load(self):
        times["csv"].append(time.monotonic())
        return load(self)

    def timed_write(*args, **kwargs):
        time.sleep(0.3)  # (an overview that takes its time: a CSV that does not wait starts meanwhile)
        result = write(*args, **kwargs)
        times["overview"].append(time.monotonic())
        return result

    monkeypatch.setattr(csvfiles.CsvLoad, "load", timed_load)
    monkeypatch.setattr(overview, "write", timed_write)
    shard, ov, note, _ = shard_task(one_rank, tmp_path)
    assert note is not None and ov.is_file() and times["csv"] and len(times["overview"]) == 1
    assert (min(times["csv"]) >= times["overview"][0]) is waits
    reference, _, _, _ = shard_task(one_rank, tmp_path / "reference")
    for table in ("slices", "kernels", "operators", "flows"):
        sql = f"SELECT * FROM {table} ORDER BY ALL"
        assert _rows(shard, sql) == _rows(reference, sql), table


def test_csvs_bigger_than_the_trace_never_keep_it_from_starting(one_rank, tmp_path, monkeypatch):
    """The waiting tasks are queued after the trace, whatever their size: CSVs that look bigger than the trace
    (first in a biggest-first order) would otherwise take both of the task's threads and wait for ever."""
    import threading

    from ascendscope.ingest import readers

    size = readers.size
    monkeypatch.setattr(overview, "WAIT_BYTES", 1)
    monkeypatch.setattr(readers, "size", lambda kind, path: size(kind, path) * (1000 if "csv" in path.name else 1))
    done = []
    worker = threading.Thread(target=lambda: done.append(shard_task(one_rank, tmp_path)), daemon=True)
    worker.start()
    worker.join(60)
    assert done, "the shard task did not finish: its threads wait for an overview that cannot come"
    _, ov, note, _ = done[0]
    assert note is not None and ov.is_file()
