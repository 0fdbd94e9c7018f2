"""ascendscope: Ascend NPU profiling data as a dashboard, and from Python.

    import ascendscope

    run = ascendscope.open("/path/to/cluster_dir")    # ingests it once (into the data dir), then opens it
    run.steps()                                        # the Summary view's step breakdown, a pandas DataFrame
    run.kernels(rank=0).head(10)                       # the Operator view's top kernels
    run.sql("SELECT count(*) FROM slices")             # your own reading query over docs/schema.md

The subpackages are the dashboard itself: ``ascendscope.server`` (web server), ``ascendscope.ingest``,
``ascendscope.frontend``, ``ascendscope.sample_data``, ``ascendscope.bench``. Importing ``ascendscope`` and using
:func:`open` and the DataFrames imports no web framework; this module imports nothing heavy until it is used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascendscope.readonly import ReadOnlyQueryError
    from ascendscope.run import Run

__all__ = ["IngestFailed", "ReadOnlyQueryError", "Run", "open"]


def open(path: str | os.PathLike, *, data_dir: str | os.PathLike | None = None, reingest: bool = False,
         timeout_s: float | None = None, quiet: bool = False) -> Run:
    """Open a run: a run database (``*.duckdb``), a run folder (``manifest.json``) or a data-dir run is opened as
    it is, read-only; profiling data (an ``*_ascend_pt`` folder, a folder of ranks, a ``.zip``/``.tar.gz``, a
    trace file) is ingested first into ``data_dir`` (default ``$ASCENDSCOPE_DATA_DIR``, else ``~/.ascendscope``: the
    folder ``ascendscope serve`` shows), once — an unchanged source is reused unless ``reingest``. Raises
    ``FileNotFoundError``, :class:`IngestFailed` (with the run's error), or ``TimeoutError`` past ``timeout_s``."""
    from ascendscope.locate import locate
    from ascendscope.run import Run

    return Run(locate(path, data_dir=data_dir, reingest=reingest, timeout_s=timeout_s, quiet=quiet))


def __getattr__(name: str):
    if name == "Run":
        from ascendscope.run import Run

        return Run
    if name == "ReadOnlyQueryError":
        from ascendscope.readonly import ReadOnlyQueryError

        return ReadOnlyQueryError
    if name == "IngestFailed":
        from ascendscope.locate import IngestFailed

        return IngestFailed
    raise AttributeError(f"module 'ascendscope' has no attribute {name!r}")
