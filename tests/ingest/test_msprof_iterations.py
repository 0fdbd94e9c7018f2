"""msprof's iterations as the steps: the Summary's step time of an iteration is msprof's own Iteration Time, to the ns.

msprof measures an iteration by its Step Trace slice (``Iteration <n>``: ``ts`` to ``Iteration End``, its ``dur``
is ``Iteration Time(ns)``); the iteration's Overlap Analysis lane only spans its first to its last task, which start
and end some µs inside it. The files are re-read here independently (every number as its text, so times convert
exactly): the real older-layout sample (skipped without ``../shared``) and its generated twin, whose generator
writes the iterations as the real files do (``sample_data/_msprof.py``), and a small generated run whose
Iteration Times are known by construction.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.breakdown import ConnRunner, breakdown
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.sample_data.generate import generate_msprof
from tests import twins
from tests.ingest_helpers import us_text_to_ns
from tests.samples import REAL_ROOT

NAME = "mindinsight_msprof_2dev_2023"
LANE_PARTS = ("Computing", "Communication(Not Overlapped)", "Free")  # they tile the lane, Communication overlaps
# what the real files show (20 iterations of 2 devices): the first task starts 9.57-12.42 µs after the iteration,
# the last ends 6.22-14.91 µs before its end (msprof's Iteration Time is 18-26 µs longer than the tasks' span)
LEAD_NS = (9_000, 13_000)
TAIL_NS = (6_000, 15_000)


def _source(which: str) -> Path:
    if which == "real":
        path = REAL_ROOT / NAME
        if not path.is_dir():
            pytest.skip(f"real sample {path} not found")
        return path
    return twins.ensure_tree() / NAME


def _ns(text) -> int:
    return us_text_to_ns(str(text))


def iterations(folder: Path) -> dict[int, dict[int, dict]]:
    """Device id -> iteration -> its Step Trace slice and the extremes of its tasks and of its Overlap Analysis
    lane, from its ``msprof_*.json`` file (all times ns)."""
    out: dict[int, dict[int, dict]] = {}
    for path in sorted(folder.glob("PROF_*/device_*/timeline/msprof_*.json")):
        events = json.loads(path.read_text(encoding="utf-8"), parse_float=str, parse_int=str)
        procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                   if e["ph"] == "M" and e["name"] == "thread_name"}
        xs = [e for e in events if e["ph"] == "X"]
        marks = [e for e in xs if e.get("cat") == "Iteration Time"]
        assert len(marks) == 1, path.name
        mark = marks[0]
        tasks = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in xs
                 if procs[e["pid"]] == "HCCL" or (procs[e["pid"]] == "Ascend Hardware"
                                                  and not threads[(e["pid"], e["tid"])].startswith("Step Trace"))]
        lane = [(e["name"], _ns(e["ts"]), _ns(e["dur"])) for e in xs if procs[e["pid"]] == "Overlap Analysis"]
        device = int(path.parent.parent.name.split("_")[1])
        out.setdefault(device, {})[int(mark["args"]["Iteration ID"])] = {
            "start": _ns(mark["ts"]), "dur": _ns(mark["dur"]), "end": _ns(mark["args"]["Iteration End"]),
            "iteration_time": int(float(mark["args"]["Iteration Time(ns)"])),
            "first_task": min(s for s, _ in tasks), "last_task": max(e for _, e in tasks),
            "lane_start": min(ts for _, ts, _ in lane), "lane_end": max(ts + dur for _, ts, dur in lane),
            "lane_tiles": sum(dur for name, _, dur in lane if name in LANE_PARTS)}
    return out


def _summary_steps(folder: Path, out: Path) -> dict[tuple[int, int], dict]:
    """Ingest the folder; (device id, iteration) -> the Summary's breakdown row of that rank and step."""
    ingest_path(folder, out)
    con = duckdb.connect(str(out), read_only=True)
    try:
        device_of = dict(con.execute("SELECT rank, device_id FROM ranks").fetchall())
        return {(device_of[r["rank"]], r["step"]): r for r in breakdown(ConnRunner(con))}
    finally:
        con.close()


@pytest.mark.parametrize("which", ["real", "twin"])
def test_an_iteration_frames_its_tasks(which):
    """The shape the Summary relies on, in the real files and so in the twin's: the Step Trace slice ends at
    Iteration End and lasts Iteration Time; it holds every task of its file, the first starting and the last
    ending some µs inside it; the Overlap Analysis lane spans exactly the first to the last task, tiled by
    Computing, Communication(Not Overlapped) and Free; a device's iterations do not overlap."""
    found = iterations(_source(which))
    assert sorted(found) == [0, 1] and all(sorted(its) == list(range(1, 11)) for its in found.values())
    for device, its in found.items():
        previous_end = None
        for n, it in sorted(its.items()):
            where = f"device {device} iteration {n}"
            assert it["start"] + it["dur"] == it["end"] and it["dur"] == it["iteration_time"], where
            assert LEAD_NS[0] <= it["first_task"] - it["start"] <= LEAD_NS[1], where
            assert TAIL_NS[0] <= it["end"] - it["last_task"] <= TAIL_NS[1], where
            assert (it["lane_start"], it["lane_end"]) == (it["first_task"], it["last_task"]), where
            assert it["lane_tiles"] == it["last_task"] - it["first_task"], where
            assert previous_end is None or it["start"] > previous_end, where
            previous_end = it["end"]


@pytest.mark.parametrize("which", ["real", "twin"])
def test_summary_step_time_is_msprofs_iteration_time(which, tmp_path):
    """Computing + Communication(Not Overlapped) + Free of each iteration is its Iteration Time, exactly: the idle
    time before the first and after the last task is Free (msprof's Free is its bounds less compute and
    communication, and an iteration's bounds are the iteration); no host step starts it, so no Preparing."""
    folder = _source(which)
    rows = _summary_steps(folder, tmp_path / "run.duckdb")
    found = iterations(folder)
    assert sorted(rows) == sorted((d, n) for d, its in found.items() for n in its)
    for (device, n), row in rows.items():
        it = found[device][n]
        assert row["source"] == "overlap" and not row["incomplete"], (device, n)
        assert row["e2e_ns"] == it["iteration_time"], (device, n, row["e2e_ns"] - it["iteration_time"])
        lane_free = it["lane_tiles"] - row["computing_ns"] - row["communication_not_overlapped_ns"]
        assert row["free_ns"] == lane_free + (it["first_task"] - it["start"]) + (it["end"] - it["last_task"])
        assert row["preparing_ns"] is None


def test_generated_iteration_times_are_the_summarys(tmp_path):
    """The known answer: the generator's own Iteration Times (first task − lead to last task + tail)."""
    truth = generate_msprof(tmp_path / "src", devices=2, iterations=3, ops_per_step=30, seed=9)
    rows = _summary_steps(tmp_path / "src", tmp_path / "run.duckdb")
    expected = {(d, n): end - start for d, its in truth["msprof_iterations"].items() for n, (start, end) in its.items()}
    assert len(expected) == 6
    assert {k: r["e2e_ns"] for k, r in rows.items()} == expected
