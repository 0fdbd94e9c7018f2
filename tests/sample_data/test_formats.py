"""The generator's other formats of one simulation: Level0/Level2 text exports, the db export, msprof's
per-iteration PROF_* layout and Kineto GPU traces — each as the format description (FORMATS.md) has it."""

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from collections import Counter
from contextlib import closing

import pytest

from ascendscope.sample_data.generate import generate_kineto, generate_msprof, generate_run

LEVEL0_HEADER = ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)",
                 "Block Dim"]


def events(path):
    return json.loads(path.read_text())


def test_level0_is_pruned_as_torch_npu_prunes_it(tmp_path):
    generate_run(tmp_path / "l0", ranks=1, steps=1, ops_per_step=80, seed=3, level="Level0")
    out = tmp_path / "l0" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    evs = events(out / "trace_view.json")
    procs = {e["args"]["name"] for e in evs if e.get("ph") == "M" and e["name"] == "process_name"}
    assert "CANN" not in procs and {"Python", "Ascend Hardware", "HCCL"} <= procs
    assert not [e for e in evs if str(e.get("name", "")).startswith(("AscendCL@", "Runtime@"))]
    named = {e["pid"] for e in evs if e.get("ph") == "M" and e["name"] == "process_name"}
    orphans = [e for e in evs if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] not in named]
    assert orphans  # the CANN lane's thread names stay, under a pid nothing names (FORMATS.md §3.3)
    assert not [e for e in evs if e.get("ph") == "M" and str(e.get("args", {}).get("name", "")).startswith("Plane")]
    with (out / "kernel_details.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == LEVEL0_HEADER
    assert {(r["Type"], r["Accelerator Core"]) for r in rows} <= {("N/A", "N/A"), ("N/A", "HCCL")}
    assert not any((out / n).exists() for n in ("op_statistic.csv", "api_statistic.csv", "communication.json"))
    info = json.loads((out.parent / "profiler_info_0.json").read_text())
    assert info["config"]["experimental_config"]["_profiler_level"] == "Level0"


def test_the_db_export_holds_the_text_exports_rows(tmp_path):
    truth = generate_run(tmp_path / "text", ranks=1, steps=2, ops_per_step=80, seed=4)
    generate_run(tmp_path / "db", ranks=1, steps=2, ops_per_step=80, seed=4, export="db", db_overlap_ranks=(0,))
    rank = tmp_path / "db" / "rank0_ascend_pt"
    assert sorted(p.name for p in rank.rglob("*") if p.is_file()) == \
        ["analysis.db", "ascend_pytorch_profiler_0.db", "profiler_info_0.json"]
    text = tmp_path / "text" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    with (text / "kernel_details.csv").open(newline="") as fh:
        kernels = list(csv.DictReader(fh))
    with closing(sqlite3.connect(rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")) as db:
        one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
        assert one("SELECT count(*) FROM COMPUTE_TASK_INFO") == sum(r["Accelerator Core"] != "HCCL" for r in kernels)
        assert one("SELECT count(*) FROM COMMUNICATION_OP") == truth["ranks"][0]["hccl_ops"]
        assert one("SELECT count(*) FROM STEP_TIME") == 2
        assert one("SELECT count(*) FROM OVERLAP_ANALYSIS") > 0
        assert one("SELECT min(id) FROM STRING_IDS WHERE value = 'Enqueue'") >= 1 << 28  # torch_npu's range
        assert one("SELECT min(id) FROM STRING_IDS WHERE value = 'PTA'") >= 2 << 28
        assert one("SELECT count(*) FROM PYTORCH_API WHERE typeof(startNs) <> 'text'") == 0
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"TASK", "COMPUTE_TASK_INFO", "TASK_PMU_INFO", "COMMUNICATION_OP", "COMMUNICATION_TASK_INFO", "CANN_API",
            "PYTORCH_API", "CONNECTION_IDS", "PYTORCH_CALLCHAINS", "MEMORY_RECORD", "OP_MEMORY", "NPU_MEM",
            "NPU_MODULE_MEM", "NPU_OP_MEM", "STEP_TIME", "STRING_IDS", "META_DATA", "RANK_DEVICE_MAP"} <= tables
    with closing(sqlite3.connect(rank / "ASCEND_PROFILER_OUTPUT" / "analysis.db")) as analysis:
        steps = [r[0] for r in analysis.execute("SELECT step FROM StepTraceTime ORDER BY step")]
        assert steps == [str(s["id"]) for s in truth["ranks"][0]["steps"]]
        assert analysis.execute("SELECT count(*) FROM CommAnalyzerTime").fetchone()[0] == truth["ranks"][0]["hccl_ops"]


def test_msprof_output_in_the_older_per_iteration_layout(tmp_path):
    generate_msprof(tmp_path, devices=2, iterations=3, ops_per_step=30, seed=5)
    devices = sorted(tmp_path.glob("PROF_*/device_*"))
    assert [d.name for d in devices] == ["device_0", "device_1"]
    for d in devices:
        n = d.name.split("_")[1]
        assert all((d / f"{f}.{n}").is_file() and (d / f"{f}.{n}.done").is_file()
                   for f in ("info.json", "start_info", "end_info"))
        timeline = d / "timeline"
        msprof = {json.dumps(e, sort_keys=True) for f in timeline.glob("msprof_*.json") for e in events(f)}
        assert len(list(timeline.glob("msprof_*.json"))) == 3
        for pattern in ("hccl_*.json", "task_time_*.json"):  # parts of msprof_*, as msprof writes them
            assert all(json.dumps(e, sort_keys=True) in msprof for f in timeline.glob(pattern) for e in events(f))
        steps = events(next(timeline.glob("step_trace_*.json")))
        assert sorted(e["name"] for e in steps if e.get("cat") == "Iteration Time") == \
            ["Iteration 1", "Iteration 2", "Iteration 3"]
        assert all(isinstance(e.get("ts"), float) for f in timeline.glob("msprof_*.json") for e in events(f)
                   if e.get("ph") == "X")


@pytest.mark.parametrize("style", ["old", "new"])
def test_kineto_traces_of_the_gpu_twin(tmp_path, style):
    (path,) = generate_kineto(tmp_path, ranks=1, steps=1, ops_per_step=60, seed=6, style=style)
    with gzip.open(path, "rt") as fh:
        data = json.load(fh)
    evs = data["traceEvents"]
    cats = Counter(e.get("cat") for e in evs if e.get("ph") == "X")
    assert cats["cpu_op"] and cats["kernel"] and cats["cuda_runtime"]
    ends = Counter((e["cat"], str(e["id"]), e["ph"]) for e in evs if e.get("ph") in ("s", "f"))
    assert max(ends.values()) == 1 and {k[0] for k in ends} == {"ac2g", "fwdbwd"}
    labels = {e["args"]["labels"] for e in evs if e.get("ph") == "M" and e["name"] == "process_labels"}
    assert labels == {"CPU", "GPU 0"}
    assert ("baseTimeNanoseconds" in data) == (style == "new")
    assert all(isinstance(e["ts"], int) for e in evs if e.get("ph") == "X") == (style == "old")
