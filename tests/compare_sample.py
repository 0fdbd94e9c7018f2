"""Runs the Compare tests add to a run store beside the real NPU samples:

* the real GPU Kineto trace (``hta_gpu_kineto_nonascend/trace_filter``: ``ProfilerStep#N`` cpu_ops, GPU stream
  lanes, no Overlap Analysis lane of its own (one is derived from its kernels), no kernel_details.csv), ingested
  as it is;
* a run without steps: a copy of an ingested run with its ``steps`` and ``step_trace`` rows deleted, so that its
  breakdown is the Overlap Analysis lane's over the whole trace and its timeline aligns on the trace start.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REAL_SAMPLES

KINETO = REAL_SAMPLES / "hta_gpu_kineto_nonascend" / "trace_filter"


def add_kineto_run(data_dir: Path) -> str:
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.server.runs import RunStore

    if not KINETO.is_dir():
        pytest.skip(f"real sample {KINETO} not found")
    store = RunStore(data_dir)
    run = store.create_run("kineto-gpu", str(KINETO))
    ingest_path(KINETO, store.db_path(run.id))
    store.set_status(run.id, "ready")
    return run.id


def add_stepless_run(data_dir: Path, db: Path) -> str:
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    run = store.create_run("no-steps", "no-steps")
    shutil.copy(db, store.db_path(run.id))
    with duckdb.connect(str(store.db_path(run.id))) as conn:
        conn.execute("DELETE FROM steps")
        conn.execute("DELETE FROM step_trace")
    store.set_status(run.id, "ready")
    return run.id
