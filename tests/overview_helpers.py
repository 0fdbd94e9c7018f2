"""A one-rank run as it is while its big rank ingests and its overview is published (``ingest.overview``): the
shard task is run in this process with the overview's threshold lowered, and the coordinator's step that announces
the overview in the manifest is taken on the run's manifest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ascendscope.ingest import overview, pipeline, shards
from ascendscope.ingest.pipeline import Progress
from ascendscope.ingest.shards import read_manifest
from tests.run_helpers import pin


def shard_task(src: Path, work: Path, batch: int | None = None) -> tuple[Path, Path, dict | None, Path]:
    """The shard of the one rank of ``src`` and its overview, as a task writes them: (shard, overview, the
    announcement, the task's progress file). ``batch``: the overview reads this many slices at a time."""
    mp = pytest.MonkeyPatch()
    mp.setattr(overview, "OVERVIEW_MIN_SLICES", 10)
    if batch is not None:
        mp.setattr(overview, "BATCH_SLICES", batch)
    try:
        disc = pipeline.prepare(src, work / "x", Progress())
        out = work / "shards" / "rank_00000.duckdb"
        out.parent.mkdir(parents=True)
        (work / ".progress").mkdir()
        progress = work / ".progress" / "rank_00000.bytes"
        pipeline.ingest_shard(disc.ranks, disc.root, out, src_path=str(src), progress_path=str(progress))
    finally:
        mp.undo()
    return out, overview.path_for(out), overview.read_note(progress), progress


def publish_overview(run_dir: Path, src: Path, ov: Path, progress: Path) -> dict:
    """``run_dir`` (ingested whole) pinned as while its rank is pending with the overview ``ov`` announced;
    returns the manifest entry."""
    pin(run_dir, [0])
    shutil.copy(ov, run_dir / "shards" / ov.name)
    (run_dir / ".progress").mkdir(exist_ok=True)
    announced = run_dir / ".progress" / progress.name
    shutil.copy(overview.note_for(progress), overview.note_for(announced))
    manifest = read_manifest(run_dir)
    entry = manifest["shards"][0]
    assert shards._take_overview(entry, announced) is True and shards._take_overview(entry, announced) is False
    shards._write_manifest(run_dir, manifest["shards"], src, "ingesting")
    return entry
