"""The readers' protocol and the records they pass to and from the pipeline (see :mod:`ingest.readers`).

A module of its own so that each reader imports it without importing the registry that imports the readers.
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
    split_read: bool = False  # a big JSON trace may be read as byte ranges on every core
    on_sliced: Callable | None = None  # (cursor, prefix): a trace's slices are made (``TraceRead.on_sliced``)


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

    # optional: a reader that has it stages its small ranks in groups (``ingest.stages``)
    # def stage_many(self, job: Job, kind: str, items: list[tuple[int, Path, str]]) -> dict[int, Staged | Exception]:
    #     """One kind of several ranks ((rank, path, display name)) into the stage's tables, each rank's rows as if
    #     it were alone: rank -> what its file gave, or the error that stopped it; raises when the kind fails."""
