"""``bench.chainprofile`` times a rank's shard task step by step: the trace's read, derivations and writes each
get a row, and a step holds at most the task's wall time."""

from __future__ import annotations

import time

from ascendscope.bench.chainprofile import Profile
from ascendscope.ingest import pipeline
from ascendscope.sample_data.generate import generate_run


def test_every_step_of_the_chain_gets_a_row(tmp_path):
    src = tmp_path / "run"
    generate_run(src, ranks=1, steps=2, ops_per_step=30, seed=5)
    profile = Profile()
    profile.install()
    try:
        disc = pipeline.discover(src)
        wall0 = time.perf_counter()
        pipeline.ingest_shard(disc.ranks, disc.root, tmp_path / "rank_00000.duckdb", src_path=str(src))
        wall = time.perf_counter() - wall0
    finally:
        profile.uninstall()
    from ascendscope.ingest.trace import TraceLoad

    assert not hasattr(TraceLoad.derive, "__wrapped__")  # (the steps are the ingest's own again)
    rows = profile.rows
    for step in ("TraceRead.read", "TraceLoad.derive", "TraceLoad._nest", "nesting.nest", "trace.write_slices",
                 "lod.build"):
        assert rows[step][0] >= 1, step
    assert any(label.startswith("SQL CREATE OR REPLACE TABLE {p}x") for label in rows)
    assert rows["TraceLoad._nest"][1] <= rows["TraceLoad.derive"][1] <= wall
    table = profile.table(wall, 0.0, min_s=0.0)
    assert "`TraceLoad.derive`" in table and table.count("\n") == len(rows) + 2


def test_serial_mode_runs_each_step_alone_and_counts_per_event(tmp_path, capsys, monkeypatch):
    """``--serial``: what runs beside another runs after it, and each row is given in CPU µs per trace event."""
    from ascendscope.bench import chainprofile
    from ascendscope.ingest import pipeline as pl
    from ascendscope.ingest import trace

    src = tmp_path / "run"
    generate_run(src, ranks=1, steps=2, ops_per_step=30, seed=5)
    beside, derive = trace.Beside, trace.TraceLoad.derive
    monkeypatch.setattr(chainprofile, "MIN_S", 0.0)  # every step listed, however fast the machine
    assert chainprofile.main([str(src), str(tmp_path / "out"), "--serial"]) == 0
    assert trace.Beside is beside and pl.Beside is beside and trace.TraceLoad.derive is derive
    out = capsys.readouterr().out
    assert "CPU µs / event |" in out and "`TraceLoad.derive`" in out and "`CsvLoad.load`" in out
    events = int(out.split(" events,")[0].rsplit(", ", 1)[1].replace(",", ""))
    assert events > 100
