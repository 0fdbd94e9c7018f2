"""The msprof reader (ingest/readers/msprof*.py): raw CANN ``PROF_*`` folders.

Golden checks on the real older-layout sample (``mindinsight_msprof_2dev_2023``: per-iteration timeline files of
two devices): every event of the per-iteration ``msprof_*.json`` files becomes exactly one slice (the metadata they
repeat, the ``hccl_*``/``task_time_*`` files that hold parts of them and the ``step_trace_*`` files that repeat
every iteration are not counted twice), times exact to the ns, one rank per device. The current layout
(``mindstudio_profiler_output``) has no public sample: a small one is built here from the format description.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.pipeline import NoProfilingData, ingest_path
from tests.conftest import REAL_SAMPLES
from tests.ingest_helpers import us_text_to_ns
from tests.shared_runs import single_file

OLDER = REAL_SAMPLES / "mindinsight_msprof_2dev_2023"
MSPROF_DB = REAL_SAMPLES / "msinsight_server_fixtures" / "full_db" / "msprof_0.db"
needs_older = pytest.mark.skipif(not OLDER.is_dir(), reason=f"real sample not found at {OLDER}")


def _events(path: Path) -> list[dict]:
    """A timeline file's events with every number kept as its text (so times convert exactly)."""
    return json.loads(path.read_text(encoding="utf-8"), parse_float=str, parse_int=str)


def _dur_ns(text: str) -> int:
    return int((Decimal(text) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _expected_device(timeline: Path) -> dict:
    """What the device's timeline holds, read independently: the events of its msprof_*.json files but those
    repeated from an earlier file (a file may repeat metadata within itself: those are kept, as in any trace), and
    the per-lane X events (process name, thread name) -> sorted (ts_ns, dur_ns)."""
    seen, events = set(), []
    for f in sorted(timeline.glob("msprof_*.json")):
        keys = [(json.dumps(e, sort_keys=True), e) for e in _events(f)]
        events += [e for key, e in keys if key not in seen]
        seen |= {key for key, _ in keys}
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    lanes: dict[tuple[str, str], list] = {}
    for e in events:
        if e["ph"] == "X":
            lane = (procs[e["pid"]], threads.get((e["pid"], e["tid"]), f"Thread {e['tid']}"))
            lanes.setdefault(lane, []).append((us_text_to_ns(e["ts"]), _dur_ns(e["dur"])))
    return {"events": len(events), "phases": Counter(e["ph"] for e in events),
            "lanes": {k: sorted(v) for k, v in lanes.items()},
            "iterations": sorted(int(e["name"].split()[1]) for e in events
                                 if e["ph"] == "X" and e.get("cat") == "Iteration Time")}


@pytest.fixture(scope="module")
def older(tmp_path_factory):
    out, summary = single_file(tmp_path_factory, OLDER)  # (shared: tests/shared_runs.py)
    con = duckdb.connect(str(out), read_only=True)
    yield summary, con
    con.close()


def _device_timelines() -> list[tuple[int, Path]]:
    return sorted((int(d.name.split("_")[1]), d / "timeline") for d in OLDER.glob("PROF_*/device_*"))


@needs_older
def test_older_layout_one_rank_per_device(older):
    summary, con = older
    assert summary["ranks"] == [0, 1]
    rows = con.execute("SELECT rank, device_id, rank_source, has_trace, overlap_source FROM ranks ORDER BY rank")
    assert rows.fetchall() == [(0, 0, "msprof_info", True, "trace"), (1, 1, "msprof_info", True, "trace")]
    for rank, timeline in _device_timelines():
        expected = _expected_device(timeline)
        files = con.execute("SELECT file, kind, rows, status FROM files WHERE rank = ?", [rank]).fetchall()
        assert files == [(f"{timeline.relative_to(OLDER)}/msprof_*.json", "msprof_timeline", expected["events"],
                          "loaded")]


@needs_older
@pytest.mark.parametrize("rank,timeline", _device_timelines() if OLDER.is_dir() else [])
def test_older_layout_every_event_once_times_exact(older, rank, timeline):
    _, con = older
    expected = _expected_device(timeline)
    got: dict[tuple[str, str], list] = {}
    for proc, thread, ts, dur in con.execute("""
            SELECT t.process_name, t.thread_name, s.ts_ns, s.dur_ns FROM slices s JOIN tracks t USING (track_id)
            WHERE s.rank = ? AND NOT t.derived""", [rank]).fetchall():
        got.setdefault((proc, thread), []).append((ts, dur))
    assert {k: sorted(v) for k, v in got.items()} == expected["lanes"]
    assert sum(len(v) for v in got.values()) == expected["phases"]["X"]
    # the same iterations appear once each (step_trace_* files repeat all ten in every file)
    assert con.execute("SELECT list(step ORDER BY step) FROM steps WHERE rank = ?", [rank]).fetchone()[0] == \
        expected["iterations"] == list(range(1, 11))
    # the s/t pairs of "Data_aug Bound" have no finish: no flow, and both are named in the warnings
    assert con.execute("SELECT count(*) FROM flows WHERE rank = ?", [rank]).fetchone()[0] == 0
    notes = [m for (m,) in con.execute("SELECT message FROM warnings WHERE rank = ?", [rank]).fetchall()]
    assert f"flows 'Data_aug Bound': {expected['phases']['s']} flow starts without a finish" in notes
    assert f"{expected['phases']['t']} events of phases not shown yet (t) were skipped" in notes
    assert "30 hccl_*, task_time_* and step_trace_* files not read: their events are in the msprof_*.json files, " \
           "which were read" in notes


@needs_older
@pytest.mark.parametrize("rank,timeline", _device_timelines() if OLDER.is_dir() else [])
def test_the_files_not_read_hold_nothing_more(rank, timeline):
    """What justifies reading only msprof_*: every event of the other per-iteration files is in them (step trace
    events under another pid, as the Step Trace thread of Ascend Hardware)."""
    msprof = {json.dumps(e, sort_keys=True) for f in timeline.glob("msprof_*.json") for e in _events(f)}
    for pattern in ("hccl_*.json", "task_time_*.json"):
        for f in timeline.glob(pattern):
            assert all(json.dumps(e, sort_keys=True) in msprof for e in _events(f)), f.name
    in_msprof = Counter((e["name"], e["ts"], e["dur"]) for f in timeline.glob("msprof_*.json") for e in _events(f)
                        if e["ph"] == "X" and e.get("cat") in ("Iteration Time", "FP_BP Time", "Iteration Refresh",
                                                               "Reduce"))
    for f in timeline.glob("step_trace_*.json"):
        steps = Counter((e["name"], e["ts"], e["dur"]) for e in _events(f) if e["ph"] == "X")
        assert steps == in_msprof, f.name


@needs_older
def test_older_layout_views_answer(tmp_path, tmp_path_factory):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    store = RunStore(tmp_path / "data")
    run = store.create_run("msprof", str(OLDER))
    db, summary = single_file(tmp_path_factory, OLDER)  # (the module's ``older``: tests/shared_runs.py)
    shutil.copy(db, store.db_path(run.id))
    store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(tmp_path / "data")))) as client:
        def get(path):
            r = client.get(f"/api/runs/{run.id}/{path}")
            assert r.status_code == 200, (path, r.text)
            return r.json()

        # the iterations split the Overlap Analysis lane in the Summary
        assert get("summary")["base"]["steps"] == list(range(1, 11))
        kinds = {t["kind"] for t in get("timeline/tracks")["tracks"]}
        assert {"cann", "hardware", "communication", "overlap"} <= kinds


# -- a PROF_* folder that is not read ---------------------------------------------------------------------------
def test_a_prof_folder_inside_a_rank_folder_is_raw_data(tmp_path):
    rank = tmp_path / "run" / "node_1_ascend_pt"
    (rank / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(_json(_trace([0, 1])))
    (rank / "profiler_info_5.json").write_text("{}")
    _current_layout(rank / PROF)
    summary = ingest_path(tmp_path / "run", tmp_path / "run.duckdb")
    con = duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)
    assert summary["ranks"] == [5]
    assert con.execute("SELECT list(kind ORDER BY kind) FROM files").fetchone()[0] == ["profiler_info", "trace_view"]
    # no kernel of the PROF folder's op_summary: the rank's kernels are its trace's tasks (typeless, and said)
    assert con.execute("SELECT count(*) FROM kernels WHERE type IS NOT NULL").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM warnings WHERE file = 'kernel_details.csv'").fetchone()[0] == 1


def test_a_prof_folder_without_exported_data_is_named(tmp_path):
    (tmp_path / "run" / PROF / "device_0" / "data").mkdir(parents=True)
    with pytest.raises(NoProfilingData) as err:
        ingest_path(tmp_path / "run", tmp_path / "run.duckdb")
    assert any(f == PROF and "without exported data" in m for _, f, m in err.value.warnings)


# -- the current layout (mindstudio_profiler_output), built from the format description --------------------------
PROF = "PROF_000001_20250109090000123_ABCDEFGHIJKLMNOP"
T0 = "1736413200000000"  # µs, 2025-01-09


def _ts(offset_us: str) -> str:
    whole, _, frac = offset_us.partition(".")
    return f"{int(T0) + int(whole)}.{(frac + '000')[:3]}"


def _trace(slice_ids: list[int]) -> list[dict]:
    """Slices of one msprof timeline: every slice repeats the lanes' metadata (as msprof writes them)."""
    meta = [
        {"name": "process_name", "pid": 2080, "tid": 0, "args": {"name": "CANN"}, "ph": "M"},
        {"name": "process_labels", "pid": 2080, "tid": 0, "args": {"labels": "CPU"}, "ph": "M"},
        {"name": "thread_name", "pid": 2080, "tid": 7, "args": {"name": "Thread 7"}, "ph": "M"},
        {"name": "process_name", "pid": 2083, "tid": 0, "args": {"name": "Ascend Hardware"}, "ph": "M"},
        {"name": "process_labels", "pid": 2083, "tid": 0, "args": {"labels": "NPU"}, "ph": "M"},
        {"name": "thread_name", "pid": 2083, "tid": 2, "args": {"name": "Stream 2"}, "ph": "M"},
        {"name": "process_name", "pid": 2085, "tid": 0, "args": {"name": "Communication"}, "ph": "M"},
        {"name": "thread_name", "pid": 2085, "tid": 0, "args": {"name": "Group 0 Communication"}, "ph": "M"},
    ]
    parts = {
        0: [{"name": "AscendCL@aclnnAdd", "pid": 2080, "tid": 7, "ts": _ts("10.001"), "dur": 5.5, "ph": "X",
             "args": {"connection_id": 1}},
            {"name": "HostToDevice1", "pid": 2080, "tid": 7, "ts": _ts("10.001"), "ph": "s", "cat": "HostToDevice",
             "id": "1"},
            {"name": "Add_AiCore", "pid": 2083, "tid": 2, "ts": _ts("20.5"), "dur": 4.1, "ph": "X",
             "args": {"Task Type": "AI_VECTOR_CORE", "connection_id": 1}}],
        1: [{"name": "HostToDevice1", "pid": 2083, "tid": 2, "ts": _ts("20.5"), "ph": "f", "cat": "HostToDevice",
             "id": "1", "bp": "e"},
            # a numeric ts (older producers) with more digits than a float64 holds: read as its exact text
            {"name": "MatMul_AiCore", "pid": 2083, "tid": 2, "ts": "NUMBER" + _ts("30.25"), "dur": 2.000125, "ph": "X",
             "args": {"Task Type": "AI_CORE"}},
            {"name": "hcom_allReduce__1_0_1", "pid": 2085, "tid": 0, "ts": _ts("31"), "dur": 3, "ph": "X",
             "args": {}}],
    }
    events = []
    for i in slice_ids:
        events += meta + parts[i]
    return events


OP_SUMMARY = [
    "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),"
    "Task Duration(us),Task Wait Time(us),Block Num,Mix Block Num,Input Shapes,Context ID,aicore_time(us)",
    f'3,4294967295,11,2,aclnnAdd_AddAiCore_Add,Add,static,AI_VECTOR_CORE,{_ts("20.5")}\t,4.1,0.32,8,0,"""8,16""",'
    "4294967295,3.9",
    f"3,4294967295,12,2,aclnnMatmul_MatMulAiCore,MatMul,dynamic,AI_CORE,{_ts('30.25')}\t,2.000125,0,24,0,"
    '"""8,16;16,8""",4294967295,1.75',
]
OP_SUMMARY_SLICE_1 = [
    OP_SUMMARY[0],
    f"3,4294967295,13,5,hcom_allReduce__1_0_1,hcom_allReduce_,N/A,HCCL,{_ts('31')}\t,3,0.5,0,0,N/A,N/A,N/A",
]
OP_STATISTIC = ["Device_id,Model Name,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),"
                "Max Time(us),Ratio(%)",
                "3,N/A,Add,AI_VECTOR_CORE,1,4.1,4.1,4.1,4.1,67.21", "3,N/A,MatMul,AI_CORE,1,2.000125,2.000125,"
                "2.000125,2.000125,32.79"]
API_STATISTIC = ["Device_id,Level,API Name,Time(us),Count,Avg(us),Min(us),Max(us),Variance",
                 "host,acl,aclnnAdd,5.5,1,5.5,5.5,5.5,0"]
STEP_TRACE = ["Device_id,Iteration ID,FP Start(us),BP End(us),Iteration End(us),Iteration Time(us),"
              "FP to BP Time(us),Iteration Refinement(us),Data Aug Bound(us),Model ID",
              f"3,1,{_ts('10')},{_ts('30')},{_ts('40.5')},35.25,20,10.5,N/A,4294967295"]
COMMUNICATION = {  # as msprof --analyze writes it: keyed by operator
    "hcom_allReduce__1_0_1@7340": {
        "Communication Time Info": {"Start Timestamp(us)": float(_ts("31")), "Elapse Time(ms)": 0.003,
                                    "Transit Time(ms)": 0.001, "Wait Time(ms)": 0.0015,
                                    "Synchronization Time(ms)": 0.0005, "Idle Time(ms)": 0.0005,
                                    "Wait Time Ratio": 0.6, "Synchronization Time Ratio": 0.3333},
        "Communication Bandwidth Info": {"HCCS": {"Transit Size(MB)": 0.5, "Transit Time(ms)": 0.001,
                                                 "Bandwidth(GB/s)": 500.0, "Large Packet Ratio": 0.0,
                                                 "Size Distribution": {"0.5": [1, 0.001]}}}},
    "hcom_send__2_0_1@7341": {
        "Communication Time Info": {"Start Timestamp(us)": float(_ts("35")), "Elapse Time(ms)": 0.002,
                                    "Transit Time(ms)": 0.002, "Wait Time(ms)": 0, "Synchronization Time(ms)": 0,
                                    "Idle Time(ms)": 0, "Wait Time Ratio": 0, "Synchronization Time Ratio": 0},
        "Communication Bandwidth Info": {}},
}
MATRIX = {"hcom_allReduce__1_0_1@7340": {"3-4": {"Transport Type": "HCCS", "Transit Size(MB)": 0.5,
                                                  "Transit Time(ms)": 0.001, "Bandwidth(GB/s)": 500.0}}}


def _json(events: list[dict]) -> str:
    """JSON text of the events, with "NUMBER<digits>" strings written as bare numbers."""
    return re.sub(r'"NUMBER([-0-9.]+)"', r"\1", json.dumps(events))


def _current_layout(prof: Path, *, info: dict | None = None) -> Path:
    out = prof / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    (prof / "device_3").mkdir()
    (prof / "host").mkdir()
    if info is not None:
        (prof / "device_3" / "info.json.3").write_text(json.dumps(info))
    (out / "msprof_slice_0_20250109090001.json").write_text(_json(_trace([0])))
    (out / "msprof_slice_1_20250109090001.json").write_text(_json(_trace([1])))
    (out / "op_summary_slice_0_20250109090001.csv").write_text("\r\n".join(OP_SUMMARY) + "\r\n")
    (out / "op_summary_slice_1_20250109090001.csv").write_text("\r\n".join(OP_SUMMARY_SLICE_1) + "\r\n")
    (out / "op_statistic_20250109090001.csv").write_text("\n".join(OP_STATISTIC) + "\n")
    (out / "api_statistic_20250109090001.csv").write_text("\n".join(API_STATISTIC) + "\n")
    (out / "step_trace_20250109090001.csv").write_text("\n".join(STEP_TRACE) + "\n")
    (out / "npu_mem_20250109090001.csv").write_text("Device_id,event,ddr(KB),hbm(KB),memory(KB),timestamp(us)\n")
    (out / "task_time_20250109090001.csv").write_text("Device_id,kernel_name\n")
    (out / "README.txt").write_text("msprof output\n")
    (prof / "analyze").mkdir()
    (prof / "analyze" / "communication.json").write_text(json.dumps(COMMUNICATION))
    (prof / "analyze" / "communication_matrix.json").write_text(json.dumps(MATRIX))
    return prof


@pytest.fixture(scope="module")
def current(tmp_path_factory):
    root = tmp_path_factory.mktemp("msprof-current")
    _current_layout(root / "run" / PROF)
    summary = ingest_path(root / "run", root / "run.duckdb")
    con = duckdb.connect(str(root / "run.duckdb"), read_only=True)
    yield summary, con
    con.close()


def test_current_layout_is_one_rank_named_by_its_device(current):
    summary, con = current
    assert summary["ranks"] == [3]
    assert con.execute("SELECT device_id, rank_source, has_trace FROM ranks").fetchone() == (3, "device_id", True)
    files = con.execute("SELECT file, kind, rows, status FROM files ORDER BY kind").fetchall()
    out = f"{PROF}/mindstudio_profiler_output"
    assert files == [
        (f"{out}/api_statistic_*.csv", "msprof_api_statistic", 1, "loaded"),
        (f"{PROF}/analyze/communication.json", "msprof_communication", 2, "loaded"),
        (f"{PROF}/analyze/communication_matrix.json", "msprof_communication_matrix", 1, "loaded"),
        (f"{out}/op_statistic_*.csv", "msprof_op_statistic", 2, "loaded"),
        (f"{out}/op_summary_*.csv", "msprof_op_summary", 3, "loaded"),
        (f"{out}/msprof_*.json", "msprof_timeline", len(_trace([0, 1])) - 8, "loaded")]
    notes = dict((m, f) for f, m in con.execute("SELECT file, message FROM warnings").fetchall())
    assert notes["msprof output names no rank id: rank 3 is the device id"] == f"{PROF}/device_3"
    assert notes["not read (2 files; ascendscope reads msprof_*.json, op_summary, op_statistic, api_statistic and "
                 "step_trace from msprof output): npu_mem_*.csv, task_time_*.csv"] == out


def test_current_layout_timeline_slices_merge_once(current):
    _, con = current
    rows = con.execute("""SELECT t.process_name, s.name, s.ts_ns, s.dur_ns FROM slices s JOIN tracks t USING (track_id)
                          WHERE NOT t.derived ORDER BY s.ts_ns""").fetchall()
    base = int(T0) * 1000
    assert rows == [("CANN", "AscendCL@aclnnAdd", base + 10_001, 5_500),
                    ("Ascend Hardware", "Add_AiCore", base + 20_500, 4_100),
                    ("Ascend Hardware", "MatMul_AiCore", base + 30_250, 2_000),
                    ("Communication", "hcom_allReduce__1_0_1", base + 31_000, 3_000)]
    assert con.execute("SELECT cat, src_ts_ns, dst_ts_ns FROM flows").fetchall() == \
        [("HostToDevice", base + 10_001, base + 20_500)]
    # msprof writes no ProfilerStep: the iteration of step_trace_*.csv is the step
    assert con.execute("SELECT step, device_start_ns, device_end_ns FROM steps").fetchall() == \
        [(1, base + 40_500 - 35_250, base + 40_500)]
    # no Overlap Analysis lane in the timeline: derived, as for a trace_view.json
    assert con.execute("SELECT overlap_source FROM ranks").fetchone()[0] == "derived"


def test_current_layout_op_summary_is_kernel_details_shaped(current):
    _, con = current
    base = int(T0) * 1000
    rows = con.execute("""SELECT src_row, device_id, name, type, accelerator_core, start_ns, duration_ns, wait_time_ns,
                                 block_dim, stream_id, task_id, input_shapes, aicore_time_ns
                          FROM kernels ORDER BY src_row""").fetchall()
    assert rows == [
        (1, 3, "aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", base + 20_500, 4_100, 320, 8, 2, 11, '"8,16"',
         3_900),
        (2, 3, "aclnnMatmul_MatMulAiCore", "MatMul", "AI_CORE", base + 30_250, 2_000, 0, 24, 2, 12, '"8,16;16,8"',
         1_750),
        (3, 3, "hcom_allReduce__1_0_1", "hcom_allReduce_", "HCCL", base + 31_000, 3_000, 500, 0, 5, 13, "N/A",
         None)]
    assert con.execute("SELECT list(op_type ORDER BY src_row), sum(count) FROM op_statistic").fetchone() == \
        (["Add", "MatMul"], 2)
    assert con.execute("SELECT level, api_name, time_ns FROM api_statistic").fetchall() == [("acl", "aclnnAdd", 5_500)]


def test_current_layout_communication_keyed_by_operator(current):
    _, con = current
    ops = con.execute("SELECT step, comm_type, op_name, group_id, start_ns, elapse_time_ns FROM comm_ops "
                      "ORDER BY op_name").fetchall()
    base = int(T0) * 1000
    assert ops == [("step", "collective", "hcom_allReduce__1_0_1", "7340", base + 31_000, 3_000),
                   ("step", "p2p", "hcom_send__2_0_1", "7341", base + 35_000, 2_000)]
    assert con.execute("SELECT src_rank, dst_rank, transport_type, transit_time_ns FROM comm_matrix").fetchall() == \
        [(3, 4, "HCCS", 1_000)]


def test_current_layout_rank_from_info_json(tmp_path):
    _current_layout(tmp_path / "run" / PROF, info={"rank_id": 12, "devices": "3"})
    summary = ingest_path(tmp_path / "run", tmp_path / "run.duckdb")
    con = duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)
    assert summary["ranks"] == [12]
    assert con.execute("SELECT device_id, rank_source FROM ranks").fetchone() == (3, "msprof_info")


def test_a_repeated_event_is_read_once_and_counted(tmp_path):
    prof = _current_layout(tmp_path / "run" / PROF)
    # the second slice also repeats the first one's kernel: one slice, and a warning that counts it
    (prof / "mindstudio_profiler_output" / "msprof_slice_1_20250109090001.json").write_text(
        _json(_trace([1]) + _trace([0])[-1:]))
    ingest_path(tmp_path / "run", tmp_path / "run.duckdb")
    con = duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM slices WHERE name = 'Add_AiCore'").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM warnings WHERE message = "
                       "'1 events repeated exactly in an earlier file were read once (1 X)'").fetchone()[0] == 1


def test_a_damaged_slice_costs_only_itself(tmp_path):
    prof = _current_layout(tmp_path / "run" / PROF)
    (prof / "mindstudio_profiler_output" / "msprof_slice_1_20250109090001.json").write_text("[{\"ph\": \"X\", ")
    ingest_path(tmp_path / "run", tmp_path / "run.duckdb")
    con = duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)
    assert con.execute("SELECT status FROM files WHERE kind = 'msprof_timeline'").fetchone()[0] == "partial"
    assert con.execute("SELECT list(name ORDER BY ts_ns) FROM slices s JOIN tracks t USING (track_id) "
                       "WHERE NOT t.derived").fetchone()[0] == ["AscendCL@aclnnAdd", "Add_AiCore"]
    assert any(m.startswith("msprof_slice_1_20250109090001.json: not loaded:")
               for (m,) in con.execute("SELECT message FROM warnings").fetchall())


def test_a_rank_folder_without_output_reads_its_exported_prof_folder(tmp_path):
    rank = tmp_path / "run" / "worker_ascend_pt"
    rank.mkdir(parents=True)
    (rank / "profiler_info_2.json").write_text("{}")
    _current_layout(rank / PROF)
    summary = ingest_path(tmp_path / "run", tmp_path / "run.duckdb")
    con = duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)
    assert summary["ranks"] == [2]
    assert con.execute("SELECT device_id, rank_source FROM ranks").fetchone() == (3, "profiler_info_file")
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 3
    assert con.execute("SELECT count(*) FROM warnings WHERE message LIKE 'no ASCEND_PROFILER_OUTPUT folder: read the "
                       "msprof output of %'").fetchone()[0] == 1


@pytest.mark.skipif(not MSPROF_DB.is_file(), reason=f"{MSPROF_DB} not found")
def test_a_prof_folder_with_only_its_db(tmp_path):
    prof = tmp_path / "run" / PROF
    (prof / "device_0").mkdir(parents=True)
    shutil.copy(MSPROF_DB, prof / "msprof_20250109090001.db")
    summary = ingest_path(tmp_path / "run", tmp_path / "run.duckdb")
    alone = ingest_path(MSPROF_DB, tmp_path / "alone.duckdb")
    con = duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)
    assert summary["ranks"] == [0]
    assert con.execute("SELECT kind, file FROM files").fetchall() == [("db_export", f"{PROF}/msprof_20250109090001.db")]
    assert summary["slices_per_kind"] == alone["slices_per_kind"] and summary["counters"] == alone["counters"]
