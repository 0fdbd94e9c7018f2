"""Bad input gets a clear warning naming the file and what is wrong, and the rest of the run still loads."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import duckdb
import pytest

from ascendscope.ingest import lod
from ascendscope.ingest.pipeline import NoProfilingData, ingest_path
from tests.ingest_helpers import PYTORCH_TEXT, REAL, csv_rows, expected_trace

# the inline-trace tests run everywhere; these need ../shared/real_samples
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/real_samples is not beside the checkout")
RANK0 = PYTORCH_TEXT / "level1" / "rank0_ascend_pt"


@pytest.fixture
def rank_copy(tmp_path):
    if not RANK0.is_dir():
        pytest.skip(f"real sample {RANK0} not found")
    dst = tmp_path / "run" / "rank0_ascend_pt"
    shutil.copytree(RANK0, dst)
    return dst


def _ingest(folder, tmp_path):
    out = tmp_path / "out.duckdb"
    ingest_path(folder, out)
    return duckdb.connect(str(out), read_only=True)


def _warnings(con):
    return con.execute("SELECT file, message FROM warnings").fetchall()


def test_truncated_trace_names_file_and_offset_and_keeps_the_rest(rank_copy, tmp_path):
    trace = rank_copy / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) * 6 // 10])
    con = _ingest(rank_copy.parent, tmp_path)
    msgs = [m for f, m in _warnings(con) if f.endswith("trace_view.json")]
    assert any("truncated" in m and f"byte {len(data) * 6 // 10}" in m for m in msgs), msgs
    n = con.execute("SELECT count(*) FROM slices").fetchone()[0]
    assert 0 < n < expected_trace(RANK0 / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")["x_count"]
    assert con.execute("SELECT status FROM files WHERE kind = 'trace_view'").fetchone()[0] == "partial"
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == \
        csv_rows(RANK0 / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")


def test_invalid_json_in_the_middle(rank_copy, tmp_path):
    trace = rank_copy / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    data = trace.read_bytes()
    mid = data.index(b'}, {"', len(data) // 2) + 1
    trace.write_bytes(data[:mid] + b",{oops" + data[mid:])
    con = _ingest(rank_copy.parent, tmp_path)
    msgs = [m for f, m in _warnings(con) if f.endswith("trace_view.json")]
    assert any("byte" in m for m in msgs), msgs
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM operators").fetchone()[0] > 0


def test_empty_and_missing_files(rank_copy, tmp_path):
    out_dir = rank_copy / "ASCEND_PROFILER_OUTPUT"
    (out_dir / "kernel_details.csv").write_bytes(b"")
    (out_dir / "trace_view.json").unlink()
    con = _ingest(rank_copy.parent, tmp_path)
    assert ("rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "not loaded: empty file") in _warnings(con)
    assert con.execute("SELECT has_trace FROM ranks").fetchone()[0] is False
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM operators").fetchone()[0] == \
        csv_rows(RANK0 / "ASCEND_PROFILER_OUTPUT" / "operator_details.csv")


@needs_real
def test_spreadsheet_numbers_are_loaded_with_a_warning(tmp_path):
    src = REAL / "msinsight_server_fixtures" / "test_rank_1"
    dst = tmp_path / "run" / "test_rank_1"
    shutil.copytree(src, dst)
    con = _ingest(dst.parent, tmp_path)
    rows = con.execute("SELECT count(*), count(timestamp_ns) FROM memory_record").fetchone()
    assert rows[0] == rows[1] == csv_rows(src / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv")
    assert any("memory_record.csv" in f and "scientific notation" in m for f, m in _warnings(con))


def test_non_utf8_bytes(rank_copy, tmp_path):
    path = rank_copy / "ASCEND_PROFILER_OUTPUT" / "operator_details.csv"
    data = path.read_bytes()
    first_row = data.index(b"\n") + 1
    path.write_bytes(data[:first_row] + b"\xff\xfe" + data[first_row:])
    trace = rank_copy / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    tdata = trace.read_bytes()
    pos = tdata.index(b'"name": "aten::') + len(b'"name": "aten::')
    trace.write_bytes(tdata[:pos] + b"\xff" + tdata[pos:])
    con = _ingest(rank_copy.parent, tmp_path)
    assert con.execute("SELECT count(*) FROM operators").fetchone()[0] == csv_rows(path)
    assert con.execute("SELECT count(*) FROM operators WHERE name LIKE '\ufffd%'").fetchone()[0] == 1
    msgs = _warnings(con)
    assert any(f.endswith("operator_details.csv") and "not UTF-8" in m for f, m in msgs)
    assert any(f.endswith("trace_view.json") and "not UTF-8" in m for f, m in msgs)
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] == \
        expected_trace(RANK0 / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")["x_count"]


def test_folder_without_profiling_data_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    out = tmp_path / "x.duckdb"
    with pytest.raises(NoProfilingData, match="no profiling data"):
        ingest_path(tmp_path / "empty", out)
    proc = subprocess.run([sys.executable, "-m", "ascendscope.ingest", str(tmp_path / "empty"), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "no profiling data" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def _mini_trace(events):
    return [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "Python"}}] + events


@pytest.mark.parametrize("variant", ["trailing_comma", "object", "gz", "numeric_ts"])
def test_trace_container_variants(tmp_path, variant):
    events = _mini_trace([
        {"ph": "X", "name": "outer", "pid": 7, "tid": 7, "ts": "1700000000000100.250", "dur": 10.5, "cat": "cpu_op"},
        {"ph": "X", "name": "inner", "pid": 7, "tid": 7, "ts": "1700000000000101.001", "dur": 2, "cat": "cpu_op"},
    ])
    folder = tmp_path / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    name = "trace_view.json"
    if variant == "numeric_ts":
        text = json.dumps(events).replace('"1700000000000100.250"', "1700000000000100.250") \
            .replace('"1700000000000101.001"', "1700000000000101.001")
    elif variant == "object":
        text = json.dumps({"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ns", "x": [1, 2]})
    else:
        text = json.dumps(events)
    if variant == "trailing_comma":
        text = text[:-1] + ",]"
    if variant == "gz":
        name += ".gz"
        (folder / name).write_bytes(gzip.compress(text.encode()))
    else:
        (folder / name).write_text(text)
    con = _ingest(tmp_path, tmp_path)
    rows = con.execute("SELECT name, ts_ns, dur_ns, depth FROM slices ORDER BY ts_ns").fetchall()
    assert rows == [("outer", 1700000000000100250, 10500, 0), ("inner", 1700000000000101001, 2000, 1)]


@needs_real
def test_failed_ingest_leaves_no_file(tmp_path, monkeypatch):
    def boom(con):
        raise RuntimeError("simulated crash while writing")
    monkeypatch.setattr(lod, "build", boom)
    out = tmp_path / "run.duckdb"
    with pytest.raises(RuntimeError):
        ingest_path(RANK0, out)
    assert list(tmp_path.iterdir()) == []


def test_depth_parent_and_flow_binding_on_an_inline_trace(tmp_path):
    ev = _mini_trace([
        {"ph": "X", "name": "a", "pid": 7, "tid": 1, "ts": "100.000", "dur": 10},        # [100, 110]
        {"ph": "X", "name": "b", "pid": 7, "tid": 1, "ts": "100.000", "dur": 4},         # child, same start
        {"ph": "X", "name": "c", "pid": 7, "tid": 1, "ts": "104.000", "dur": 6},         # touching sibling of b
        {"ph": "X", "name": "z", "pid": 7, "tid": 1, "ts": "104.000", "dur": 0},         # instant inside c
        {"ph": "X", "name": "d", "pid": 7, "tid": 1, "ts": "110.000", "dur": 1},         # touches a's end
        {"ph": "B", "name": "e", "pid": 7, "tid": 2, "ts": "100.000"},
        {"ph": "B", "name": "f", "pid": 7, "tid": 2, "ts": "101.000"},
        {"ph": "E", "pid": 7, "tid": 2, "ts": "102.000"},
        {"ph": "E", "pid": 7, "tid": 2, "ts": "105.000"},
        {"ph": "s", "cat": "k", "id": 1, "name": "fl", "pid": 7, "tid": 1, "ts": "105.000"},
        {"ph": "f", "cat": "k", "id": 1, "bp": "e", "pid": 7, "tid": 2, "ts": "101.500"},
        {"ph": "s", "cat": "k", "id": "2", "name": "fl", "pid": 7, "tid": 2, "ts": "103.000"},
        {"ph": "f", "cat": "k", "id": 2, "pid": 7, "tid": 1, "ts": "109.000"},             # no bp: next slice
    ])
    folder = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "trace_view.json").write_text(json.dumps(ev))
    con = _ingest(tmp_path, tmp_path)
    rows = con.execute("""SELECT s.name, s.dur_ns, s.depth, p.name FROM slices s LEFT JOIN slices p
                          ON p.slice_id = s.parent_id ORDER BY s.slice_id""").fetchall()
    assert rows == [("a", 10000, 0, None), ("b", 4000, 1, "a"), ("c", 6000, 1, "a"), ("z", 0, 2, "c"),
                    ("d", 1000, 0, None), ("e", 5000, 0, None), ("f", 1000, 1, "e")]
    flows = con.execute("""SELECT f.flow_key, s.name, d.name FROM flows f
                           LEFT JOIN slices s ON s.slice_id = f.src_slice_id
                           LEFT JOIN slices d ON d.slice_id = f.dst_slice_id ORDER BY f.flow_key""").fetchall()
    assert flows == [("1", "c", "f"), ("2", "e", "d")]


def test_partially_overlapping_slices_get_their_own_rows(tmp_path):
    ev = _mini_trace([
        {"ph": "X", "name": "a", "pid": 7, "tid": 1, "ts": "100.000", "dur": 10},   # [100, 110]
        {"ph": "X", "name": "b", "pid": 7, "tid": 1, "ts": "105.000", "dur": 10},   # [105, 115]: outlives a
        {"ph": "X", "name": "c", "pid": 7, "tid": 1, "ts": "112.000", "dur": 8},    # [112, 120]: inside b only
        {"ph": "X", "name": "d", "pid": 7, "tid": 1, "ts": "121.000", "dur": 1},    # after everything
    ])
    folder = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "trace_view.json").write_text(json.dumps(ev))
    con = _ingest(tmp_path, tmp_path)
    rows = con.execute("""SELECT s.name, s.depth, p.name FROM slices s LEFT JOIN slices p ON p.slice_id = s.parent_id
                          ORDER BY s.slice_id""").fetchall()
    assert rows == [("a", 0, None), ("b", 1, "a"), ("c", 2, "b"), ("d", 0, None)]


def test_string_pids_and_tids_from_other_producers(tmp_path):
    ev = [{"ph": "M", "name": "process_name", "pid": "Spans", "tid": 0, "args": {"name": "Spans"}},
          {"ph": "X", "name": "a", "pid": "Spans", "tid": "stream 7", "ts": "1.000", "dur": 1},
          {"ph": "X", "name": "b", "pid": 3, "tid": 4, "ts": "2.000", "dur": 1}]
    folder = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "trace_view.json").write_text(json.dumps(ev))
    con = _ingest(tmp_path, tmp_path)
    rows = con.execute("SELECT t.process_name, t.thread_name, s.name FROM slices s JOIN tracks t USING (track_id) "
                       "ORDER BY s.ts_ns").fetchall()
    assert rows == [("Spans", "stream 7", "a"), ("Process 3", "Thread 4", "b")]


def test_timestamps_that_are_not_numbers_are_skipped_and_reported(tmp_path):
    ev = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "1736408883600478.839", "dur": 1},
          {"ph": "X", "name": "bad", "pid": 1, "tid": 1, "ts": "N/A", "dur": 1},
          {"ph": "X", "name": "huge", "pid": 1, "tid": 1, "ts": "99999999999999999999.5", "dur": 1},
          {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": "1736408883600479.0004", "dur": 1}]
    folder = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "trace_view.json").write_text(json.dumps(ev))
    con = _ingest(tmp_path, tmp_path)
    assert con.execute("SELECT name, ts_ns FROM slices ORDER BY ts_ns").fetchall() == [
        ("a", 1736408883600478839), ("b", 1736408883600479000)]
    assert any("2 events without a usable ts were skipped" in m for _, m in _warnings(con))


@needs_real
def test_a_trace_failing_after_its_slices_are_written_leaves_no_rows(tmp_path, monkeypatch):
    """Slices are appended while flows are still derived; a later failure removes that rank's rows again."""
    from ascendscope.ingest import trace
    real_sql = trace.TraceLoad.sql

    def failing_sql(self, template, params=None, **names):
        # (the two ranks are staged together first, then, that having failed, each alone; a group's events are
        # dropped before the steps, its tracks are not)
        probe = f"SELECT bool_or(rank = 1) FROM {self.p}tracks"
        if template is trace.STEPS and self.cur.execute(probe).fetchone()[0]:
            raise duckdb.Error("simulated failure deriving the steps")
        return real_sql(self, template, params, **names)

    monkeypatch.setattr(trace.TraceLoad, "sql", failing_sql)
    con = _ingest(PYTORCH_TEXT / "level1", tmp_path)
    per_rank = dict(con.execute("SELECT rank, count(*) FROM slices GROUP BY rank").fetchall())
    assert per_rank == {0: expected_trace(RANK0 / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")["x_count"]}
    for table in ("tracks", "flows", "counters", "steps"):
        assert con.execute(f"SELECT count(*) FROM {table} WHERE rank = 1").fetchone()[0] == 0, table
    assert con.execute("SELECT has_trace FROM ranks ORDER BY rank").fetchall() == [(True,), (False,)]
    assert ("rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json",
            "not loaded: simulated failure deriving the steps") in _warnings(con)
    kernels = PYTORCH_TEXT / "level1" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    assert con.execute("SELECT count(*) FROM kernels WHERE rank = 1").fetchone()[0] == csv_rows(kernels)


def test_flow_ends_that_pair_or_bind_to_nothing_are_counted(tmp_path):
    ev = _mini_trace([
        {"ph": "X", "name": "op", "pid": 7, "tid": 1, "ts": "100.000", "dur": 10},
        {"ph": "X", "name": "task", "pid": 7, "tid": 2, "ts": "200.000", "dur": 5},
        {"ph": "s", "cat": "k", "id": 1, "pid": 7, "tid": 1, "ts": "101.000"},             # a normal flow
        {"ph": "f", "cat": "k", "id": 1, "bp": "e", "pid": 7, "tid": 2, "ts": "201.000"},
        {"ph": "s", "cat": "k", "id": 2, "pid": 7, "tid": 1, "ts": "102.000"},             # no finish
        {"ph": "f", "cat": "k", "id": 3, "bp": "e", "pid": 7, "tid": 2, "ts": "202.000"},  # no start
        {"ph": "s", "cat": "k", "id": 4, "pid": 7, "tid": 1, "ts": "150.000"},             # inside no slice
        {"ph": "f", "cat": "k", "id": 4, "bp": "e", "pid": 7, "tid": 2, "ts": "300.000"},  # inside no slice
        {"ph": "s", "cat": "j", "id": 4, "pid": 7, "tid": 9, "ts": "100.000"},             # a lane without slices
        {"ph": "f", "cat": "j", "id": 4, "bp": "e", "pid": 7, "tid": 2, "ts": "201.000"},
    ])
    folder = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "trace_view.json").write_text(json.dumps(ev))
    con = _ingest(tmp_path, tmp_path)
    assert con.execute("SELECT cat, flow_key, src_slice_id IS NULL, dst_slice_id IS NULL FROM flows "
                       "ORDER BY cat, flow_key").fetchall() == [
        ("j", "4", True, False), ("k", "1", False, False), ("k", "4", True, True)]
    messages = sorted(m for _, m in _warnings(con) if m.startswith("flows"))
    assert messages == [
        "flows 'j': 1 flow starts bound to no slice (1 on a lane without slices, as at Level0: CANN API slices "
        "not exported)",
        "flows 'k': 1 flow starts without a finish, 1 flow finishes without a start, 1 flow starts bound to no "
        "slice, 1 flow finishes bound to no slice"]


def test_a_csv_whose_layout_cannot_be_read_is_named_and_the_rest_loads(rank_copy, tmp_path):
    ops = rank_copy / "ASCEND_PROFILER_OUTPUT" / "operator_details.csv"
    ops.write_text(ops.read_text(encoding="utf-8").splitlines()[0] + '\naten::mul,"3,,1.0,2.0\n', encoding="utf-8")
    con = _ingest(rank_copy.parent, tmp_path)
    assert con.execute("SELECT count(*) FROM operators").fetchone()[0] == 0
    (msg,) = [m for f, m in _warnings(con) if f.endswith("operator_details.csv")]
    assert msg.startswith("not loaded: the CSV's layout could not be read (an unterminated quote")
    assert str(tmp_path) not in msg
    kernels = rank_copy / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == csv_rows(kernels)
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] > 0


# One bad event must not cost the rank its trace: each case below is one event among good ones in an inline
# trace; the good events all load and a warning names the file and the bad event's byte offset.

GOOD = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "Python"}},
        {"ph": "X", "name": "a", "pid": 7, "tid": 1, "ts": "100.000", "dur": 1},
        {"ph": "X", "name": "b", "pid": 7, "tid": 1, "ts": "102.000", "dur": 2.5}]
TRACE = "r_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"


def _with_bad_event(bad: str) -> tuple[str, int]:
    """GOOD with the raw JSON text ``bad`` as its second event, and the byte offset where it begins."""
    head = json.dumps(GOOD[:1])[:-1] + ", "
    text = head + bad + ", " + json.dumps(GOOD[1:])[1:]
    return text, len(head.encode())


def _rank_folder(tmp_path, files: dict[str, bytes | str]):
    for rel, data in files.items():
        path = tmp_path / "run" / "r_ascend_pt" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return _ingest(tmp_path / "run", tmp_path)


def _slices(con):
    return con.execute("SELECT name, ts_ns, dur_ns FROM slices ORDER BY ts_ns").fetchall()


GOOD_SLICES = [("a", 100000, 1000), ("b", 102000, 2500)]


@pytest.mark.parametrize("dur", ["NaN", '"NaN"', "Infinity", '"Infinity"', "-Infinity", "1e300",
                                 "9223372036854775.808", "9223372036854775808", '"soon"', "[1]"])
def test_an_event_whose_dur_is_not_a_duration_is_skipped(tmp_path, dur):
    text, at = _with_bad_event('{"ph": "X", "name": "bad", "pid": 7, "tid": 1, "ts": "101.000", "dur": ' + dur + "}")
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    assert (TRACE, "1 X events whose dur is not a usable duration (not a number, infinite, or ending beyond the "
                   f"int64 range of ns) were skipped (the first at byte {at})") in _warnings(con)


def test_an_event_ending_beyond_the_int64_range_is_skipped(tmp_path):
    # ts and dur each fit in int64 ns, their sum does not
    text, at = _with_bad_event('{"ph": "X", "name": "bad", "pid": 7, "tid": 1, "ts": "1736408883600478.000", '
                               '"dur": 9000000000000000}')
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    assert any(f == TRACE and m.startswith("1 X events whose dur is not a usable duration") and f"at byte {at}" in m
               for f, m in _warnings(con))


@pytest.mark.parametrize("ts", ["NaN", '"NaN"', "Infinity", '"Infinity"', "1e300", '"1e300"',
                                '"9223372036854775.808"', "9223372036854775808"])
def test_an_event_whose_ts_is_not_a_time_is_skipped_and_located(tmp_path, ts):
    text, at = _with_bad_event('{"ph": "X", "name": "bad", "pid": 7, "tid": 1, "ts": ' + ts + ', "dur": 1}')
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    assert (TRACE, f"1 events without a usable ts were skipped (the first at byte {at})") in _warnings(con)


def test_times_too_far_apart_for_an_int64_interval_are_skipped(tmp_path):
    # each time fits in int64 ns, but E - B of this pair would not: times beyond ±2^62 ns are not usable
    text, at = _with_bad_event('{"ph": "B", "name": "bad", "pid": 7, "tid": 2, "ts": "-9000000000000000.000"}, '
                               '{"ph": "E", "pid": 7, "tid": 2, "ts": "9000000000000000.000"}')
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    # the B is before 1970 too: it is named apart
    assert (TRACE, f"1 events with a negative ts (before 1970) were skipped (the first at byte {at}); the events "
                   "around them were loaded") in _warnings(con)
    end_at = at + text[at:].index('{"ph": "E"')
    assert (TRACE, f"1 events without a usable ts were skipped (the first at byte {end_at})") in _warnings(con)


def test_an_event_with_a_duplicated_key_is_skipped(tmp_path):
    text, at = _with_bad_event('{"ph": "X", "name": "bad", "pid": 7, "tid": 1, "ts": "101.000", "ts": "101.500", '
                               '"dur": 1}')
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    assert (TRACE, f'an event with a duplicated key "ts" at byte {at} was skipped; the events around it were '
                   "loaded") in _warnings(con)
    assert con.execute("SELECT status FROM files WHERE kind = 'trace_view'").fetchone()[0] == "partial"


def test_a_skipped_event_is_located_in_the_original_file_not_in_a_rewritten_copy(tmp_path):
    # the object form and numeric ts make ingest read a rewritten copy; the offset is still the original's
    text, _ = _with_bad_event('{"ph": "X", "name": "bad", "pid": 7, "tid": 1, "ts": 101, "ts": 101.5, "dur": 1}')
    text = '{"schemaVersion": 1, "traceEvents": ' + text.replace('"100.000"', "100.000") + "}"
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    at = text.index('{"ph": "X", "name": "bad"')
    assert (TRACE, f'an event with a duplicated key "ts" at byte {at} was skipped; the events around it were '
                   "loaded") in _warnings(con)


def test_damaged_events_are_located_in_the_uncompressed_data_of_a_gz_trace(tmp_path):
    text, at = _with_bad_event('{oops}')
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json.gz": gzip.compress(text.encode())})
    assert _slices(con) == GOOD_SLICES
    (msg,) = [m for f, m in _warnings(con) if f.endswith("trace_view.json.gz")]
    assert msg == (f"invalid JSON (unexpected character): the damaged event at byte {at} of the uncompressed data "
                   "was skipped; the events around it were loaded")


COMM = {"step1": {"collective": {"hcom_allReduce__1@g": {
    "Communication Time Info": {"Start Timestamp(us)": "100.5", "Elapse Time(ms)": 0.5},
    "Communication Bandwidth Info": {}}}}}
MATRIX = {"step1": {"collective": {"allreduce-top1@g": {"0-1": {
    "Transport Type": "HCCS", "Transit Size(MB)": 1.0, "Transit Time(ms)": 0.1, "Bandwidth(GB/s)": 10.0}}}}}
SIDE_FILES = {
    "ASCEND_PROFILER_OUTPUT/trace_view.json": json.dumps(GOOD),
    "ASCEND_PROFILER_OUTPUT/kernel_details.csv": 'Name,Start Time(us),Duration(us)\nk,"100.000\t",1.5\n',
    "ASCEND_PROFILER_OUTPUT/communication.json": json.dumps(COMM),
    "ASCEND_PROFILER_OUTPUT/communication_matrix.json": json.dumps(MATRIX),
    "profiler_info_3.json": json.dumps({"config": {"experimental_config": {"_profiler_level": "Level1"}}}),
    "profiler_metadata.json": json.dumps({"trace_id": "t1"}),
}


def _everything_loaded(con) -> None:
    assert _slices(con) == GOOD_SLICES
    assert con.execute("SELECT name, start_ns, duration_ns FROM kernels").fetchall() == [("k", 100000, 1500)]
    assert con.execute("SELECT op_name, elapse_time_ns FROM comm_ops").fetchall() == [("hcom_allReduce__1", 500000)]
    assert con.execute("SELECT src_rank, dst_rank, transit_time_ns FROM comm_matrix").fetchall() == [(0, 1, 100000)]
    assert con.execute("SELECT rank, profiler_level, profiler_metadata ->> 'trace_id' FROM ranks").fetchall() == [
        (3, "Level1", "t1")]


def test_the_side_files_load_as_a_whole(tmp_path):
    _everything_loaded(_rank_folder(tmp_path, SIDE_FILES))


@pytest.mark.parametrize("name", sorted(SIDE_FILES))
def test_a_utf8_byte_order_mark_is_accepted(tmp_path, name):
    # nothing is lost or changed, so no warning either
    files = {**SIDE_FILES, name: b"\xef\xbb\xbf" + SIDE_FILES[name].encode()}
    con = _rank_folder(tmp_path, files)
    _everything_loaded(con)
    assert _warnings(con) == []


def test_a_loose_trace_with_a_byte_order_mark_is_recognised(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trace_rank1.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    con = _ingest(tmp_path / "run", tmp_path)
    assert _slices(con) == GOOD_SLICES


@pytest.mark.parametrize("before", [
    '"otherData": {"traceEvents": [{"ph": "X"}]}',                               # in a metadata object
    '"meta": {"run": {"args": {"traceEvents": []}}, "note": "traceEvents"}',     # deeper, and as a value
    '"deviceProperties": [{"traceEvents": [1, 2]}]',                             # in an array
])
def test_a_nested_trace_events_key_before_the_real_one(tmp_path, before):
    text = "{" + before + ', "traceEvents": ' + json.dumps(GOOD) + "}"
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    nested, real = text.index('"traceEvents"'), text.rindex('"traceEvents"')
    assert (TRACE, f'a nested "traceEvents" key at byte {nested} was not taken for the event array (the top-level '
                   f"one at byte {real} was read)") in _warnings(con)


@pytest.mark.parametrize("name", ["profiler_info_3.json", "profiler_metadata.json",
                                  "ASCEND_PROFILER_OUTPUT/communication.json",
                                  "ASCEND_PROFILER_OUTPUT/communication_matrix.json"])
def test_json_nested_too_deeply_for_python_is_a_warning(tmp_path, name):
    con = _rank_folder(tmp_path, {**SIDE_FILES, name: "[" * 100_000})
    assert _slices(con) == GOOD_SLICES
    assert con.execute("SELECT rank FROM ranks").fetchall() == [(3,)]
    (msg,) = [m for f, m in _warnings(con) if f == "r_ascend_pt/" + name]
    assert msg.endswith("nested too deeply to be read")
    assert con.execute("SELECT count(*) FROM files WHERE file = ?", ["r_ascend_pt/" + name]).fetchone()[0] == 1


def test_a_very_wide_csv_fails_alone(tmp_path):
    """10,000 columns used to exhaust the ingest's memory limit; now the file is refused from its header."""
    wide = tmp_path / "wide.csv"
    with open(wide, "w") as fh:
        fh.write(",".join(f"c{i}" for i in range(10_000)) + "\n")
        fh.writelines(["1," * 9_999 + "1\n"] * 2_000)
    files = {**SIDE_FILES, "ASCEND_PROFILER_OUTPUT/op_statistic.csv": wide.read_bytes(),
             "ASCEND_PROFILER_OUTPUT/operator_details.csv":
                 "Name,Input Shapes,Device Self Duration(us)\nop,\"1,2\",3\n"}
    con = _rank_folder(tmp_path, files)
    _everything_loaded(con)
    assert con.execute("SELECT name, device_self_duration_ns FROM operators").fetchall() == [("op", 3000)]
    assert _warnings(con) == [("r_ascend_pt/ASCEND_PROFILER_OUTPUT/op_statistic.csv",
                               "not loaded: 10000 columns in the header, more than the 512 a profiler CSV can have; "
                               "the file was not read")]
    assert con.execute("SELECT count(*) FROM op_statistic").fetchone()[0] == 0


@pytest.mark.parametrize("block", [1, 2, 3, 7])
def test_a_csv_is_checked_block_by_block_as_if_whole(tmp_path, monkeypatch, block):
    """A CSV of gigabytes is checked for UTF-8 a block at a time (bounded memory): the first bad byte and the
    repaired copy are those of the whole file, whatever the block size
    (a character cut by a block boundary is not a bad byte)."""
    import random

    from ascendscope.ingest import csvfiles

    monkeypatch.setattr(csvfiles, "READ_BLOCK", block)
    rng = random.Random(block)
    pieces = [b"a,b\n", "é".encode(), "中文".encode(), b"1e5", b"\xff", b"x", b"2E-3", b"\xe4\xb8", b"9", b"e"]
    for i in range(200):
        data = b"h1,h2\n" + b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 25)))
        path = tmp_path / f"f{i}.csv"
        path.write_bytes(data)
        cl = csvfiles.CsvLoad(None, f"p{i}_", "kernel_details", path, 0, path.name, tmp_path)
        cl._readable()
        try:
            data.decode("utf-8")
            first_bad = None
        except UnicodeDecodeError as exc:
            first_bad = exc.start
        said = [w for w in cl.warnings if "not UTF-8" in w]
        assert said == ([] if first_bad is None else
                        [f"bytes that are not UTF-8 (first at byte {first_bad}) replaced with U+FFFD"]), data
        if first_bad is not None:
            assert (tmp_path / f"p{i}_{path.name}").read_text(encoding="utf-8") == data.decode("utf-8", "replace")


def test_a_csv_bigger_than_the_reader_default_buffer_loads_under_the_memory_limit(tmp_path, monkeypatch):
    """DuckDB's CSV buffer defaults to 16 of the longest lines allowed (1 GiB at our 64 MB), more than a 1 GB
    memory limit holds: every CSV over ~1 GB failed. Scaled down: 1 MB lines allowed, a 64 MB limit, a 100 MB
    file."""
    from ascendscope.ingest import csvfiles

    monkeypatch.setattr(csvfiles, "MAX_LINE_BYTES", 4 << 20)
    monkeypatch.setattr(csvfiles, "CSV_BUFFER_BYTES", 8 << 20)
    path = tmp_path / "kernel_details.csv"
    row = "MatMul,KERNEL_AICORE," + "x" * 80 + "\n"
    with open(path, "w") as fh:
        fh.write("Name,Type,Note\n")
        fh.write(row * (100_000_000 // len(row)))
    con = duckdb.connect()
    con.execute("SET memory_limit = '64MB'")
    cl = csvfiles.CsvLoad(con, "p_", "kernel_details", path, 0, path.name, tmp_path)
    assert con.execute(f"SELECT count(*) FROM {cl._reader(path, None)}").fetchone()[0] == 100_000_000 // len(row)
    monkeypatch.setattr(csvfiles, "CSV_BUFFER_BYTES", 64 << 20)  # (16 lines: the default's share of the limit)
    with pytest.raises(duckdb.OutOfMemoryException):
        con.execute(f"SELECT count(*) FROM {cl._reader(path, None)}").fetchone()
