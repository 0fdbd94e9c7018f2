"""``run.memory_snapshot()`` and ``run.leaks(t0, t1)``: a snapshot opened from Python, through a script file as a
user runs one, gives the figures the simulated allocator recorded (tests/memsnap_sample.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import ascendscope
from tests.memsnap_sample import write_case


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    work = tmp_path_factory.mktemp("memsnap-py")
    data = tmp_path_factory.mktemp("memsnap-py-data")
    out = {}
    for name in ("cuda", "npu_notime"):
        path, truth = write_case(name, work / name)
        out[name] = (ascendscope.open(path, data_dir=data, quiet=True), truth, path)
    yield out, data
    for run, _, _ in out.values():
        run.close()


def test_memory_snapshot_figures(opened):
    runs, _ = opened
    for name, (run, truth, _) in runs.items():
        snap = run.memory_snapshot()
        device = snap["device"]
        assert (snap["peak"]["bytes"], snap["peak"]["idx"]) == truth.peak(device)
        dev = next(d for d in snap["devices"] if d["device"] == device)
        dump = truth.dump_totals(device)
        assert (dev["reserved_at_dump"], dev["allocated_at_dump"], dev["active_at_dump"]) == (
            dump["total_size"], dump["allocated_size"], dump["active_size"])
        assert [o["idx"] for o in snap["ooms"]] == [o["idx"] for o in truth.ooms(device)]
        assert snap["axis"] == ("index" if name == "npu_notime" else "ns")


def test_leaks_by_time_and_by_index(opened):
    runs, _ = opened
    run, truth, _ = runs["cuda"]
    ts = truth.ts_ns(1)
    n = len(ts)
    frame = run.leaks(ts[n // 4], ts[3 * n // 4], device=1)
    i0 = min(i for i, t in enumerate(ts) if t >= ts[n // 4])
    i1 = min(i for i, t in enumerate(ts) if t >= ts[3 * n // 4])
    want = truth.leaks(1, i0, i1)
    assert sorted(zip(frame["blocks"], frame["bytes"])) == sorted(want.values())
    run, truth, _ = runs["npu_notime"]
    frame = run.leaks(100, 700)  # no time_us: entry indices
    assert sorted(zip(frame["blocks"], frame["bytes"])) == sorted(truth.leaks(0, 100, 700).values())
    assert list(frame.columns)[:4] == ["stack_id", "label", "blocks", "bytes"]


def test_from_a_script_file(opened, tmp_path):
    runs, data = opened
    _, truth, path = runs["npu_notime"]
    script = tmp_path / "leaks.py"
    script.write_text("import json, sys\nimport ascendscope\n"
                      "run = ascendscope.open(sys.argv[1], data_dir=sys.argv[2], quiet=True)\n"
                      "snap = run.memory_snapshot()\n"
                      "leaks = run.leaks()\n"
                      "print(json.dumps({'peak': snap['peak']['bytes'], 'bytes': int(leaks['bytes'].sum())}))\n")
    done = subprocess.run([sys.executable, str(script), str(path), str(data)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["peak"] == truth.peak(0)[0]
    assert got["bytes"] == sum(b for _, b in truth.leaks(0, 0, truth.entries(0)).values())
