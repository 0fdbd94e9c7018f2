"""Sharded ingest (issues #11, #17): a run as shards (one per big rank, small ranks together) + cluster.duckdb +
manifest.json.

A sharded run read through ``shards.connect`` holds the same rows as the single-file run of the same source, ids
aside (each rank's ids are shifted by one constant, into its own range) and the level-of-detail tables aside
(each shard has its own widths; each equals its naive SQL); a failed shard leaves the others; a resumed ingest
keeps what is still good. The executors are tested in test_shards_executors.py, the command in test_shards_cli.py.

Tests that only read a run share the module's two runs of the small generated one (``per_rank``, ``grouped``).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest import shards
from ascendscope.ingest.pipeline import NoProfilingData, rank_id_bases
from ascendscope.ingest.shards import connect, ingest_sharded, read_manifest
from ascendscope.sample_data.generate import generate_run
from ascendscope.server.runs import RunStore
from tests.samples import SAMPLE_RUNS
from tests.shard_helpers import assert_same_run, assert_shard_lod_is_naive, dump_run, need, small_run
from tests.shared_runs import single_file

BUNDLED = Path(__file__).resolve().parents[2] / "sample_data" / "bundled"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return small_run(tmp_path_factory.mktemp("gen"))


@pytest.fixture(scope="module")
def per_rank(generated, tmp_path_factory) -> tuple[Path, dict]:
    """``(run folder, summary)``: ``generated`` sharded a shard per rank on two workers (tests only read it)."""
    out = tmp_path_factory.mktemp("per-rank") / "run"
    return out, ingest_sharded(generated, out, workers=2, group_bytes=0)


@pytest.fixture(scope="module")
def grouped(generated, tmp_path_factory) -> tuple[Path, dict]:
    """``(run folder, summary)``: ``generated`` sharded as the server does it on two workers, its three small
    ranks in one shard (tests only read it)."""
    out = tmp_path_factory.mktemp("grouped") / "run"
    return out, ingest_sharded(generated, out, workers=2)


LAYOUTS = pytest.mark.parametrize("layout", ["per_rank", "grouped"], ids=["a shard per rank", "ranks together"])

# samples the session already holds (tests/conftest.py), taken from there rather than ingested again: their
# single-file ingest (the same ingest_path of the same folder), or their run sharded as the server does it
SESSION_SINGLE = {"text_level0": "level0_db", "text_level1": "level1_db"}
SESSION_SHARDED = {"text_level2": ("view_runs", "level2"), "st4": ("view_runs", "st4"),
                   "fixtures": ("view_runs", "fixtures"), "db_level0": ("db_runs", "db_level0"),
                   "db_level1": ("db_runs", "db_level1")}


@pytest.mark.parametrize("sample", ["generated", "bundled", *SAMPLE_RUNS])
def test_sharded_run_equals_single_file(sample, generated, grouped, tmp_path, request):
    """Every sample (real, or its twin) through the server's path: the same rows as the single-file ingest."""
    src = need({"generated": generated, "bundled": BUNDLED, **SAMPLE_RUNS}[sample])
    if sample in SESSION_SINGLE:
        single = request.getfixturevalue(SESSION_SINGLE[sample])
    else:  # (other modules ingest most of these samples as one file too: tests/shared_runs.py)
        single = single_file(request.getfixturevalue("tmp_path_factory"), src)[0]
    if sample == "generated":  # the module's run of it, sharded on two workers
        run = grouped[0]
    elif sample in SESSION_SHARDED:
        fixture, name = SESSION_SHARDED[sample]
        run = RunStore(request.getfixturevalue("runs").data_dir).run_dir(request.getfixturevalue(fixture)[name])
    else:
        run = tmp_path / "run"
        ingest_sharded(src, run, workers=2)
    entries = read_manifest(run)["shards"]
    assert [e["status"] for e in entries] == ["ready"] * len(entries)
    with duckdb.connect(str(single), read_only=True) as a:
        b, loaded = connect(run)
        try:
            assert loaded == [r for (r,) in b.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()] == \
                [r for (r,) in a.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
            assert_same_run(a, b)
        finally:
            b.close()
    for path in (run / "shards").glob("*.duckdb"):
        assert_shard_lod_is_naive(path)


@LAYOUTS
def test_shard_ids_are_in_their_ranks_range(request, layout):
    run = request.getfixturevalue(layout)[0]
    entries = read_manifest(run)["shards"]
    assert len(entries) == (3 if layout == "per_rank" else 1)
    for entry in entries:
        with duckdb.connect(str(run / entry["file"]), read_only=True) as con:
            for rank in entry["ranks"]:
                bases = rank_id_bases(rank)
                for sql, base, span in (("SELECT min(track_id), max(track_id) FROM tracks", bases.track, 1 << 16),
                                        ("SELECT min(slice_id), max(slice_id) FROM slices", bases.slice, 1 << 36),
                                        ("SELECT min(flow_id), max(flow_id) FROM flows", bases.slice, 1 << 36)):
                    lo, hi = con.execute(sql.replace("FROM tracks", "FROM tracks WHERE rank = ?")
                                         .replace("FROM slices", "FROM slices WHERE rank = ?")
                                         .replace("FROM flows", "FROM flows WHERE rank = ?"), [rank]).fetchone()
                    assert base < lo <= hi < base + span, sql
    assert rank_id_bases(2).slice == 2 << 36 and (rank_id_bases(32767).slice + (1 << 36)) <= 2 ** 53


@LAYOUTS
def test_every_shards_lod_equals_its_naive_sql(request, layout):
    """Each shard summarises its own slices at its own widths (it is complete the moment it is written); the
    server picks a level per rank."""
    paths = sorted((request.getfixturevalue(layout)[0] / "shards").glob("*.duckdb"))
    assert len(paths) == (3 if layout == "per_rank" else 1)
    for path in paths:
        assert_shard_lod_is_naive(path)


def test_manifest_and_summary(generated, per_rank, grouped):
    run, summary = per_rank
    manifest = read_manifest(run)
    assert manifest["format_version"] == shards.FORMAT_VERSION == 2 and manifest["source"] == str(generated)
    assert manifest["status"] == "complete" and manifest["ranks"] == {"ready": 3, "pending": 0, "failed": 0,
                                                                      "total": 3}
    assert [e["ranks"] for e in manifest["shards"]] == [[0], [1], [2]]
    for e in manifest["shards"]:
        assert e["status"] == "ready" and e["file"] == f"shards/rank_{e['ranks'][0]:05d}.duckdb"
        assert e["bytes"] == (run / e["file"]).stat().st_size
        assert e["bytes"] < 2 << 20  # a small rank's shard is written in small blocks (default blocks: ~7 MB)
        assert len(e["source"]) == 32 and e["counts"]["slices_per_kind"]
    assert summary["ranks"] == [0, 1, 2] and summary["slices_per_kind"]
    assert [s["rank"] for s in summary["shards"]] == [0, 1, 2]
    assert all(s["seconds"] > 0 for s in summary["shards"])
    (entry,) = read_manifest(grouped[0])["shards"]
    assert entry["ranks"] == [0, 1, 2] and entry["file"] == "shards/ranks_00000-00002.duckdb"
    assert {k: v for k, v in grouped[1].items() if k not in ("seconds", "shards")} == \
        {k: v for k, v in summary.items() if k not in ("seconds", "shards")}
    for folder in (run, grouped[0]):
        leftovers = [p.name for p in folder.rglob("*") if ".tmp-" in p.name or p.name.startswith(".work")]
        assert leftovers == []


def test_failed_shard_leaves_the_others_and_says_why(generated, tmp_path):
    """A shard that cannot be written (here: a folder stands where it goes) is a failed entry with its error and
    a warning naming the rank's folder; the other ranks load."""
    out = tmp_path / "run"
    (out / "shards" / "rank_00001.duckdb").mkdir(parents=True)
    (out / "shards" / "rank_00001.duckdb" / "keep").write_text("x")
    summary = ingest_sharded(generated, out, workers=2, group_bytes=0)
    manifest = read_manifest(out)
    by_rank = {e["ranks"][0]: e for e in manifest["shards"]}
    assert by_rank[1]["status"] == "failed" and manifest["ranks"]["failed"] == 1
    assert "rank_00001.duckdb" in by_rank[1]["error"]
    assert by_rank[0]["status"] == by_rank[2]["status"] == "ready"
    assert summary["ranks"] == [0, 1, 2]  # its small files are in the cluster tables: the Cluster view lists it
    assert any(w["rank"] == 1 and w["file"] == "rank1_ascend_pt" and "rank_00001.duckdb" in w["message"]
               for w in summary["warnings"])
    con, loaded = connect(out)
    try:
        assert loaded == [0, 2]
        assert con.execute("SELECT DISTINCT rank FROM slices ORDER BY rank").fetchall() == [(0,), (2,)]
        assert con.execute("SELECT count(*) FROM warnings WHERE rank = 1").fetchone()[0] == 1
    finally:
        con.close()


def test_corrupt_trace_of_one_rank_is_a_warning_of_its_shard(generated, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(generated, src)
    trace = src / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2] + b"\x00garbage")
    summary = ingest_sharded(src, tmp_path / "run", workers=2)  # the three ranks share a shard
    assert summary["ranks"] == [0, 1, 2]
    assert any(w["rank"] == 1 and w["file"].endswith("trace_view.json") for w in summary["warnings"])
    (entry,) = read_manifest(tmp_path / "run")["shards"]
    assert entry["status"] == "ready" and entry["warnings"] >= 1
    con, _ = connect(tmp_path / "run")
    try:
        assert con.execute("SELECT count(*) FROM slices WHERE rank = 0").fetchone()[0] > 0
        assert con.execute("SELECT count(*) FROM warnings WHERE rank = 1 AND file LIKE '%trace_view.json'"
                           ).fetchone()[0] >= 1
    finally:
        con.close()


def test_connect_attaches_only_the_ranks_asked_for(per_rank):
    con, loaded = connect(per_rank[0], [1, 7])
    try:
        assert loaded == [1]
        dbs = {d for (d,) in con.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal"
                                         ).fetchall()}
        assert dbs == {"memory", "cluster", "r1"}  # a shard is attached as r<its first rank>
        assert con.execute("SELECT DISTINCT rank FROM tracks").fetchall() == [(1,)]
        # the run-wide tables still list every rank
        assert con.execute("SELECT count(*) FROM ranks").fetchone()[0] == 3
    finally:
        con.close()


def test_nothing_found_writes_no_manifest_and_removes_an_old_one(grouped, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(grouped[0], out)  # a run already there
    assert (out / "manifest.json").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NoProfilingData):
        ingest_sharded(empty, out, workers=1)
    assert not (out / "manifest.json").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".work")]


def test_reingest_removes_shards_of_ranks_gone(generated, per_rank, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(per_rank[0], out)  # a run of three ranks already there
    src = tmp_path / "src"
    shutil.copytree(generated / "rank0_ascend_pt", src / "rank0_ascend_pt")
    ingest_sharded(src, out, workers=1, group_bytes=0)
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["rank_00000.duckdb"]
    assert [e["ranks"] for e in json.loads((out / "manifest.json").read_text())["shards"]] == [[0]]


def test_cluster_tables_past_the_row_threshold_are_written_in_default_blocks(generated, grouped, tmp_path,
                                                                             monkeypatch):
    """Small blocks keep a small run's cluster.duckdb small; a big one is written in default blocks (faster to
    checkpoint on every rewrite). Either way it holds the same rows."""
    def block_size(out: Path) -> int:
        with duckdb.connect(str(out / "cluster.duckdb"), read_only=True) as con:
            return con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]

    monkeypatch.setattr(shards, "CLUSTER_BIG_ROWS", 0)
    ingest_sharded(generated, tmp_path / "big", workers=2)  # as ``grouped``, which is small
    assert block_size(grouped[0]) == 16 << 10 and block_size(tmp_path / "big") == 256 << 10
    assert (grouped[0] / "cluster.duckdb").stat().st_size < (tmp_path / "big" / "cluster.duckdb").stat().st_size
    small, big = dump_run(grouped[0]), dump_run(tmp_path / "big")
    assert small == big and any(k.startswith("cluster.duckdb:") for k in small)


def test_a_lone_rank_gets_every_core(tmp_path, monkeypatch):
    """One rank on a pool of two would parse on one core beside an idle worker (1 rank: 9.3 s sharded against
    5.1 s as one file): the pool has no more processes than ranks, and the rank's DuckDB gets the cores."""
    src = tmp_path / "src"
    generate_run(src, ranks=1, steps=1, ops_per_step=5)
    seen = {"threads": []}
    real = shards.make_executor

    def spy(kind, *, workers=None, ray_address=None, nice=0):
        seen["workers"] = workers
        runner = real(kind, workers=workers, ray_address=ray_address, nice=nice)
        start = runner.start

        def recording_start(fn, calls, order=None):
            seen["threads"] += [c["threads"] for c in calls]
            return start(fn, calls, order)

        runner.start = recording_start
        return runner

    monkeypatch.setattr(shards, "make_executor", spy)
    monkeypatch.setattr(shards.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(shards, "THREADED_BYTES", 1)  # (as a big rank: this one is small)
    summary = ingest_sharded(src, tmp_path / "run", workers=2)
    assert summary["ranks"] == [0]
    assert seen["workers"] == 1 and set(seen["threads"]) == {2}
    # a small shard's statements are mostly planning: one thread each (its task keeps two cursors busy)
    monkeypatch.setattr(shards, "THREADED_BYTES", 256 << 20)
    seen["threads"] = []
    ingest_sharded(src, tmp_path / "small", workers=2)
    assert seen["workers"] == 1 and seen["threads"] == [1]


def test_ready_shards_of_an_unchanged_source_are_kept(generated, tmp_path):
    """Ingesting again into the folder keeps every shard made from the same files (a resumed ingest does not
    redo finished ranks), redoes the one whose files changed, and reuses nothing made by another version."""
    src = tmp_path / "src"
    shutil.copytree(generated, src)
    out = tmp_path / "run"
    first = ingest_sharded(src, out, workers=2, group_bytes=0)
    assert first["reused"] == 0
    stats = {p.name: p.stat() for p in (out / "shards").glob("*.duckdb")}
    again = ingest_sharded(src, out, workers=2, group_bytes=0)
    assert again["reused"] == 3
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "shards").glob("*.duckdb")} == \
        {name: (st.st_ino, st.st_mtime_ns) for name, st in stats.items()}
    assert {k: v for k, v in again.items() if k not in ("seconds", "reused", "shards")} == \
        {k: v for k, v in first.items() if k not in ("seconds", "reused", "shards")}
    csv = src / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    csv.write_text(csv.read_text() + "\n")
    changed = ingest_sharded(src, out, workers=2, group_bytes=0)
    assert changed["reused"] == 2
    assert (out / "shards" / "rank_00001.duckdb").stat().st_mtime_ns != stats["rank_00001.duckdb"].st_mtime_ns
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["schema_version"] = 0  # a manifest another version wrote: nothing of it is trusted
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert ingest_sharded(src, out, workers=2, group_bytes=0)["reused"] == 0


def test_shards_extracted_from_an_archive_are_kept_too(generated, tmp_path):
    """An archive is extracted afresh each time (new file times): its own size and time say it is the same."""
    import zipfile

    zipped = tmp_path / "run.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for path in sorted(generated.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(generated))
    ingest_sharded(zipped, tmp_path / "run", workers=1)
    assert ingest_sharded(zipped, tmp_path / "run", workers=1)["reused"] == 1


def test_the_group_size_makes_two_even_tasks_per_worker_within_bounds(tmp_path):
    """A sharded ingest's default group size: the smallest that packs the run's ranks into at most 2 groups per
    worker (so they come out even: two full rounds, no small last task keeping one worker busy alone), but at
    least 32 MiB (small runs keep a shard per big-enough rank) and at most 128 MiB (wide runs still spread over
    many tasks); at most 256 ranks a group. Files are sparse."""
    from ascendscope.ingest.discover import RankSource
    from ascendscope.ingest.pipeline import GROUP_BYTES, GROUP_BYTES_MAX, group_target, plan_groups

    def ranks(n: int, mb: float, bigger: dict | None = None) -> list[RankSource]:
        out = []
        for r in range(n):
            path = tmp_path / f"{n}x{mb}x{len(bigger or {})}" / f"r{r}" / "trace_view.json"
            if not path.exists():
                path.parent.mkdir(parents=True)
                with open(path, "wb") as fh:
                    fh.truncate(int((bigger or {}).get(r, mb) * 2**20))
            out.append(RankSource(folder=path.parent, files={"trace_view": path}, rank=r))
        return out

    def sizes(run: list[RankSource], workers: int) -> list[int]:
        return [len(g) for g in plan_groups(run, group_target(run, workers))]

    assert group_target(ranks(3, 19), 2) == GROUP_BYTES  # the resume test's run: three shards
    assert sizes(ranks(3, 19), 2) == [1, 1, 1]
    wide = ranks(64, 12)
    assert group_target(wide, 4) == 96 * 2**20 and sizes(wide, 4) == [8] * 8  # was 32 two-rank tasks at 32 MiB
    assert sizes(wide, 2) == [10] * 6 + [4]  # 16 ranks (192 MiB) would pass the upper bound
    assert sizes(ranks(1000, 0.36), 4) == [125] * 8  # (greedy at 1/8 of the input: 8 of 124 and one of 8)
    assert sizes(ranks(1000, 0.2), 2) == [250] * 4  # two rounds of two tasks on 2 cores
    assert sizes(ranks(1000, 0.2), 16) == [160] * 6 + [40]  # 32 groups would be under 32 MiB each
    assert sizes(ranks(10, 20), 4) == [2] * 5  # 8 groups would leave a rank alone beside pairs
    uneven = ranks(40, 1, bigger={0: 20, 1: 20})
    assert len(sizes(uneven, 4)) <= 8 and sum(sizes(uneven, 4)) == 40
    assert group_target(ranks(400, 10), 2) == GROUP_BYTES_MAX
    assert group_target(ranks(400, 10), 64) == 40 * 2**20  # at most 128 groups: 4 ranks each (3 would make 134)


def test_a_freed_worker_starts_its_next_shard_while_the_cluster_tables_are_rewritten(tmp_path, monkeypatch):
    """The cluster tables are rewritten on a thread of their own as shards finish: the worker a shard freed
    starts the next one meanwhile (it used to wait for the rewrite, ~0.7 s each at 1,000 ranks)."""
    src, out = tmp_path / "src", tmp_path / "run"
    generate_run(src, ranks=3, steps=1, ops_per_step=5)
    monkeypatch.setattr(shards, "MIN_REWRITE_S", 0.0)
    monkeypatch.setattr(shards, "REWRITE_FACTOR", 0)
    seen = []
    real = shards.ClusterTables.write

    def write_once_the_next_shard_runs(self, final=False):
        if threading.current_thread().name.startswith("cluster-write"):
            deadline = time.monotonic() + 60
            while not any((out / "shards").glob("*.tmp-*")) and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.append(time.monotonic() < deadline)
        return real(self, final)

    monkeypatch.setattr(shards.ClusterTables, "write", write_once_the_next_shard_runs)
    summary = ingest_sharded(src, out, workers=1, group_bytes=0)
    assert [s["status"] for s in summary["shards"]] == ["ready"] * 3
    assert seen and all(seen)
    manifest = read_manifest(out)
    assert manifest["status"] == "complete" and all(e["status"] == "ready" for e in manifest["shards"])


def test_the_first_shards_to_finish_are_published_at_once(tmp_path, monkeypatch):
    """However long the rewrites are spaced, the first shards to finish are published as soon as they are
    collected (the first rank opens then), not one spacing after the small files; later ones wait their turn."""
    src, out = tmp_path / "src", tmp_path / "run"
    generate_run(src, ranks=3, steps=1, ops_per_step=5)
    monkeypatch.setattr(shards, "MIN_REWRITE_S", 3600.0)
    published = []
    real = shards._write_manifest

    def note(out_dir, entries, src_path, status, timing=None):
        if threading.current_thread().name.startswith("cluster-write"):
            published.append([e["status"] for e in entries])
        return real(out_dir, entries, src_path, status, timing)

    monkeypatch.setattr(shards, "_write_manifest", note)
    summary = ingest_sharded(src, out, workers=1, group_bytes=0)
    assert [s["status"] for s in summary["shards"]] == ["ready"] * 3
    assert len(published) == 1 and "ready" in published[0] and "pending" in published[0], published
