"""The views say the same on every export of a run and name their real sources: System View's Computing split
whatever the trace's Task Type says, the Operator view of a Level0 or trace-only rank, Level0 communication from
the trace, the db export's sources (analysis.db, not step_trace_time.csv) and its zero transports. Expected values
come from the source files (the real samples, or their generated twins)."""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from collections import Counter
from contextlib import closing

import pytest

from tests.conftest import DB_SAMPLES, PYTORCH_TEXT, ingest_ready

COMMUNICATION = ("HCCL", "COMMUNICATION")


def get(client, run_id, path, **params):
    r = client.get(f"/api/runs/{run_id}/{path}", params=params)
    assert r.status_code == 200, (path, r.text)
    return r.json()


def csv_cores(level: str, rank: int) -> Counter:
    path = PYTORCH_TEXT / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with path.open(newline="") as fh:
        return Counter(r["Accelerator Core"] for r in csv.DictReader(fh))


def split(overall: dict) -> dict[str, int]:
    computing = overall["rows"][0]
    assert computing["name"] == "Computing Time"
    return {c["name"]: c["count"] for c in computing["children"]}


@pytest.fixture(scope="module")
def other_task_type(runs, tmp_path_factory) -> str:
    """The text level1 run with every Ascend Hardware task's Task Type written as "Other" (as some CANN versions
    write it): its kernel_details.csv must name the cores."""
    src = PYTORCH_TEXT / "level1"
    dst = tmp_path_factory.mktemp("other") / "level1-other"
    shutil.copytree(src, dst)
    for rank in (0, 1):
        path = dst / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
        events = json.loads(path.read_text())
        hw = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
              and e["args"]["name"] == "Ascend Hardware"}
        for e in events:
            if e.get("ph") == "X" and e.get("pid") in hw and "Task Type" in (e.get("args") or {}):
                e["args"]["Task Type"] = "Other"
        path.write_text(json.dumps(events))
    return ingest_ready(runs.data_dir, {"other": dst})["other"]


@pytest.mark.parametrize("rank", (0, 1))
def test_computing_splits_by_the_kernel_rows_whatever_the_task_type_says(client, other_task_type, rank):
    want = {core: n for core, n in csv_cores("level1", rank).items() if core not in COMMUNICATION}
    assert split(get(client, other_task_type, "systemview/overall", rank=rank)) == want


@pytest.mark.parametrize("rank", (0, 1))
def test_the_computing_count_is_explained_against_the_operator_view(client, db_runs, rank):
    body = get(client, db_runs["level1"], "systemview/overall", rank=rank)
    cores = csv_cores("level1", rank)
    comm = sum(n for core, n in cores.items() if core in COMMUNICATION)
    assert sum(split(body).values()) == sum(cores.values()) - comm
    assert get(client, db_runs["level1"], "operators", rank=rank)["kernel_count"] == sum(cores.values())
    assert body["notes"][0] == (f"The Operator view's {sum(cores.values()):,} kernels include {comm:,} communication "
                                f"operator{'s' if comm != 1 else ''} (HCCL), counted here under Communication.")


def db_path(name: str, rank: int):
    return DB_SAMPLES[name] / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"


@pytest.mark.parametrize("rank", (0, 1))
def test_a_db_run_splits_computing_by_its_compute_task_info(client, db_runs, rank):
    with closing(sqlite3.connect(f"{db_path('db_level1', rank).as_uri()}?mode=ro&immutable=1", uri=True)) as src:
        want = dict(src.execute("SELECT s.value, count(*) FROM COMPUTE_TASK_INFO c JOIN TASK USING (globalTaskId) "
                                "JOIN STRING_IDS s ON s.id = c.taskType GROUP BY 1").fetchall())
    assert split(get(client, db_runs["db_level1"], "systemview/overall", rank=rank)) == want


def test_level0_groups_kernels_by_name(client, db_runs):
    for run in ("level0", "db_level0"):
        ov = get(client, db_runs[run], "operators", rank=0)
        assert ov["group_by"] == "name" and "N/A in a Level0 export" in ov["group_by_note"]
        assert ov["types"]["by"] == "name" and "N/A" not in {t["type"] for t in ov["types"]["rows"]}
        assert all(r["name"] for r in ov["top"]["rows"])
        assert get(client, db_runs[run], "operators", rank=0, group_by="type")["group_by"] == "type"
    level1 = get(client, db_runs["level1"], "operators", rank=0)
    assert level1["group_by"] == "type" and level1["group_by_note"] is None and level1["types"]["by"] == "type"


def test_level0_communication_lists_the_traces_ops_saying_what_is_missing(client, db_runs):
    ov = get(client, db_runs["level0"], "communication")
    assert ov["from_trace_ranks"] == [0, 1] and ov["from_trace_lacks"] == ["communication.json"]
    db0 = get(client, db_runs["db_level0"], "communication")  # the db export names its table
    assert db0["from_trace_ranks"] == [0, 1] and db0["from_trace_lacks"] == ["CommAnalyzerTime (analysis.db)"]
    for row in ov["totals"]["rows"]:
        assert row["elapse_only"] and row["elapse_time_ns"] > 0 and row["wait_time_ns"] is None
    assert ov["totals"]["most_waiting"] is None
    ops = get(client, db_runs["level0"], "communication/ops", limit=500)
    assert ops["total"] > 0 and all(r["transit_time_ns"] is None for r in ops["rows"])
    assert get(client, db_runs["level1"], "communication")["from_trace_ranks"] == []


def test_db_runs_name_the_table_their_numbers_came_from(client, db_runs):
    summary = get(client, db_runs["db_level1"], "summary")
    assert {r["source_name"] for r in summary["breakdown"]} == {"analysis.db StepTraceTime"}
    assert summary["step_trace_names"] == ["analysis.db StepTraceTime"]
    text = get(client, db_runs["level1"], "summary")
    assert {r["source_name"] for r in text["breakdown"]} == {"step_trace_time.csv"}
    findings = get(client, db_runs["db_level1"], "advice")["findings"]
    files = {f["source"].get("file") for f in findings} - {None}
    assert "step_trace_time.csv" not in files and "communication.json" not in files
    cmp = client.get("/api/compare", params={"a": db_runs["db_level1"], "b": db_runs["level1"]}).json()
    assert cmp["breakdown"]["source_name"] == {"a": "analysis.db StepTraceTime", "b": "step_trace_time.csv"}
    assert cmp["kernels"]["source_name"]["a"] == "ascend_pytorch_profiler_0.db TASK + COMPUTE_TASK_INFO"


def test_db_bandwidth_lists_every_transport_as_the_text_export_does(client, db_runs):
    for run in ("db_level1", "level1"):
        rows = {t["transport"]: t for t in get(client, db_runs[run], "communication/bandwidth", rank=0)["transports"]}
        assert set(rows) == {"HCCS", "PCIE", "RDMA", "SDMA", "SIO"}, run
        assert rows["RDMA"]["transit_size_mb"] == 0 and rows["SIO"]["transit_time_ns"] == 0
