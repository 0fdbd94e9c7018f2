"""Reader of MindSpore's profiler output (docs/formats.md, "MindSpore output").

MindSpore 2.3 and later write a ``{worker}_{pid}_{timestamp}_ascend_ms`` folder per rank whose
``ASCEND_PROFILER_OUTPUT`` holds torch_npu's files under torch_npu's names: discovery takes it for a rank folder
and the text-export reader reads it. What differs is data, not files, and is known where it is used: the
framework lane is the ``MindSpore`` process (and ``CPU OP``), a framework lane like torch_npu's ``Python``
(``ingest.trace``'s lane kinds); its step records are ``Python::PythonObserved::ProfilerStep#N``
(``ingest.trace.STEP_NAME``); ``memory_record.csv``'s components are ``MindSpore`` / ``MindSpore+GE``; the
profiler level is under ``profiler_parameters`` in ``profiler_info_{rank}.json`` (``ingest.pipeline``).

This module reads the older layout, MindSpore 2.0-2.2's ``profiler`` folder (the profiler's ``output_path``
plus ``profiler``): MindSpore's own summaries, ``ascend_timeline_display_{rank}.json`` (times in µs from the
first task, not epoch; lanes known only by ``process_labels``) and ``*_intermediate_*`` / ``*_raw_*`` CSVs,
beside the CANN msprof ``PROF_*`` folders they were made from. The ``PROF_*`` folders hold the same tasks with
epoch times, so the ranks are read from them (``ingest.readers.msprof``, which names each rank by its device's
``rank_id``); the summaries are reported as not read, by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from . import msprof
from .protocol import Found, FoundRank, Job, Staged

TIMELINE = re.compile(r"^ascend_timeline_display_(\d+)\.json$")
INFO = re.compile(r"^profiler_info_(\d+)\.json$")


class MindSporeReader:
    name = "MindSpore output"
    kinds: tuple[str, ...] = ()  # what it finds is staged by the msprof reader
    timeline_kinds: tuple[str, ...] = ()
    timeline_only: tuple[str, ...] = ()

    def claims(self, filename: str) -> bool:
        return False  # 2.3+ writes torch_npu's file names into ASCEND_PROFILER_OUTPUT

    def find(self, out_dir: Path, text_files: Mapping[str, Path]) -> Found:
        return Found()

    def find_loose(self, path: Path) -> dict[str, Path]:
        return {}

    def find_ranks(self, folder: Path) -> list[FoundRank] | None:
        """The ranks of a MindSpore 2.0-2.2 ``profiler`` folder: those of its ``PROF_*`` folders."""
        try:
            entries = sorted(folder.iterdir()) if folder.is_dir() else []
        except OSError:
            return None
        timelines = {int(m.group(1)): p for p in entries if (m := TIMELINE.match(p.name)) and p.is_file()}
        if not timelines:
            return None
        ranks: list[FoundRank] = []
        for child in entries:
            if child.is_dir() and not child.is_symlink():
                ranks += msprof.READER.find_ranks(child) or []
        if not ranks:
            return [FoundRank(folder=folder, notes=[(folder, "MindSpore profiler folder without a PROF_* folder "
                                                             "that msprof exported: nothing to read")])]
        files = [p.name for p in entries if p.is_file() and not INFO.match(p.name)]
        for rank in ranks:
            own = [f for f in files if re.search(rf"_{rank.rank}(?:_|\.)", f)]
            note = (f"MindSpore's own summaries are not read ({len(own)} files: {', '.join(own[:6])}"
                    f"{' …' if len(own) > 6 else ''}): their times count from the first task; the rank is read from "
                    "the msprof PROF_* output they were made from")
            if rank.rank not in timelines:
                note += f" (no ascend_timeline_display_{rank.rank}.json names this rank)"
            rank.notes.append((folder, note))
        return ranks

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        raise ValueError(f"not a MindSpore file kind: {kind}")


READER = MindSporeReader()
