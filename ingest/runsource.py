"""Is this a run? The one answer of ``ascendscope ingest``, ``ascendscope serve PATH``, an upload and
``ascendscope.open()`` (``pipeline.prepare``, ``server/cli.py`` and ``server/uploads.py`` all call :func:`find_run`).

A folder (an archive once extracted, or the folder of a single trace file) is a run when it holds any of:

* ranks of any format discovery finds (``ingest.discover``): rank folders, ``PROF_*`` folders, trace files,
  profiler databases or memory snapshot pickles;
* msServiceProfiler's parsed output (``ingest.serving.find``: its CSVs, its ``profiler.db`` or both, with or
  without ``chrome_tracing.json``): a run of no ranks whose Serving view has the data;
* msprof-analyze's ``cluster_analysis_output`` (``ingest.cluster.find_cluster_dir``): a run of no ranks whose
  Cluster view has the data;
* MindIE / vLLM-Ascend expert dumps (``ingest.experts.find``): a run of no ranks whose Cluster view has the expert
  load.

Anything else raises :class:`NoProfilingData`, naming the path, what was expected and the first problems discovery
met. Once ingested, a run that loaded nothing a view can show fails too (``server.workerprocess.nothing_loaded``).
"""

from __future__ import annotations

from pathlib import Path

from . import experts, serving
from .cluster import find_cluster_dir
from .discover import Discovery, discover

EXPECTED = ("*_ascend_pt folders with ASCEND_PROFILER_OUTPUT, PROF_* folders, trace files, msServiceProfiler "
            "output, cluster_analysis_output, expert dumps or memory snapshot pickles")
LISTED_PROBLEMS = 5


class NoProfilingData(Exception):
    """The path holds nothing ascendscope reads; ``warnings``: what discovery met on the way."""

    def __init__(self, message: str, warnings: list | None = None):
        super().__init__(message)
        self.warnings = list(warnings or [])


def find_run(root: str | Path, shown: str | None = None) -> Discovery:
    """The run at ``root`` (a folder or a trace file; an archive is extracted first): its discovery, whose ranks
    may be none (serving, cluster or expert output alone). ``shown``: how the error names it (default: the path)."""
    root = Path(root)
    disc = discover(root)
    if disc.ranks or serving.find(root):
        return disc
    if find_cluster_dir(root) is not None:
        # msprof-analyze's output alone: a run of no ranks whose Cluster view reads that folder
        disc.warn(None, "cluster_analysis_output", "no rank folders beside it: only the Cluster view has data")
        return disc
    if experts.find(root):  # expert dumps alone: a run of no ranks (its Cluster view's heat map)
        disc.warn(None, "expert dumps", "no rank folders beside them: only the expert load has data")
        return disc
    detail = "; ".join(f"{f}: {m}" for _, f, m in disc.warnings[:LISTED_PROBLEMS])
    raise NoProfilingData(f"no profiling data in {shown or root} (expected {EXPECTED})"
                          + (f" — {detail}" if detail else ""), disc.warnings)
