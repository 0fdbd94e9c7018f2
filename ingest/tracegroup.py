"""Several ranks' trace_view.json read into one stage and derived together, each exactly as if it were alone.

Reading and deriving a trace costs about 40 DuckDB statements whatever its size; for a rank of a few hundred kB
that fixed cost is most of its ingest time. A group of small ranks is therefore read by one multi-file
``read_json`` (every event tagged with its file's rank) and derived by the same statements as one trace
(``ingest.trace``: every derivation is per rank). A file that needs no repair joins the fast read as it is, or
as the array ``tracefile.prepare`` copies out of it; when the fast read fails (a damaged event somewhere), each
file is read on its own with all of ``TraceLoad.read``'s repairs and messages, then appended to the stage.

A failure after reading (while deriving) fails the whole group: the pipeline then loads its ranks one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from . import overlap, tracefile
from .trace import EV_VIEW, TraceLoad, drop_stage


@dataclass
class RankTrace:
    """One rank's trace in a group: where its events are, and what reading them found."""

    rank: int
    path: Path
    display: str
    locator: TraceLoad  # places its events in its file, for warnings
    warnings: list[str] = field(default_factory=list)
    status: str = "loaded"
    error: Exception | None = None
    seq_base: int = 0  # the stage's seq of its first event


class TraceGroup:
    """Reads ``items`` ((rank, path, display name)) into the stage ``prefix`` and derives them."""

    def __init__(self, cur: duckdb.DuckDBPyConnection, prefix: str, items: list[tuple[int, Path, str]],
                 workdir: Path, on_progress=None, on_nested=None):
        self.cur, self.p, self.workdir = cur, prefix, workdir
        self.on_progress = on_progress or (lambda fraction: None)
        self.ranks = {r: RankTrace(r, path, display, TraceLoad(cur, prefix, path, workdir / f"t{i}", display, rank=r))
                      for i, (r, path, display) in enumerate(items)}
        first = items[0]
        self.tl = TraceLoad(cur, prefix, first[1], workdir, first[2], on_progress=self.on_progress,
                            on_nested=on_nested, rank=first[0])
        self.tl.locate = self._locate
        self.tl.DROP_EVENTS = True  # (nothing reads them after derive())
        self.added: dict[int, int] = {}

    def read(self) -> None:
        """Stage every trace that reads; a trace that does not gets its ``error``. Raises ValueError when none
        reads."""
        fast = []
        for t in self.ranks.values():
            try:
                prepared = tracefile.prepare(t.path, t.locator.workdir, understood=TraceLoad.UNDERSTOOD_KEYS)
            except tracefile.TraceFileError:
                fast = None  # (truncated files are salvaged by TraceLoad.read)
                break
            t.warnings.extend(prepared.notes)
            t.locator.array_start = prepared.array_start
            fast.append((t.rank, prepared.path))
        if fast is not None:
            try:
                self.tl._read_with_progress([p for _, p in fast], [r for r, _ in fast])
                self.tl._read_done()
            except duckdb.Error:
                fast = None
        if fast is None:
            self._read_one_by_one()
        bases = dict(self.cur.execute(f"SELECT rank, min(seq) FROM {self.p}ev GROUP BY rank").fetchall())
        for t in self.ranks.values():
            t.seq_base = int(bases.get(t.rank, 0))
        self.on_progress(TraceLoad.READ_SHARE)

    def _read_one_by_one(self) -> None:
        for t in self.ranks.values():
            t.warnings = []
        made = False
        for i, t in enumerate(self.ranks.values()):
            sub = TraceLoad(self.cur, f"{self.p}f{i}_", t.path, t.locator.workdir, t.display, rank=t.rank)
            try:
                sub.read()
            except (tracefile.TraceFileError, duckdb.Error, ValueError, OSError, UnicodeError) as exc:
                drop_stage(self.cur, sub.p)
                t.error, t.status = exc, "failed"
                continue
            t.locator, t.warnings, t.status = sub, list(sub.warnings), sub.status
            sub.warnings = []
            if made:
                self.cur.execute(f"INSERT INTO {self.p}ev_t BY NAME SELECT * FROM {sub.p}ev_t")
            else:
                self.cur.execute(f"CREATE OR REPLACE TABLE {self.p}ev_t AS SELECT * FROM {sub.p}ev_t")
                made = True
            drop_stage(self.cur, sub.p)
        if not made:
            first = next(iter(self.ranks.values()))
            raise ValueError(str(first.error)) from first.error
        self.cur.execute(EV_VIEW.format(p=self.p))

    def derive(self) -> None:
        """The derived Overlap Analysis lanes where a trace has none, then every derivation, for all ranks."""
        self.added = overlap.derive_ranks(self.cur, self.p)
        self.tl.derive()

    def _locate(self, rank: int, seq: int | None) -> str:
        t = self.ranks.get(rank)
        if t is None or seq is None:
            return ""
        return t.locator._where_seq(rank, seq - t.seq_base)

    def notes(self, rank: int) -> list[str]:
        """What reading and deriving found about ``rank``'s trace."""
        t = self.ranks[rank]
        found = self.tl.warnings if rank == self.tl.rank else []
        return t.warnings + found + self.tl.notes.get(rank, [])
