"""Where the tests find their sample data: ``../shared/real_samples`` when it is beside the checkout (or where
``ASCENDSCOPE_REAL_SAMPLES`` points), else the generated twin tree of ``tests/twins.py``, laid out the same way.

``REAL_SAMPLES`` is that folder either way; ``HAVE_REAL`` says which it is. A test that checks the real data's
own numbers (a count, a name, a value the generator does not reproduce) is a conformance test: mark it
``needs_real``; everything else runs on both. ``ASCENDSCOPE_REAL_SAMPLES=/nonexistent`` runs the suite as a
checkout without ``../shared`` would.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from tests import twins

REAL_ROOT = Path(os.environ.get("ASCENDSCOPE_REAL_SAMPLES")
                 or Path(__file__).resolve().parents[1].parent / "shared" / "real_samples")
HAVE_REAL = (REAL_ROOT / "msinsight_pytorch_2025" / "text").is_dir()
REAL_SAMPLES = REAL_ROOT if HAVE_REAL else twins.ensure_tree()
PYTORCH_TEXT = REAL_SAMPLES / "msinsight_pytorch_2025" / "text"

# every sample run of the tree, as a user opens it (a folder, or a database opened on its own): each goes through
# the server's sharded ingest (tests/ingest/test_shards.py), not only the single-file one
SAMPLE_RUNS = {
    **{f"text_{lv}": PYTORCH_TEXT / lv for lv in ("level0", "level1", "level2")},
    **{f"db_{lv}": REAL_SAMPLES / "msinsight_pytorch_2025" / "db" / lv for lv in ("level0", "level1", "level2")},
    "st4": REAL_SAMPLES / "msinsight_st_4rank_2025q4",
    "fixtures": REAL_SAMPLES / "msinsight_server_fixtures",
    "fixtures_msprof_db": REAL_SAMPLES / "msinsight_server_fixtures" / "full_db" / "msprof_0.db",
    "msprof_2dev": REAL_SAMPLES / "mindinsight_msprof_2dev_2023",
    "kineto_trace_filter": REAL_SAMPLES / "hta_gpu_kineto_nonascend" / "trace_filter",
    "kineto_nccl": REAL_SAMPLES / "hta_gpu_kineto_nonascend" / "nccl_parser_config",
}

needs_real = pytest.mark.skipif(not HAVE_REAL, reason=f"conformance test: the real samples are not at {REAL_ROOT} "
                                                      "(its generated twin runs instead)")


def _profiled_step() -> int | None:
    """The one step the pytorch samples profiled (``ProfilerStep#50`` in the real ones; the twin's is another)."""
    path = PYTORCH_TEXT / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    try:
        with path.open(newline="") as fh:
            return int(next(csv.DictReader(fh))["Step"])
    except (OSError, StopIteration, KeyError, ValueError):
        return None


STEP = _profiled_step()
