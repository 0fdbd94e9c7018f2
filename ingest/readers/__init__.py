"""Readers: one module per profiler export format, behind one small protocol.

A reader knows the files its format writes (``find`` in a rank's output folder, ``find_loose`` for a file opened
on its own, ``find_ranks`` for a folder of its own layout such as msprof's ``PROF_*``) and stages each of them
(``stage``; ``stage_many``, where a reader has it, one kind of several small ranks at once: the text and db
exports) into the staging tables the text export fills, so that every derivation and view downstream is reused
unchanged:

* the trace events ``{prefix}ev_t`` (Chrome-trace shaped rows), then derived by ``ingest.trace.TraceLoad.derive``
  into tracks, nested slices, flows, counters and steps;
* the tables the CSV files give (``kernels``, ``memory_record`` …, made at ``Job.csv_prefix``), listed in
  ``Staged.tables``;
* communication rows in the shape of ``ingest.commfiles.COLUMNS``, in ``Staged.comm``.

A file kind in ``TIMELINE_KINDS`` yields a timeline: the pipeline schedules it like ``trace_view.json`` (its
writer waits for ``Job.on_nested``). A kind may stand for a group of files read as one (msprof writes a timeline
in per-iteration or sliced files): its path is then their folder, ``parts`` lists the files and ``label`` names
the group. The registry's order matters: the text export first (a rank with text-export files is read from those),
then the db export, msprof output, MindSpore's older ``profiler`` folder and plain Chrome traces; memory
snapshots (``_dump_snapshot`` pickles) last.
"""

from __future__ import annotations

from pathlib import Path

from . import chrome, dbexport, memsnap, mindspore, msprof, text
from .protocol import Found, FoundRank, Job, Reader, Staged

READERS: tuple[Reader, ...] = (text.READER, dbexport.READER, msprof.READER, mindspore.READER, chrome.READER,
                                memsnap.READER)
KINDS: dict[str, Reader] = {kind: reader for reader in READERS for kind in reader.kinds}
TIMELINE_KINDS: frozenset[str] = frozenset(k for reader in READERS for k in reader.timeline_kinds)
TIMELINE_ONLY: frozenset[str] = frozenset(k for reader in READERS for k in reader.timeline_only)


def claims(filename: str) -> bool:
    return any(reader.claims(filename) for reader in READERS)


def find(out_dir: Path) -> Found:
    """Every reader's files in a rank's output folder (each told what the readers before it took)."""
    found = Found()
    for reader in READERS:
        got = reader.find(out_dir, dict(found.files))
        found.files.update(got.files)
        found.notes.extend(got.notes)
    return found


def find_loose(path: Path) -> dict[str, Path]:
    for reader in READERS:
        kinds = reader.find_loose(path)
        if kinds:
            return kinds
    return {}


def find_ranks(folder: Path) -> list[FoundRank] | None:
    for reader in READERS:
        ranks = reader.find_ranks(folder)
        if ranks is not None:
            return ranks
    return None


def parts(kind: str, path: Path) -> list[Path]:
    """The files a kind's path stands for (itself, or the files of its group)."""
    reader = KINDS.get(kind)
    return reader.parts(kind, path) if reader is not None and hasattr(reader, "parts") else [path]


def label(kind: str, path: Path) -> str | None:
    """How to name a group of files after its folder (e.g. ``msprof_*.json``), or None for a single file."""
    reader = KINDS.get(kind)
    return reader.label(kind, path) if reader is not None and hasattr(reader, "label") else None


def size(kind: str, path: Path) -> int:
    return sum(p.stat().st_size for p in parts(kind, path))


def stage(job: Job, kind: str, path: Path) -> Staged:
    return KINDS[kind].stage(job, kind, path)


def batch_reader(kinds) -> Reader | None:
    """The one reader of all these file kinds when it stages a kind of several ranks at once (``stage_many``),
    else None."""
    found = {KINDS.get(kind) for kind in kinds}
    reader = found.pop() if len(found) == 1 else None
    return reader if hasattr(reader, "stage_many") else None


def stage_many(job: Job, kind: str, items: list[tuple[int, Path, str]]) -> dict[int, Staged | Exception]:
    """One file kind of several ranks at once (``items``: rank, path, display name): rank -> what its file gave, or
    the error that stopped it. Raises when the whole kind fails."""
    return KINDS[kind].stage_many(job, kind, items)
