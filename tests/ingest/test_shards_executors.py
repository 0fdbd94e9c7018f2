"""Where a sharded ingest's tasks run (issue #17): a local process pool and a local Ray cluster write identical
runs, small and of many ranks; an unknown executor, or Ray missing, is a clear error that writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ascendscope.ingest.shards import ingest_sharded
from ascendscope.sample_data.generate import generate_run
from tests.shard_helpers import dump_run, small_run

# the 1,000 ranks take ~7 min for both executors on 2 cores (~0.2 s per tiny rank): the default run checks
# 100; ASCENDSCOPE_CLUSTER_TEST_RANKS=1000 runs the full size (recorded in docs/benchmarks.md)
THOUSAND = int(os.environ.get("ASCENDSCOPE_CLUSTER_TEST_RANKS", "100"))


def _ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return small_run(tmp_path_factory.mktemp("gen"))


@pytest.fixture(scope="module")
def thousand(tmp_path_factory) -> Path:
    """THOUSAND ranks as small as the generator makes them, each a trace only (the CSVs are removed: a rank's
    cost is then mostly the fixed cost of a shard)."""
    out = tmp_path_factory.mktemp("thousand")
    generate_run(out, ranks=THOUSAND, steps=1, ops_per_step=2, streams=1, cann_lane=False, overlap_lane=False,
                 hccl=False)
    for csv in out.glob("*/ASCEND_PROFILER_OUTPUT/*.csv"):
        csv.unlink()
    return out


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the module's Ray tests, started and stopped by the executor that owns it (its start alone
    takes 30-40 s on 2 busy cores); the runs' own executors find it running and leave it so."""
    if not _ray_available():
        pytest.skip("ray is not installed (pip install 'ascendscope[ray]')")
    from ascendscope.ingest.executors import RayExecutor
    owner = RayExecutor(workers=2)
    assert owner.owned and owner.ray.is_initialized()
    yield owner.ray
    owner.close()
    assert not owner.ray.is_initialized()


@pytest.mark.slow
def test_thousand_ranks_process_pool_and_ray_agree(thousand, tmp_path, ray_session):
    by_pool = ingest_sharded(thousand, tmp_path / "pool", executor="process", workers=2)
    assert len(by_pool["ranks"]) == THOUSAND and all(s["status"] == "ready" for s in by_pool["shards"])
    by_ray = ingest_sharded(thousand, tmp_path / "ray", executor="ray", workers=2)
    assert by_ray["ranks"] == by_pool["ranks"]
    assert {k: v for k, v in by_ray.items() if k not in ("seconds", "shards")} == \
        {k: v for k, v in by_pool.items() if k not in ("seconds", "shards")}
    assert dump_run(tmp_path / "ray") == dump_run(tmp_path / "pool")


def test_ray_executor_on_a_small_run(generated, tmp_path, ray_session):
    by_pool = ingest_sharded(generated, tmp_path / "pool", workers=2, group_bytes=0)
    ingest_sharded(generated, tmp_path / "ray", executor="ray", workers=2, group_bytes=0)
    assert dump_run(tmp_path / "ray") == dump_run(tmp_path / "pool")
    assert by_pool["ranks"] == [0, 1, 2]


def test_unknown_executor_and_missing_ray(generated, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown executor"):
        ingest_sharded(generated, tmp_path / "run", executor="slurm")
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # an import of ray now fails
    from ascendscope.ingest.executors import ExecutorUnavailable

    with pytest.raises(ExecutorUnavailable, match="pip install"):
        ingest_sharded(generated, tmp_path / "run", executor="ray")
    assert not (tmp_path / "run" / "manifest.json").exists()
    assert os.listdir(tmp_path / "run" / "shards") == []
