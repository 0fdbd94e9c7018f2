"""A rank of more lanes than a shard's track ids hold (issue #45, item 7): the sharded (server) path refuses its
timeline with a warning that names the limit, before its slices are made; the single-file path loads every lane."""

from __future__ import annotations

import json

import duckdb
import pytest

from ascendscope.ingest.layout import TRACK_ID_BITS, connect
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.server.runs import RunStore

LANES = (1 << TRACK_ID_BITS) + 4_464  # 70,000: one X event per (pid, tid)
LIMIT = (1 << TRACK_ID_BITS) - 1
MESSAGE = f"not loaded: {LANES} tracks (lanes), more than the {LIMIT} a shard's track ids hold"


def _rank(folder, lanes: int, rank: int) -> None:
    out = folder / f"rank{rank}_ascend_pt"
    (out / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (out / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}))
    events = [{"ph": "X", "name": "op", "pid": 1 + i // 1000, "tid": i % 1000, "ts": f"{1000 + i}.000", "dur": 1}
              for i in range(lanes)]
    (out / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(events))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Rank 0 with 70,000 lanes, rank 1 with 3 (small ranks: the sharded path stages them as one group)."""
    src = tmp_path_factory.mktemp("lanes") / "src"
    _rank(src, LANES, 0)
    _rank(src, 3, 1)
    return src


def _ingest_by_the_worker(store: RunStore, src) -> str:
    from ascendscope.server.worker import IngestQueue

    run = store.create_run("lanes", str(src))
    queue = IngestQueue(store, workers=1).start(resume=False)
    try:
        queue.enqueue(run.id)
        assert queue.wait_idle(300)
    finally:
        queue.stop()
    return run.id


def test_a_rank_of_more_lanes_than_a_shard_holds_is_refused_with_the_limit(tmp_path, source):
    store = RunStore(tmp_path / "data")
    run_id = _ingest_by_the_worker(store, source)
    done = store.get(run_id)
    assert done.status == "ready", done.error
    con, _ = connect(store.run_dir(run_id))
    try:
        warnings = con.execute("SELECT rank, file, message FROM warnings ORDER BY rank, message").fetchall()
        slices = dict(con.execute("SELECT rank, count(*) FROM slices GROUP BY rank").fetchall())
        files = con.execute("SELECT rank, status FROM files WHERE kind = 'trace_view' ORDER BY rank").fetchall()
    finally:
        con.close()
    assert (0, "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json", MESSAGE) in warnings
    assert not any("Catalog Error" in m for _, _, m in warnings), warnings
    assert files == [(0, "failed"), (1, "loaded")]
    assert slices == {1: 3}  # the other rank of its group loads


def test_the_single_file_path_loads_every_lane(tmp_path, source):
    ingest_path(source, tmp_path / "run.duckdb")
    with duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM tracks WHERE rank = 0 AND slice_count = 1").fetchone()[0] == LANES
        assert con.execute("SELECT count(*) FROM slices").fetchone()[0] == LANES + 3
