"""Reader of PyTorch / torch_npu memory snapshots (``_dump_snapshot``'s pickle) into the ``mem_*`` tables.

Where a snapshot is found (docs/formats.md, "Memory snapshots"):

* opened alone (a ``.pickle`` / ``.pkl`` file, or a folder of them): each file is a rank of its own, numbered by a
  ``rank<N>`` in its name, else the first free id;
* inside a rank folder (``*_ascend_pt`` itself or its ``ASCEND_PROFILER_OUTPUT``): that rank's;
* beside rank folders (at most two levels above them): the rank its name numbers (``snapshot_rank3.pickle``), else
  the only rank folder in its own folder, else a rank of its own (a warning says it could not be matched)
  (:func:`attach`).

A file is a snapshot when its name ends in ``.pickle`` / ``.pkl`` and its first bytes are a pickle's that names
``segments`` or ``device_traces``. It is read by ``ingest.memsnap`` (never unpickled) and written straight into
the run's ``mem_*`` tables, one snapshot per rank (a second one in the same rank folder is named in a warning).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from ..duckmem import mib
from ..memsnap import load, pickles
from .protocol import Found, Job, Staged

KIND = "memory_snapshot"
SUFFIXES = (".pickle", ".pkl")
# DuckDB keeps the blocks it wrote cached up to its memory limit: a shard writing a big snapshot's rows (a few
# hundred MB of columns per GB of pickle) holds them beside the reader's memo. Its own SQL needs little, so such a
# shard gets this limit instead (docs/benchmarks.md: the whole ingest under 1.5 GB at 5 GB)
BIG_SNAPSHOT_BYTES = 512 << 20
BIG_SNAPSHOT_MEMORY_LIMIT = "400MB"
SNIFF_BYTES = 1 << 16
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


def is_snapshot(path: Path) -> bool:
    """A ``.pickle`` / ``.pkl`` file whose first bytes are a pickle's naming a snapshot's keys."""
    if not path.name.lower().endswith(SUFFIXES):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return False
    if not head or head[0] not in (0x80, 0x28, 0x7D, 0x5D):  # PROTO, or protocol 0/1's MARK, {, [
        return False
    return b"segments" in head or b"device_traces" in head


def rank_in_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


class MemorySnapshotReader:
    name = "memory snapshot"
    kinds = (KIND,)
    timeline_kinds = ()
    timeline_only = ()

    def claims(self, filename: str) -> bool:
        return filename.lower().endswith(SUFFIXES)

    def find(self, out_dir: Path, text_files: Mapping[str, Path]) -> Found:
        """A snapshot in ASCEND_PROFILER_OUTPUT or in the rank folder holding it."""
        found = Found()
        candidates = []
        for folder in (out_dir, out_dir.parent):
            try:
                candidates += sorted(p for p in folder.iterdir() if p.is_file() and is_snapshot(p))
            except OSError:
                continue
        if candidates:
            found.files[KIND] = candidates[0]
            for extra in candidates[1:]:
                found.notes.append((extra, f"not loaded: a second memory snapshot of this rank (one per rank is "
                                           f"read: {candidates[0].name})"))
        return found

    def find_loose(self, path: Path) -> dict[str, Path]:
        return {KIND: path} if is_snapshot(path) else {}

    def find_ranks(self, folder: Path) -> None:
        return None

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        try:
            row, warnings = load.load(job.cur, path, job.rank, job.display, on_progress=job.on_progress)
        except pickles.RefusedPickle as exc:
            raise ValueError(f"refused, not read: {exc}") from None
        except pickles.BadPickle as exc:
            raise ValueError(f"not a readable memory snapshot: {exc}") from None
        return Staged(rows=row["entries"], warnings=warnings)


READER = MemorySnapshotReader()


def shard_memory_limit(sources: list, limit: str) -> str:
    """The DuckDB memory limit of a shard of ``sources``: ``BIG_SNAPSHOT_MEMORY_LIMIT`` when one has a snapshot of
    ``BIG_SNAPSHOT_BYTES`` or more and ``limit`` is higher, else ``limit``."""
    big = any(KIND in s.files and s.files[KIND].stat().st_size >= BIG_SNAPSHOT_BYTES for s in sources)
    return BIG_SNAPSHOT_MEMORY_LIMIT if big and mib(limit) > mib(BIG_SNAPSHOT_MEMORY_LIMIT) else limit


def attach(ranks: list, loose: list[Path], root: Path) -> tuple[list[tuple[Path, int]], list[tuple[Path, str]]]:
    """Match snapshots found beside rank folders with their ranks (the module note). ``ranks``: the discovered
    ``RankSource`` s; returns ``(path, rank)`` for each matched file (already added to its rank's files) and the
    unmatched files with why, which the caller loads as ranks of their own."""
    by_rank = {src.rank: src for src in ranks}
    matched, unmatched = [], []
    for path in loose:
        src = by_rank.get(rank_in_name(path)) if rank_in_name(path) is not None else None
        if src is None:
            near = [s for s in ranks if _is_within(s.folder, path.parent)]
            if len(near) == 1:
                src = near[0]
        if src is None:
            unmatched.append((path, "a memory snapshot beside several rank folders whose name gives no rank "
                                    "(name it snapshot_rank<N>.pickle to put it with rank N): loaded as a rank of its "
                                    "own"))
        elif KIND in src.files:
            unmatched.append((path, f"a second memory snapshot for rank {src.rank} (it has "
                                    f"{src.files[KIND].name}): loaded as a rank of its own"))
        else:
            src.files[KIND] = path
            matched.append((path, src.rank))
    return matched, unmatched


def _is_within(folder: Path, parent: Path) -> bool:
    try:
        folder.relative_to(parent)
        return True
    except ValueError:
        return False
