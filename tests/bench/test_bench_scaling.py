"""``ascendscope bench scaling``: the model that projects a measured sharded ingest onto N nodes (issue #17 item 5).
Its arithmetic on a made-up manifest whose answer is known, and the command on a run really ingested."""

import json

import pytest

from ascendscope.bench import scaling


def manifest(tasks, serial=(1.0, 2.0, 0.5), out_ratio=0.2, ranks=None):
    """Shards of ``(input MB, seconds)``; the coordinator's phases ``serial``."""
    shards = [{"status": "ready", "ranks": [i], "input_bytes": mb * 1e6, "seconds": s, "bytes": mb * 1e6 * out_ratio}
              for i, (mb, s) in enumerate(tasks)]
    discover, small, cluster = serial
    return {"shards": shards, "ranks": {"total": ranks or len(tasks)},
            "timing": {"discover_s": discover, "small_s": small, "cluster_write_s": cluster}}


def test_fit_recovers_a_fixed_cost_and_a_rate():
    tasks = [{"input_bytes": mb * 1e6, "seconds": 0.5 + mb / 40} for mb in (1, 10, 50, 100, 300)]
    fixed, rate = scaling.fit(tasks)
    assert fixed == pytest.approx(0.5, abs=1e-6) and rate == pytest.approx(40, rel=1e-6)
    # sizes too alike to tell the two apart: all of it is rate
    assert scaling.fit([{"input_bytes": 10e6, "seconds": 2.0}] * 4) == (0.0, pytest.approx(5.0))


def test_makespan_is_longest_first_list_scheduling():
    assert scaling.makespan([3, 3, 2, 2, 2], 2) == 7  # 3+2+2 | 3+2
    assert scaling.makespan([5, 1, 1], 8) == 5
    assert scaling.makespan([1] * 10, 1) == 10


def test_projection_of_the_measured_tasks():
    m = manifest([(100, 4.0)] * 8, serial=(1.0, 2.0, 0.5), out_ratio=0.25)
    p = scaling.project(m, nodes=[1, 2, 8], cores=2, storage_gbps=1.0)
    assert p["tasks"] == 8 and p["measured_tasks"] and p["serial_s"] == 3.5
    assert p["input_gb"] == 0.8 and p["moved_gb"] == 1.0  # read every input, write shards of 0.25 × it
    # a task: its 4 s plus its 125 MB at a node's 1 GB/s shared by its 2 workers (0.25 s)
    walls = {r["nodes"]: r["wall_s"] for r in p["rows"]}
    assert walls == pytest.approx({1: 3.5 + 4 * 4.25, 2: 3.5 + 2 * 4.25, 8: 3.5 + 4.25}, abs=0.051)  # (rounded)
    assert [r["waves"] for r in p["rows"]] == [4, 2, 1]


def test_projection_of_another_size_groups_small_ranks():
    m = manifest([(mb, 0.5 + mb / 40) for mb in (1, 10, 50, 100, 300)], ranks=5)
    p = scaling.project(m, nodes=[1], cores=16, storage_gbps=1.0, ranks=1000, mb_per_rank=0.5)
    assert p["tasks"] == 1000 // 64 + 1 and not p["measured_tasks"]  # 64 ranks of 0.5 MB per 32 MB task
    big = scaling.project(m, nodes=[1, 64], cores=16, storage_gbps=1.0, ranks=1000, mb_per_rank=1000)
    assert big["tasks"] == 1000 and big["input_gb"] == 1000
    one, many = (r["wall_s"] for r in big["rows"])
    assert many < one / 30  # 1,000 tasks on 1,024 workers: one wave instead of 63


def test_the_command_on_an_ingested_run(tmp_path, capsys):
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.generate import generate_run

    generate_run(tmp_path / "src", ranks=3, steps=2, ops_per_step=40, seed=1)
    ingest_sharded(tmp_path / "src", tmp_path / "run", workers=1, group_bytes=0)
    assert scaling.main([str(tmp_path / "run"), "--nodes", "1", "8", "--json", str(tmp_path / "p.json")]) == 0
    p = json.loads((tmp_path / "p.json").read_text())
    assert p["tasks"] == 3 and [r["nodes"] for r in p["rows"]] == [1, 8]
    assert p["rows"][1]["wall_s"] <= p["rows"][0]["wall_s"] and p["serial_s"] > 0
    assert "nodes" in capsys.readouterr().out
