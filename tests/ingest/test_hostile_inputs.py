"""Hostile values in otherwise good input: each is skipped or bounded alone, a warning names the file and where,
and the rest of the run loads (a negative ts, a 50 MB event, args nested 900 levels deep, step times that are not
numbers)."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from tests.ingest.test_ingest_bad_input import (
    GOOD,
    GOOD_SLICES,
    TRACE,
    _rank_folder,
    _slices,
    _warnings,
    _with_bad_event,
)
from tests.samples import PYTORCH_TEXT


def test_an_event_before_1970_is_skipped_not_stretching_the_run(tmp_path):
    text, at = _with_bad_event('{"ph": "X", "name": "old", "pid": 7, "tid": 1, "ts": "-1736408883704643.212", '
                               '"dur": 1}')
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    assert con.execute("SELECT start_ns, end_ns FROM ranks").fetchone() == (100_000, 104_500)
    assert (TRACE, f"1 events with a negative ts (before 1970) were skipped (the first at byte {at}); the events "
                   "around them were loaded") in _warnings(con)


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_50_mb_event_is_skipped_alone(tmp_path, where):
    huge = {"ph": "X", "name": "huge", "pid": 7, "tid": 1, "ts": "101.000", "dur": 1, "args": {"s": "x" * (50 << 20)}}
    events = list(GOOD)
    events.insert({"first": 0, "middle": 2, "last": 3}[where], huge)
    text = json.dumps(events)
    at = text.index('{"ph": "X", "name": "huge"')
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert _slices(con) == GOOD_SLICES
    notes = [m for f, m in _warnings(con) if f == TRACE]
    assert f"an event of 50.0 MB at byte {at} was skipped: one event may take at most 16 MB (a huge string in its " \
           "args?); the events around it were loaded" in notes
    assert con.execute("SELECT status FROM files WHERE kind = 'trace_view'").fetchone()[0] == "partial"


def test_args_nested_900_levels_deep_are_dropped_with_a_warning(tmp_path, client_for):
    deep = '{"a": ' * 900 + "1" + "}" * 900
    text, at = _with_bad_event('{"ph": "X", "name": "deep", "pid": 7, "tid": 1, "ts": "101.000", "dur": 1, '
                               '"args": ' + deep + "}")
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    assert [n for n, _, _ in _slices(con)] == ["a", "deep", "b"]
    assert (TRACE, f"1 events with args nested deeper than 64 levels were loaded without their args (the first at "
                   f"byte {at})") in _warnings(con)
    slice_id = con.execute("SELECT slice_id FROM slices WHERE name = 'deep'").fetchone()[0]
    con.close()
    client, run_id = client_for(tmp_path / "out.duckdb")
    detail = client.get(f"/api/runs/{run_id}/timeline/slices/{slice_id}")
    assert detail.status_code == 200 and detail.json()["args"] == {"args": "not loaded: nested deeper than 64 levels"}


@pytest.mark.parametrize(("depth", "dropped"), [(64, False), (65, True)])
def test_deep_args_are_found_however_they_are_spaced(tmp_path, depth, dropped):
    """Nesting written across lines, as a pretty-printer would, and the bound itself: 64 levels are kept."""
    deep = "{\"a\":\n   " * (depth - 3) + "[\n\t[1]]" + "\n}" * (depth - 3)  # with the args object: depth levels
    text, _ = _with_bad_event('{"ph": "X", "name": "deep", "pid": 7, "tid": 1, "ts": "101.000", "dur": 1, '
                              '"args": {"k": ' + deep + "}}")
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    args = con.execute("SELECT args FROM slices WHERE name = 'deep'").fetchone()[0]
    assert ("nested deeper than 64 levels" in args) is dropped
    assert any("nested deeper than 64" in m for _, m in _warnings(con)) is dropped
    con.close()


def test_a_run_stored_with_deep_args_still_answers(tmp_path, client_for):
    """A database written before ingest bounded the depth: the slice detail refuses to parse them, no 500."""
    text, _ = _with_bad_event('{"ph": "X", "name": "deep", "pid": 7, "tid": 1, "ts": "101.000", "dur": 1}')
    con = _rank_folder(tmp_path, {"ASCEND_PROFILER_OUTPUT/trace_view.json": text})
    con.close()
    with duckdb.connect(str(tmp_path / "out.duckdb")) as rw:
        rw.execute("UPDATE slices SET args = ? WHERE name = 'deep'", ["[" * 950 + "]" * 950])
        slice_id = rw.execute("SELECT slice_id FROM slices WHERE name = 'deep'").fetchone()[0]
    client, run_id = client_for(tmp_path / "out.duckdb")
    detail = client.get(f"/api/runs/{run_id}/timeline/slices/{slice_id}")
    assert detail.status_code == 200 and "nested deeper than 64 levels" in detail.json()["args"]["args"]


@pytest.fixture()
def client_for(tmp_path):
    """A TestClient over a store holding the given database as a ready run: ``(client, run_id)``."""
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    clients = []

    def make(db):
        store = RunStore(tmp_path / "data")
        run = store.create_run("hostile", "hostile")
        shutil.copy(db, store.db_path(run.id))
        store.set_status(run.id, "ready")
        client = TestClient(create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir))))
        clients.append(client)
        return client, run.id

    yield make
    for c in clients:
        c.close()


def step_rank(tmp_path, cells: dict[str, str]):
    """Rank 0 of the text level1 run with the first row of its step_trace_time.csv rewritten (``cells``)."""
    src = PYTORCH_TEXT / "level1" / "rank0_ascend_pt"
    dst = tmp_path / "run" / "rank0_ascend_pt"
    shutil.copytree(src, dst)
    path = dst / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    lines = path.read_bytes().split(b"\r\n") if b"\r\n" in path.read_bytes() else path.read_bytes().split(b"\n")
    header = lines[0].decode().split(",")
    row = lines[1].decode("utf-8").split(",")
    for column, value in cells.items():
        row[header.index(column)] = value
    lines[1] = ",".join(row).encode("utf-8")
    path.write_bytes(b"\r\n".join(lines))
    return dst.parent


@pytest.mark.parametrize("value", ["not-a-number", "NaN", "1e999", "12\x003"])
def test_a_step_time_that_is_not_a_number_is_named_and_not_used(tmp_path, value):
    from ascendscope.ingest.breakdown import ConnRunner, breakdown
    from ascendscope.ingest.pipeline import ingest_path

    run = step_rank(tmp_path, {"Computing": value})
    ingest_path(run, tmp_path / "out.duckdb")
    con = duckdb.connect(str(tmp_path / "out.duckdb"), read_only=True)
    file = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    notes = [m for f, m in con.execute("SELECT file, message FROM warnings").fetchall() if f == file]
    assert notes == [f"column 'Computing': 1 values that are not numbers were left empty (the first, {value!r}, in "
                     "data row 1)"]
    assert con.execute("SELECT status FROM files WHERE kind = 'step_trace_time'").fetchone()[0] == "partial"
    assert con.execute("SELECT computing_ns FROM step_trace").fetchone()[0] is None
    # the Summary does not compute ratios from the hole: the rank's lane gives the step instead
    rows = breakdown(ConnRunner(con))
    assert [(r["source"], r["incomplete"]) for r in rows] == [("overlap", False)]
    assert rows[0]["computing_ns"] > 0
    only_csv = breakdown(ConnRunner(con), "step_trace")
    assert only_csv[0]["incomplete"] and only_csv[0]["e2e_ns"] is None and only_csv[0]["free_ratio"] is None
