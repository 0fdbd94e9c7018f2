"""Golden checks of ingest against the real torch_npu samples in ../shared/real_samples."""

from __future__ import annotations

import duckdb
import pytest

from ascendscope.ingest.csvfiles import TABLES
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.ingest.trace import TraceLoad
from tests.ingest_helpers import PYTORCH_TEXT, REAL, csv_rows, expected_trace, trace_events
from tests.samples import HAVE_REAL
from tests.shared_runs import single_file

pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/real_samples is not beside the checkout")


@pytest.fixture(scope="module", params=["level0", "level1", "level2"])
def level_db(request, tmp_path_factory):
    """``(level, read-only connection)``: the sample ingested as one file (level0 and level1 are the session's,
    tests/conftest.py: the same ``ingest_path`` of the same folder)."""
    if request.param in ("level0", "level1"):
        out = request.getfixturevalue(f"{request.param}_db")
    else:
        out = single_file(tmp_path_factory, PYTORCH_TEXT / request.param)[0]  # (shared: tests/shared_runs.py)
    con = duckdb.connect(str(out), read_only=True)
    yield request.param, con
    con.close()


def test_two_ranks(level_db):
    _, con = level_db
    assert con.execute("SELECT list(rank ORDER BY rank) FROM ranks").fetchone()[0] == [0, 1]  # (the summary's)
    assert con.execute("SELECT list(rank_source ORDER BY rank) FROM ranks").fetchone()[0] == \
        ["profiler_info_file", "profiler_info_file"]


@pytest.mark.parametrize("rank", [0, 1])
def test_slices_equal_trace_x_events(level_db, rank):
    level, con = level_db
    exp = expected_trace(PYTORCH_TEXT / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    n, min_ts = con.execute("SELECT count(*), min(ts_ns) FROM slices s JOIN tracks t USING (track_id) "
                            "WHERE s.rank = ? AND NOT t.derived", [rank]).fetchone()
    assert n == exp["x_count"]
    assert min_ts == exp["min_ts_ns"]
    flows = dict(con.execute("SELECT cat, count(*) FROM flows WHERE rank = ? GROUP BY cat", [rank]).fetchall())
    assert flows == exp["flows"]
    assert set(flows) == {"async_npu", "HostToDevice", "async_task_queue", "fwdbwd"}
    assert con.execute("SELECT count(*) FROM counters WHERE rank = ?", [rank]).fetchone()[0] == exp["counter_values"]


@pytest.mark.parametrize("rank", [0, 1])
def test_each_csv_table_has_the_csv_row_count(level_db, rank):
    level, con = level_db
    out_dir = PYTORCH_TEXT / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    checked = 0
    for kind, table in TABLES.items():
        path = out_dir / f"{kind}.csv"
        n = con.execute(f"SELECT count(*) FROM {table} WHERE rank = ?", [rank]).fetchone()[0]
        assert n == (csv_rows(path) if path.exists() else 0), kind
        checked += path.exists()
    assert checked >= 6


def test_slices_are_stored_in_track_time_order(level_db):
    _, con = level_db
    bad = con.execute("""SELECT count(*) FROM (
        SELECT track_id, ts_ns, lag(track_id) OVER w AS pt, lag(ts_ns) OVER w AS pts FROM slices
        WINDOW w AS (ORDER BY slice_id))
        WHERE pt > track_id OR (pt = track_id AND pts > ts_ns)""").fetchone()[0]
    assert bad == 0


def test_lanes_and_kinds(level_db):
    level, con = level_db
    kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM tracks WHERE slice_count > 0").fetchall()}
    assert {"python", "hardware", "overlap"} <= kinds
    assert ("cann" in kinds) == (level != "level0")
    names = {n for (n,) in con.execute("SELECT DISTINCT process_name FROM tracks").fetchall()}
    assert {"Python", "Ascend Hardware", "HCCL", "Overlap Analysis", "NPU MEM"} <= names
    if level == "level0":  # the CANN process_name was pruned: its pid must still be there, with a fallback name
        orphan = con.execute("SELECT count(*) FROM tracks WHERE process_name LIKE 'Process %'").fetchone()[0]
        assert orphan > 0


def test_flows_bind_to_the_slices_they_point_at(level_db):
    _, con = level_db
    # every async_npu flow goes from a cpu_op to a device task starting exactly at the flow's end
    rows = con.execute("""
        SELECT count(*), count(*) FILTER (WHERE src.cat = 'cpu_op' AND dst.ts_ns = f.dst_ts_ns
                                          AND dt.kind IN ('hardware', 'communication'))
        FROM flows f JOIN slices src ON src.slice_id = f.src_slice_id JOIN slices dst ON dst.slice_id = f.dst_slice_id
        JOIN tracks dt ON dt.track_id = dst.track_id WHERE f.cat = 'async_npu'""").fetchone()
    assert rows[0] > 0 and rows[0] == rows[1]


def test_steps_from_profiler_step(level_db):
    level, con = level_db
    rows = con.execute("SELECT rank, step, host_start_ns <= device_start_ns, device_end_ns >= host_end_ns "
                       "FROM steps ORDER BY rank").fetchall()
    expected = []
    for rank in (0, 1):
        events = trace_events(PYTORCH_TEXT / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
                              "trace_view.json")
        expected += [(rank, int(e["name"].split("#")[1]), True, True) for e in events
                     if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    assert rows == expected and len(rows) >= 2
    if HAVE_REAL:
        assert [r[1] for r in rows] == [50, 50]


def test_overlap_lane_derived_when_missing_equals_the_profilers(tmp_path):
    """Hide the real Overlap Analysis lane: the derived one must match it to within rounding."""
    import shutil
    src = PYTORCH_TEXT / "level1" / "rank0_ascend_pt"
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(src, dst)
    trace_path = dst / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    text = trace_path.read_text(encoding="utf-8").replace('"Overlap Analysis"', '"Overlap Hidden"')
    trace_path.write_text(text, encoding="utf-8")
    out = tmp_path / "run.duckdb"
    ingest_path(tmp_path, out)
    con = duckdb.connect(str(out), read_only=True)
    derived = dict(con.execute("SELECT t.thread_name, sum(s.dur_ns) FROM slices s JOIN tracks t USING (track_id) "
                               "WHERE t.derived GROUP BY 1").fetchall())
    real = dict(con.execute("SELECT t.thread_name, sum(s.dur_ns) FROM slices s JOIN tracks t USING (track_id) "
                            "WHERE t.process_name = 'Overlap Hidden' GROUP BY 1").fetchall())
    assert con.execute("SELECT overlap_source FROM ranks").fetchone()[0] == "derived"
    assert set(derived) == set(real) == {"Computing", "Communication", "Communication(Not Overlapped)", "Free"}
    for name, total in real.items():
        assert abs(derived[name] - total) <= max(100, total * 1e-5), name
    con.close()


def test_four_rank_cluster_without_trace(tmp_path_factory):
    out, summary = single_file(tmp_path_factory, REAL / "msinsight_st_4rank_2025q4")  # (tests/shared_runs.py)
    assert summary["ranks"] == [0, 1, 2, 3]
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] == 0
    assert con.execute("SELECT bool_or(has_trace) FROM ranks").fetchone()[0] is False
    for rank in range(4):
        folder = REAL / "msinsight_st_4rank_2025q4" / "level2" / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        for kind, table in TABLES.items():
            path = folder / f"{kind}.csv"
            n = con.execute(f"SELECT count(*) FROM {table} WHERE rank = ?", [rank]).fetchone()[0]
            assert n == (csv_rows(path) if path.exists() else 0), (rank, kind)
    assert con.execute("SELECT count(DISTINCT rank) FROM comm_ops").fetchone()[0] == 4
    # analysis.db files are reported, not silently skipped
    assert con.execute("SELECT count(*) FROM warnings WHERE file LIKE '%analysis.db'").fetchone()[0] == 4
    con.close()


def test_server_fixtures_16_rank_gpt3(tmp_path_factory):
    out, summary = single_file(tmp_path_factory, REAL / "msinsight_server_fixtures")  # (tests/shared_runs.py)
    assert summary["ranks"] == [0, 1]
    con = duckdb.connect(str(out), read_only=True)
    sources = dict(con.execute("SELECT rank, rank_source FROM ranks").fetchall())
    assert sources == {0: "profiler_info_file", 1: "profiler_info_file"}
    msgs = [m for (m,) in con.execute("SELECT message FROM warnings").fetchall()]
    assert any("scientific notation" in m for m in msgs)
    files = [f for (f,) in con.execute("SELECT file FROM warnings WHERE message LIKE '%not supported%'").fetchall()]
    assert any(f.endswith("msprof_0.db") for f in files)
    assert con.execute("SELECT count(*) FROM comm_matrix").fetchone()[0] > 0
    con.close()


def test_gpu_kineto_traces_load_as_generic_traces(tmp_path_factory):
    import gzip
    import json
    folder = REAL / "hta_gpu_kineto_nonascend" / "trace_filter"
    out, summary = single_file(tmp_path_factory, folder)  # (tests/shared_runs.py)
    assert summary["ranks"] == [0, 1]
    con = duckdb.connect(str(out), read_only=True)
    for rank in (0, 1):
        events = json.loads(gzip.open(folder / f"sampled_rank-{rank}.json.gz").read())["traceEvents"]
        n_x = sum(1 for e in events if e.get("ph") == "X")
        # (beside them, the Overlap Analysis lane derived from the GPU kernels)
        assert con.execute("SELECT count(*) FROM slices s JOIN tracks t USING (track_id) "
                           "WHERE s.rank = ? AND NOT t.derived", [rank]).fetchone()[0] == n_x
    con.close()


def test_no_two_overlapping_slices_share_a_row(level_db):
    """Python frames interleave with torch ops and stream tasks overlap: rows must still never collide."""
    _, con = level_db
    overlaps = con.execute("""SELECT count(*) FROM (
        SELECT ts_ns, lag(ts_ns + dur_ns) OVER (PARTITION BY track_id, depth ORDER BY ts_ns, slice_id) AS prev_end
        FROM slices) WHERE prev_end > ts_ns""").fetchone()[0]
    assert overlaps == 0


RUN_TABLES = ["slices ORDER BY slice_id", "flows ORDER BY flow_id", "tracks ORDER BY track_id",
              "counters ORDER BY ALL", "steps ORDER BY ALL", "slice_lod ORDER BY ALL"]


def _spy_split(monkeypatch) -> list:
    """Split every trace (whatever its size) and record the range files made."""
    from ascendscope.ingest import tracesplit
    made: list = []
    real_split = tracesplit.split_ranges

    def split(path, workdir, parts):
        out = real_split(path, workdir, parts)
        made.extend(out or [])
        return out

    monkeypatch.setattr(tracesplit, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(tracesplit, "split_ranges", split)
    return made


def _tables(path):
    with duckdb.connect(str(path), read_only=True) as con:
        return {q: con.execute(f"SELECT * FROM {q}").fetchall() for q in RUN_TABLES}


@pytest.mark.parametrize("level", ["level0", "level1"])
def test_a_trace_read_in_byte_ranges_loads_the_same_run(tmp_path, monkeypatch, level):
    """One rank: its trace is read as byte ranges on two cores; the run equals the whole-file read."""
    rank = PYTORCH_TEXT / level / "rank1_ascend_pt"
    ingest_path(rank, tmp_path / "whole.duckdb")  # below the split size: one reader
    made = _spy_split(monkeypatch)
    read, outcomes = TraceLoad._read_parts, []

    def spy(self, path):
        outcomes.append(read(self, path))
        return outcomes[-1]

    monkeypatch.setattr(TraceLoad, "_read_parts", spy)
    ingest_path(rank, tmp_path / "ranges.duckdb")
    assert len(made) == 2 and not any(p.exists() for p in made)
    assert outcomes == [True]  # the ranges were read (a failed read falls back to the whole file, silently)
    assert _tables(tmp_path / "ranges.duckdb") == _tables(tmp_path / "whole.duckdb")


def test_a_separator_inside_a_string_is_not_taken_for_a_cut(tmp_path, monkeypatch):
    """The middle of the file is inside a string full of ``}, {``: the cut is after it, and the ranges read.
    (Every other cut falls back to the whole file: ``tests/ingest/test_tracesplit.py``.)"""
    import json
    trap = '}, {"ph": "X", "name": "fake", "pid": 1, "tid": 1, "ts": "5.000", "dur": 1}, {'
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},
          {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "1.000", "dur": 1, "args": {"note": trap * 50}},
          {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": "3.000", "dur": 1}]
    text = json.dumps(ev)
    middle = len(text.encode()) // 2
    assert text.find('"note"') < middle < text.find('"name": "b"')  # the middle is inside the string
    folder = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "trace_view.json").write_text(text)
    made = _spy_split(monkeypatch)
    read, outcomes = TraceLoad._read_parts, []
    monkeypatch.setattr(TraceLoad, "_read_parts", lambda self, p: outcomes.append(read(self, p)) or outcomes[-1])
    ingest_path(tmp_path / "x_ascend_pt", tmp_path / "run.duckdb")
    with duckdb.connect(str(tmp_path / "run.duckdb"), read_only=True) as con:
        assert con.execute("SELECT name FROM slices ORDER BY ts_ns").fetchall() == [("a",), ("b",)]
        assert con.execute("SELECT message FROM warnings WHERE file LIKE '%trace_view.json'").fetchall() == []
    assert len(made) == 2 and not any(p.exists() for p in made) and outcomes == [True]
