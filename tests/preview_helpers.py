"""A one-rank run as it is while its big rank ingests and its first time window is published (``ingest.preview``):
the shard task is run in this process with the preview's thresholds lowered, and the coordinator's step that
announces the preview in the manifest is taken on the run's manifest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ascendscope.ingest import pipeline, preview, shards
from ascendscope.ingest.pipeline import Progress
from ascendscope.ingest.shards import read_manifest
from tests.run_helpers import pin

WINDOW_SLICES = 400


def shard_task(src: Path, work: Path) -> tuple[Path, Path, dict | None, Path]:
    """The shard of the one rank of ``src`` and its preview, as a task writes them: (shard, preview, the
    announcement, the task's progress file)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(preview, "PREVIEW_MIN_SLICES", 10)
    mp.setattr(preview, "PREVIEW_SLICES", WINDOW_SLICES)
    try:
        disc = pipeline.prepare(src, work / "x", Progress())
        out = work / "shards" / "rank_00000.duckdb"
        out.parent.mkdir(parents=True)
        (work / ".progress").mkdir()
        progress = work / ".progress" / "rank_00000.bytes"
        pipeline.ingest_shard(disc.ranks, disc.root, out, src_path=str(src), progress_path=str(progress))
    finally:
        mp.undo()
    return out, preview.path_for(out), preview.read_note(progress), progress


def publish_preview(run_dir: Path, src: Path, pv: Path, progress: Path) -> dict:
    """``run_dir`` (ingested whole) pinned as while its rank is pending with the preview ``pv`` announced; returns
    the manifest entry."""
    pin(run_dir, [0])
    shutil.copy(pv, run_dir / "shards" / pv.name)
    (run_dir / ".progress").mkdir(exist_ok=True)
    announced = run_dir / ".progress" / progress.name
    shutil.copy(preview.note_for(progress), preview.note_for(announced))
    manifest = read_manifest(run_dir)
    entry = manifest["shards"][0]
    assert shards._take_preview(entry, announced) is True and shards._take_preview(entry, announced) is False
    shards._write_manifest(run_dir, manifest["shards"], src, "ingesting")
    return entry
