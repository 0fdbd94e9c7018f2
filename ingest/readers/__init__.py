"""Readers: one module per profiler export format, behind one small protocol.

A reader knows the files its format writes (``find`` in a rank's output folder, ``find_loose`` for a file opened
on its own, ``find_ranks`` for a folder of its own layout such as msprof's ``PROF_*``) and stages each of them
(``stage``) into the staging tables the text export fills, so that every derivation and view downstream is reused
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
then the db export, msprof output and plain Chrome traces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass
class Job:
    """Where and how one file of one rank is staged."""

    cur: object  # a DuckDB cursor of the run's connection (staging database attached as ``stage``)
    prefix: str  # staging table prefix of the rank, e.g. ``stage._r0_``
    csv_prefix: str  # where CSV-shaped tables go: the rank's staging prefix, or ``main.`` for a single rank
    rank: int
    display: str  # the file's name as shown in warnings
    workdir: Path  # scratch folder of the rank
    on_progress: Callable[[float], None] = lambda fraction: None
    on_nested: Callable[[], None] = lambda: None  # call once the timeline's tracks and slices are final
    split_read: bool = False  # a big JSON trace may be read as two halves on two cores


@dataclass
class Staged:
    """What staging one file produced."""

    rows: int | None = None  # source rows (or events) read
    status: str = "loaded"  # loaded | partial
    warnings: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # CSV-shaped tables made at ``Job.csv_prefix``
    comm: dict[str, list[dict]] = field(default_factory=dict)
    timeline: bool = False  # staged a timeline that the pipeline's writer appends
    overlap_source: str | None = None  # "trace" (the profiler's own lane) or "derived"


@dataclass
class Found:
    """A reader's files in one output folder, and what it noticed there (warnings)."""

    files: dict[str, Path] = field(default_factory=dict)
    notes: list[tuple[Path, str]] = field(default_factory=list)


@dataclass
class FoundRank:
    """One rank found in a folder of a reader's own layout (not an ``ASCEND_PROFILER_OUTPUT`` rank folder)."""

    folder: Path
    files: dict[str, Path] = field(default_factory=dict)
    rank: int | None = None
    rank_source: str = "fallback"
    device_id: int | None = None
    notes: list[tuple[Path, str]] = field(default_factory=list)


class Reader(Protocol):
    name: str
    kinds: tuple[str, ...]  # the file kinds it stages
    timeline_kinds: tuple[str, ...]  # those of them that yield a timeline
    timeline_only: tuple[str, ...]  # those of them that yield nothing else (no CSV-shaped or communication rows)

    def claims(self, filename: str) -> bool:
        """Whether a file of this name in ASCEND_PROFILER_OUTPUT belongs to this format (so discovery does not
        report it as unknown)."""

    def find(self, out_dir: Path, text_files: Mapping[str, Path]) -> Found:
        """This format's files of one rank's output folder; ``text_files`` are the text-export files found there."""

    def find_loose(self, path: Path) -> dict[str, Path]:
        """The kinds of a file found outside any rank folder (or opened on its own), or {} when not ours."""

    def find_ranks(self, folder: Path) -> list[FoundRank] | None:
        """The ranks of a folder laid out in this format (discovery then does not look inside), or None."""

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        """Stage one file; raises ValueError/OSError (with a plain message) when nothing of it is usable."""


from . import chrome, dbexport, msprof, text  # noqa: E402  (the registry needs the protocol above)

READERS: tuple[Reader, ...] = (text.READER, dbexport.READER, msprof.READER, chrome.READER)
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
