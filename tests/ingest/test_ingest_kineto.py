"""The Chrome-trace reader (ingest/readers/chrome.py) on PyTorch/Kineto GPU traces: golden counts on the real HTA
samples (every X and instant event a slice, flows paired by (cat, id), times exact to the ns and shifted by
Kineto's baseTimeNanoseconds), GPU lanes sorted as device lanes, and small built traces for each rule."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.pipeline import ingest_path
from tests.conftest import REAL_SAMPLES
from tests.ingest_helpers import us_text_to_ns

HTA = REAL_SAMPLES / "hta_gpu_kineto_nonascend"
needs_hta = pytest.mark.skipif(not HTA.is_dir(), reason=f"real sample not found at {HTA}")
SAMPLES = ["trace_filter/sampled_rank-0.json.gz", "trace_filter/sampled_rank-1.json.gz",
           "nccl_parser_config/nccl_data.json.gz"]


def _trace(path: Path) -> dict:
    """The file with every number kept as its text (so times convert exactly)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.loads(fh.read(), parse_float=str, parse_int=str)


def _expected(path: Path) -> dict:
    data = _trace(path)
    events = data["traceEvents"]
    base = int(data.get("baseTimeNanoseconds", 0))
    timed = [e for e in events if e.get("ph") in ("X", "i", "I")]
    ends = {"s": Counter(), "f": Counter()}
    for e in events:
        if e.get("ph") in ends:
            ends[e["ph"]][(e.get("cat"), str(e.get("id")))] += 1
    # Kineto gives every (cat, id) at most one start and one finish: a flow wherever both exist
    assert max([*ends["s"].values(), *ends["f"].values(), 1]) == 1
    flows = Counter(key[0] for key in ends["s"] if ends["f"][key])
    return {"slices": len(timed), "flows": dict(flows), "base": base,
            "min_ts_ns": min(us_text_to_ns(e["ts"]) for e in timed) + base,
            "steps": sorted(int(e["name"].split("#")[1]) for e in events
                            if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")),
            "gpu_x": sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in
                         ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"))}


@pytest.fixture(scope="module", params=SAMPLES)
def sample(request, tmp_path_factory):
    path = HTA / request.param
    if not path.is_file():
        pytest.skip(f"real sample {path} not found")
    out = tmp_path_factory.mktemp("kineto") / "run.duckdb"
    summary = ingest_path(path, out)
    con = duckdb.connect(str(out), read_only=True)
    yield path, summary, con
    con.close()


@needs_hta
def test_every_event_is_a_slice_and_flows_pair_by_cat_and_id(sample):
    path, summary, con = sample
    expected = _expected(path)
    # the trace's own events; the Overlap Analysis lane derived from its kernels is on a derived track
    assert con.execute("SELECT count(*) FROM slices s JOIN tracks t USING (track_id) "
                       "WHERE NOT t.derived").fetchone()[0] == expected["slices"]
    assert summary["flows_per_category"] == expected["flows"]
    assert con.execute("SELECT kind, rows, status FROM files").fetchall() == \
        [("chrome_trace", len(_trace(path)["traceEvents"]), "loaded")]
    assert con.execute("SELECT list(step ORDER BY step) FROM steps").fetchone()[0] == (expected["steps"] or None)


@needs_hta
def test_times_are_exact_and_kineto_base_time_is_added(sample):
    path, _, con = sample
    expected = _expected(path)
    assert con.execute("SELECT min(ts_ns) FROM slices").fetchone()[0] == expected["min_ts_ns"]
    assert con.execute("SELECT start_ns FROM ranks").fetchone()[0] == expected["min_ts_ns"]
    notes = [m for (m,) in con.execute("SELECT message FROM warnings").fetchall()]
    shifted = f"ts values are relative to baseTimeNanoseconds ({expected['base']}): it was added to every time"
    assert (shifted in notes) == bool(expected["base"])


@needs_hta
def test_gpu_streams_are_device_lanes_after_the_host_lanes(sample):
    path, _, con = sample
    rows = con.execute("SELECT kind, label, sort_index, slice_count FROM tracks WHERE counter_name IS NULL").fetchall()
    gpu = [r for r in rows if (r[1] or "").startswith("GPU")]
    host = [r for r in rows if r[1] == "CPU"]
    assert gpu and host
    assert {r[0] for r in gpu} == {"hardware"} and {r[0] for r in host} == {"python"}
    assert max(r[2] for r in host) < min(r[2] for r in gpu)
    assert sum(r[3] for r in gpu) == _expected(path)["gpu_x"]


# -- built traces ---------------------------------------------------------------------------------------------------
KINETO = {
    "schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000, "displayTimeUnit": "ms",
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 77, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 77, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 77, "tid": 78, "ts": 1000.5, "dur": 20.25},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": 78, "ts": 1005, "dur": 3},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 77, "tid": 78, "ts": 1005},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1030.125, "dur": 8.5},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 1030.125, "bp": "e"},
    ]}


def _ingest(tmp_path: Path, name: str, data) -> duckdb.DuckDBPyConnection:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_text(json.dumps(data))
    ingest_path(tmp_path / "in" / name, tmp_path / "run.duckdb")
    return duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True)


def test_a_pt_trace_json_opens_with_its_base_time(tmp_path):
    con = _ingest(tmp_path, "worker0.1700000000.pt.trace.json", KINETO)
    base = KINETO["baseTimeNanoseconds"]
    rows = con.execute("SELECT t.kind, s.name, s.ts_ns, s.dur_ns FROM slices s JOIN tracks t USING (track_id) "
                       "ORDER BY s.ts_ns").fetchall()
    assert rows == [("python", "aten::mm", base + 1_000_500, 20_250),
                    ("python", "cudaLaunchKernel", base + 1_005_000, 3_000),
                    ("hardware", "gemm", base + 1_030_125, 8_500),
                    ("overlap", "Computing", base + 1_030_125, 8_500)]  # derived from the kernel
    assert con.execute("SELECT cat, src_ts_ns, dst_ts_ns FROM flows").fetchall() == \
        [("ac2g", base + 1_005_000, base + 1_030_125)]
    assert con.execute("SELECT kind FROM files").fetchone()[0] == "chrome_trace"
    # the keys it uses are not reported as left out
    notes = [m for (m,) in con.execute("SELECT message FROM warnings").fetchall()]
    assert "top-level keys beside traceEvents not loaded: schemaVersion" in notes


def test_a_base_time_that_is_not_an_integer_is_reported(tmp_path):
    con = _ingest(tmp_path, "trace.json", {**KINETO, "baseTimeNanoseconds": "soon"})
    assert con.execute("SELECT min(ts_ns) FROM slices").fetchone()[0] == 1_000_500
    assert "baseTimeNanoseconds is not an integer (soon): times read as written" in \
        [m for (m,) in con.execute("SELECT message FROM warnings").fetchall()]


def test_a_loose_trace_view_json_is_still_the_text_export(tmp_path):
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},
              {"ph": "X", "name": "aten::add", "pid": 1, "tid": 1, "ts": "1700000000000000.001", "dur": 1.0}]
    con = _ingest(tmp_path, "trace_view.json", events)
    assert con.execute("SELECT kind FROM files").fetchone()[0] == "trace_view"
    assert con.execute("SELECT kind, ts_ns FROM slices JOIN tracks USING (track_id)").fetchone() == \
        ("python", 1_700_000_000_000_000_001)
