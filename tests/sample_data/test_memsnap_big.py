"""``sample_data.memsnap_big`` writes, as a stream of opcodes, what ``pickle.dump`` writes for the snapshot it
stands for: ``pickle`` reads it back (our own data: safe) to the figures it returns, and the ingest finds the same,
with no inconsistency between its trace and its dump."""

from __future__ import annotations

import pickle

import duckdb
import pytest

from ascendscope.ingest.pipeline import ingest_path
from ascendscope.sample_data.memsnap_big import write_big


@pytest.mark.parametrize("flavour", ["npu", "cuda"])
def test_big_snapshot_reads_back_to_its_figures(tmp_path, flavour):
    path = tmp_path / "big.pickle"
    figures = write_big(path, 1 << 20, flavour=flavour, time_us=flavour == "cuda")
    data = pickle.loads(path.read_bytes())
    trace = data["device_traces"][0]
    assert len(trace) == figures["entries"] and figures["bytes"] == path.stat().st_size
    segs = data["segments"]
    assert sum(s["total_size"] for s in segs) == figures["reserved_at_dump"]
    assert sum(s["allocated_size"] for s in segs) == figures["allocated_at_dump"]
    assert sum(1 for e in trace if e["action"] == "oom") == 1
    assert len({id(e["frames"]) for e in trace}) > len({tuple(map(id, e["frames"])) for e in trace})  # new lists
    ingest_path(path, tmp_path / "run.duckdb")
    con = duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)
    try:
        row = con.execute("SELECT entries, reserved_at_dump, allocated_at_dump, active_at_dump, anomalies, "
                          "blocks_live_at_dump FROM mem_devices").fetchone()
    finally:
        con.close()
    assert row == (figures["entries"], figures["reserved_at_dump"], figures["allocated_at_dump"],
                   figures["active_at_dump"], None, figures["blocks_live_at_dump"])
