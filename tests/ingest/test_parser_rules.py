"""One tiny golden case per parser rule: a few inline events or CSV lines -> ingest -> one query -> the exact rows.

Each rule comes from the input-format notes (docs/formats.md): the case is the smallest input that shows it, so a
failure names the rule that broke. These run everywhere (no real samples needed); the real samples are checked
against their sources in test_fidelity.py and test_ingest_real.py.
"""
from __future__ import annotations

import json

import duckdb
import pytest

from ascendscope.ingest.pipeline import ingest_path

OUT = "ASCEND_PROFILER_OUTPUT"
PY, HW, CANN = 4242, 4343808, 4343744  # Python (raw OS pid); CANN-packed pids: 4242 << 10 | layer << 5 | device 0


def meta(pid: int, name: str, tid: int | None = None, thread: str | None = None) -> list[dict]:
    events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
    if thread is not None:
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}})
    return events


def x(name, pid, tid, ts, dur, cat="cpu_op", **args) -> dict:
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "cat": cat, "args": args}


def flow(ph, cat, fid, pid, tid, ts, name="f") -> dict:
    return {"ph": ph, "bp": "e", "name": name, "cat": cat, "id": fid, "pid": pid, "tid": tid, "ts": ts}


PYTHON = meta(PY, "Python", PY, f"Thread {PY}")
HARDWARE = meta(HW, "Ascend Hardware", 2, "Stream 2")


def trace_text(events) -> str:
    return json.dumps(events)


# (rule, files of one rank folder, query, expected rows)
CASES = [
    ("ts is a string of µs with exactly ns decimals: exact integer ns, no float rounding",
     {"trace_view.json": trace_text(PYTHON + [x("a", PY, PY, "1736408883694756.090", 1.5)])},
     "SELECT name, ts_ns, dur_ns FROM slices",
     [("a", 1736408883694756090, 1500)]),
    ("a numeric ts (older producers) is accepted too",
     {"trace_view.json": trace_text(PYTHON + [x("a", PY, PY, 100.25, 2)])},
     "SELECT ts_ns, dur_ns FROM slices",
     [(100250, 2000)]),
    ("dur is a float of µs: rounded once to the nearest ns",
     {"trace_view.json": trace_text(PYTHON + [x("a", PY, PY, "100.000", 12.77012757357446),
                                              x("b", PY, PY, "200.000", 0.60003125)])},
     "SELECT name, dur_ns FROM slices ORDER BY name",
     [("a", 12770), ("b", 600)]),
    ("the trace is a bare array, or an object holding traceEvents: the same slices",
     {"trace_view.json": json.dumps({"traceEvents": PYTHON + [x("a", PY, PY, "100.000", 1)]})},
     "SELECT name, ts_ns FROM slices",
     [("a", 100000)]),
    ("a CANN part appended as ',]' (nothing to append) still loads",
     {"trace_view.json": trace_text(PYTHON + [x("a", PY, PY, "100.000", 1)])[:-1] + ",]"},
     "SELECT name FROM slices",
     [("a",)]),
    ("lanes are named by process_name metadata, hardware tids are streams",
     {"trace_view.json": trace_text(PYTHON + HARDWARE + [x("k", HW, 2, "150.000", 4.1, cat=None)])},
     "SELECT t.process_name, t.thread_name, t.kind, s.name FROM slices s JOIN tracks t USING (track_id) "
     "ORDER BY s.name",
     [("Ascend Hardware", "Stream 2", "hardware", "k")]),
    ("a pid with no process_name (Level0 pruned its CANN metadata) is kept as 'Process <pid>'",
     {"trace_view.json": trace_text(PYTHON + [x("orphan", CANN, 7, "120.000", 1)])},
     "SELECT t.process_name, s.name FROM slices s JOIN tracks t USING (track_id)",
     [(f"Process {CANN}", "orphan")]),
    ("nesting: depth and parent follow containment on one thread",
     {"trace_view.json": trace_text(PYTHON + [x("outer", PY, PY, "100.000", 10), x("inner", PY, PY, "102.000", 3)])},
     "SELECT s.name, s.depth, p.name FROM slices s LEFT JOIN slices p ON p.slice_id = s.parent_id ORDER BY s.depth",
     [("outer", 0, None), ("inner", 1, "outer")]),
    ("flows pair by (cat, id): an int id and the same id as a string are one flow; another cat is another flow",
     {"trace_view.json": trace_text(PYTHON + HARDWARE + [
         x("op", PY, PY, "100.000", 10), x("k", HW, 2, "150.000", 2, cat=None),
         flow("s", "HostToDevice", 936, PY, PY, "101.000"), flow("f", "HostToDevice", "936", HW, 2, "150.000"),
         flow("s", "async_npu", 936, PY, PY, "100.000"), flow("f", "async_npu", 936, HW, 2, "150.000")])},
     "SELECT f.cat, f.flow_key, s.name, d.name FROM flows f JOIN slices s ON s.slice_id = f.src_slice_id "
     "JOIN slices d ON d.slice_id = f.dst_slice_id ORDER BY f.cat",
     [("HostToDevice", "936", "op", "k"), ("async_npu", "936", "op", "k")]),
    ("a flow end binds to the slice enclosing its (pid, tid, ts), the innermost one",
     {"trace_view.json": trace_text(PYTHON + HARDWARE + [
         x("outer", PY, PY, "100.000", 10), x("inner", PY, PY, "103.000", 2), x("k", HW, 2, "150.000", 2, cat=None),
         flow("s", "async_npu", 1, PY, PY, "104.000"), flow("f", "async_npu", 1, HW, 2, "150.000")])},
     "SELECT s.name FROM flows f JOIN slices s ON s.slice_id = f.src_slice_id",
     [("inner",)]),
    ("counter events become counter rows, one per series key",
     {"trace_view.json": trace_text(PYTHON + meta(HW + 1, "HBM") + [
         {"ph": "C", "name": "HBM 0/Read", "pid": HW + 1, "tid": 0, "ts": "100.000", "args": {"Read(MB/s)": 12.5}}])},
     "SELECT name, series, ts_ns, value FROM counters",
     [("HBM 0/Read", "Read(MB/s)", 100000, 12.5)]),
    ("CSV timestamps carry a trailing tab: read as exact ns",
     {"kernel_details.csv": 'Name,Start Time(us),Duration(us)\nk,"1736408883694756.090\t",1.5\n'},
     "SELECT name, start_ns, duration_ns FROM kernels",
     [("k", 1736408883694756090, 1500)]),
    ("headers differ by version: a unit in parentheses decides the type, unknown columns are kept",
     {"kernel_details.csv": "Name,Start Time(us),Duration(us),Wait Time(us),Brand New Column\nk,100,2,0.5,x\n"},
     "SELECT name, start_ns, duration_ns, wait_time_ns, brand_new_column FROM kernels",
     [("k", 100000, 2000, 500, "x")]),
    ("step_trace_time.csv gives µs without a unit in the header",
     {"step_trace_time.csv": "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,"
                             "Free,Stage,Bubble,Communication(Not Overlapped and Exclude Receive),Preparing\n"
                             "0,5,1000.5,20,30,50,7,1000,0,20,3\n"},
     "SELECT step, computing_ns, communication_not_overlapped_ns, free_ns FROM step_trace",
     [(5, 1000500, 20000, 7000)]),
]


@pytest.mark.parametrize("rule, files, sql, expected", CASES, ids=[c[0][:60] for c in CASES])
def test_parser_rule(tmp_path, rule, files, sql, expected):
    rank = tmp_path / "run" / "r0_ascend_pt"
    (rank / OUT).mkdir(parents=True)
    for name, text in files.items():
        (rank / OUT / name).write_text(text, encoding="utf-8")
    out = tmp_path / "out.duckdb"
    ingest_path(tmp_path / "run", out)
    con = duckdb.connect(str(out), read_only=True)
    try:
        warnings = con.execute("SELECT file, message FROM warnings").fetchall()
        assert con.execute(sql).fetchall() == expected, (rule, warnings)
    finally:
        con.close()
