"""Memory snapshots into the ``mem_*`` tables: every figure equals the simulated allocator's own record
(``sample_data.memsnap``, CUDA and torch_npu flavours, with and without ``time_us``, expandable segments, a ring
buffer that starts mid-run, torch_npu's workspace heads); and where a snapshot is found (alone, in a folder, in a
zip, in or beside rank folders)."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.discover import discover
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.ingest.readers import memsnap as reader
from ascendscope.sample_data import memsnap
from tests.memsnap_sample import CASES, write_case


@pytest.fixture(scope="module", params=sorted(CASES))
def ingested(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"memsnap-{request.param}")
    path, truth = write_case(request.param, work)
    out = work / "run.duckdb"
    ingest_path(path, out)
    con = duckdb.connect(str(out), read_only=True)
    yield request.param, con, truth
    con.close()


def devices(truth) -> list[int]:
    return sorted(truth.devices)


def test_dump_figures_bases_and_peak(ingested):
    name, con, truth = ingested
    for d in devices(truth):
        row = con.execute("SELECT entries, reserved_at_dump, allocated_at_dump, active_at_dump, requested_at_dump, "
                          "active_base, allocated_base, reserved_base, peak_active, peak_idx, anomalies, "
                          "workspace_bytes, has_time, min_active, min_allocated, min_reserved FROM mem_devices "
                          "WHERE device = ?", [d]).fetchone()
        totals, curve = truth.dump_totals(d), truth.curve(d)
        assert row[0] == truth.entries(d)
        assert row[1:5] == (totals["total_size"], totals["allocated_size"], totals["active_size"],
                            totals["requested_size"])
        assert row[5:8] == (curve["active"][0], curve["allocated"][0], curve["reserved"][0])
        assert row[8:10] == truth.peak(d)
        assert row[10] is None, row[10]  # no inconsistency: the trace replays back to the dump
        assert row[11] == truth.workspace_bytes(d)
        assert row[12] == (CASES[name][1].get("time_us", True))
        assert row[13:] == (min(curve["active"]), min(curve["allocated"]), min(curve["reserved"]))


def test_curves_after_every_entry(ingested):
    _, con, truth = ingested
    for d in devices(truth):
        bases = con.execute("SELECT active_base, allocated_base, reserved_base FROM mem_devices WHERE device = ?",
                            [d]).fetchone()
        got = con.execute("SELECT idx, ts_ns, active_rel, allocated_rel, reserved_rel FROM mem_events "
                          "WHERE device = ? ORDER BY idx", [d]).fetchall()
        curve, ts = truth.curve(d), truth.ts_ns(d)
        assert [r[0] for r in got] == list(range(truth.entries(d)))
        assert [r[1] for r in got] == ts
        for name, k in (("active", 2), ("allocated", 3), ("reserved", 4)):
            assert [r[k] + bases[k - 2] for r in got] == curve[name][1:], name


def test_block_lives(ingested):
    _, con, truth = ingested
    for d in devices(truth):
        want = sorted((b["addr"], -1 if b["alloc_idx"] is None else b["alloc_idx"], b["requested"], b["size"],
                       b["free_requested_idx"], b["free_idx"], b["state_at_dump"], b["stack"])
                      for b in truth.blocks(d))
        frames = {}
        for sid, filename, line, name in con.execute("SELECT stack_id, filename, line, name FROM mem_frames "
                                                     "ORDER BY stack_id, depth").fetchall():
            frames.setdefault(sid, []).append((filename, line, name))
        got = sorted((addr, a, req, size, fr, f, state, tuple(frames[s]) if s is not None and frames.get(s) else None)
                     for addr, a, req, size, fr, f, state, s in con.execute(
                         "SELECT addr, coalesce(alloc_idx, -1), requested_size, size, free_requested_idx, free_idx, "
                         "state_at_dump, stack_id FROM mem_blocks WHERE device = ?", [d]).fetchall())
        assert got == want


def test_reserved_ranges_at_every_tenth_entry(ingested):
    """The segment pieces rebuilt backwards from the dump cover exactly the ranges the allocator had reserved."""
    _, con, truth = ingested
    for d in devices(truth):
        pieces = con.execute("SELECT address, size, stream, is_expandable, coalesce(start_idx, -1), "
                             "coalesce(end_idx, 9223372036854775807) FROM mem_segments WHERE device = ? "
                             "ORDER BY address", [d]).fetchall()
        for k in range(-1, truth.entries(d), 10):
            live = [p for p in pieces if p[4] <= k < p[5]]
            merged: list[list] = []
            for a, s, stream, exp, _, _ in live:
                if merged and merged[-1][1] == a and exp and merged[-1][2] == stream:
                    merged[-1][1] = a + s
                else:
                    merged.append([a, a + s, stream if exp else None])
            assert [(lo, hi) for lo, hi, _ in merged] == truth.reserved_at(d, k), k


def test_replaying_backwards_never_goes_negative(ingested):
    """Every life starts before it ends, and every piece of a segment too."""
    _, con, _ = ingested
    assert con.execute("SELECT count(*) FROM mem_blocks WHERE alloc_idx > free_requested_idx "
                       "OR free_requested_idx > free_idx OR alloc_idx > free_idx").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM mem_segments WHERE start_idx >= end_idx OR size <= 0").fetchone()[0] == 0


def test_workspace_triples_change_nothing():
    snap = memsnap.simulate("npu", workspaces=2, steps=6)
    head = snap.data["device_traces"][0][:6]
    assert [e["action"] for e in head] == ["workspace_snapshot", "segment_alloc", "alloc"] * 2


def _tables(out: Path) -> dict:
    con = duckdb.connect(str(out), read_only=True)
    try:
        return {"snapshots": con.execute("SELECT rank, file FROM mem_snapshots ORDER BY rank").fetchall(),
                "warnings": con.execute("SELECT rank, file, message FROM warnings").fetchall(),
                "ranks": con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()}
    finally:
        con.close()


def test_found_alone_in_a_folder_and_in_a_zip(tmp_path):
    folder = tmp_path / "snaps"
    for r, flavour in ((0, "cuda"), (3, "npu")):
        memsnap.write(folder / f"snapshot_rank{r}.pickle", memsnap.simulate(flavour, steps=3))
    ingest_path(folder, tmp_path / "folder.duckdb")
    got = _tables(tmp_path / "folder.duckdb")
    assert got["snapshots"] == [(0, "snapshot_rank0.pickle"), (3, "snapshot_rank3.pickle")]
    with zipfile.ZipFile(tmp_path / "snaps.zip", "w") as z:
        for p in folder.iterdir():
            z.write(p, f"job/{p.name}")
    ingest_path(tmp_path / "snaps.zip", tmp_path / "zip.duckdb")
    assert [r for r, _ in _tables(tmp_path / "zip.duckdb")["snapshots"]] == [0, 3]


def test_not_a_snapshot_is_not_taken_for_one(tmp_path):
    (tmp_path / "model.pkl").write_bytes(pickle.dumps({"weights": [1, 2, 3]}))
    assert not reader.is_snapshot(tmp_path / "model.pkl")
    assert reader.is_snapshot(memsnap.write(tmp_path / "s.pickle", memsnap.simulate("cuda", steps=2)))


def _run_with_ranks(root: Path, ranks: int) -> dict:
    from ascendscope.sample_data.generate import generate_run

    return generate_run(root, ranks=ranks, steps=1, ops_per_step=20)


def test_beside_rank_folders_it_joins_its_rank(tmp_path):
    one = tmp_path / "one"
    _run_with_ranks(one, 1)
    memsnap.write(one / "dump.pickle", memsnap.simulate("npu", steps=2))
    assert [(s.rank, sorted(s.files)) for s in discover(one).ranks][0][1].count(reader.KIND) == 1
    two = tmp_path / "two"
    _run_with_ranks(two, 2)
    memsnap.write(two / "snapshot_rank1.pickle", memsnap.simulate("npu", steps=2))
    memsnap.write(two / "other.pickle", memsnap.simulate("npu", steps=2, seed=3))
    disc = discover(two)
    by_rank = {s.rank: s for s in disc.ranks}
    assert by_rank[1].files[reader.KIND].name == "snapshot_rank1.pickle"
    assert reader.KIND not in by_rank[0].files
    assert by_rank[2].files == {reader.KIND: two / "other.pickle"}  # no rank in its name: a rank of its own …
    assert any("other.pickle" in f and "name it snapshot_rank" in m for _, f, m in disc.warnings)  # … said so
    inside = tmp_path / "inside"
    _run_with_ranks(inside, 2)
    memsnap.write(inside / "rank1_ascend_pt" / "snap.pkl", memsnap.simulate("cuda", steps=2))
    by_rank = {s.rank: s for s in discover(inside).ranks}
    assert by_rank[1].files[reader.KIND].name == "snap.pkl" and len(by_rank) == 2
