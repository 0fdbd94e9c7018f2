"""Ingest of generated runs equals the generator's ground truth; a derived Overlap lane equals the written one."""

from __future__ import annotations

import duckdb
import pytest

from ascendscope.ingest.csvfiles import TABLES
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.sample_data.generate import generate_run


@pytest.mark.parametrize("fmt", ["array", "object", "gz"])
def test_generated_run_matches_ground_truth(tmp_path, fmt):
    truth = generate_run(tmp_path / "run", ranks=2, steps=2, ops_per_step=60, seed=3, trace_format=fmt)
    out = tmp_path / "run.duckdb"
    summary = ingest_path(tmp_path / "run", out)
    assert summary["ranks"] == [0, 1]
    assert summary["warnings"] == []
    con = duckdb.connect(str(out), read_only=True)
    for rank, rt in enumerate(truth["ranks"]):
        n, lo = con.execute("SELECT count(*), min(ts_ns) FROM slices WHERE rank = ?", [rank]).fetchone()
        assert n == rt["x_events"] and lo == rt["min_x_ts_ns"]
        flows = dict(con.execute("SELECT cat, count(*) FROM flows WHERE rank = ? GROUP BY cat", [rank]).fetchall())
        assert flows == {cat: c["f"] for cat, c in rt["flows"].items()}
        unbound = con.execute("SELECT count(*) FROM flows WHERE rank = ? AND (src_slice_id IS NULL OR "
                              "dst_slice_id IS NULL)", [rank]).fetchone()[0]
        assert unbound == 0
        for kind, table in TABLES.items():
            expected = rt["csv_rows"].get(f"{kind}.csv", 0)
            got = con.execute(f"SELECT count(*) FROM {table} WHERE rank = ?", [rank]).fetchone()[0]
            assert got == expected, kind
        steps = con.execute("SELECT step, device_start_ns, device_end_ns, host_start_ns FROM steps WHERE rank = ? "
                            "ORDER BY step", [rank]).fetchall()
        assert steps == [(s["id"], s["device_start_ns"], s["end_ns"], s["host_start_ns"]) for s in rt["steps"]]
    con.close()


def test_derived_overlap_equals_the_generated_lane(tmp_path):
    generate_run(tmp_path / "with", ranks=1, steps=2, ops_per_step=80, seed=5, overlap_lane=True)
    generate_run(tmp_path / "without", ranks=1, steps=2, ops_per_step=80, seed=5, overlap_lane=False)
    rows = {}
    for name in ("with", "without"):
        out = tmp_path / f"{name}.duckdb"
        ingest_path(tmp_path / name, out)
        con = duckdb.connect(str(out), read_only=True)
        rows[name] = con.execute("""SELECT t.thread_name, s.ts_ns, s.dur_ns FROM slices s JOIN tracks t
                                    USING (track_id) WHERE t.kind = 'overlap' ORDER BY ALL""").fetchall()
        rows[name + "_source"] = con.execute("SELECT overlap_source FROM ranks").fetchone()[0]
        con.close()
    assert rows["with_source"] == "trace" and rows["without_source"] == "derived"
    assert rows["with"] and rows["with"] == rows["without"]
