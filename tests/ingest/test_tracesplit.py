"""One trace read as byte ranges on several cores stages exactly the events a whole-file read stages.

The trace is built so that ``}, {`` occurs where a cut must not go: inside strings (with escaped quotes, brackets
and commas, and an event's text quoted whole), inside args holding lists of objects (some with a ``"ph"`` key, so
that even the event check of ``tracesplit`` is fooled), and in a key. Every ``}, {`` of the file is tried as a
cut: a split either reads the same rows as the whole file, or its read fails and the whole file is read.
"""

from __future__ import annotations

import json
import re
import threading

import duckdb
import pytest

from ascendscope.ingest import sqlfuncs, tracesplit
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.ingest.trace import TraceLoad

N_SMALL = 8  # every separator of the file is tried as a cut: a read each, two where it falls back
RUN_TABLES = ["slices ORDER BY slice_id", "flows ORDER BY flow_id", "tracks ORDER BY track_id",
              "counters ORDER BY ALL", "steps ORDER BY ALL"]


def tricky_events(n: int = 60, event_lists: bool = True) -> list[dict]:
    """Metadata, X slices that nest, B/E pairs, flows and counters, with traps for a cut in their args
    (``event_lists``: also args holding lists of event-like objects, which fool the check of a cut)."""
    fake = '}, {"ph": "X", "name": "fake", "pid": 1, "tid": 1, "ts": "5.000", "dur": 1}, {'
    out = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},
           {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "main \"thread\" [0]"}}]
    for i in range(n):
        ts = 1000 + 10 * i
        args = [{"s": fake}, {"s": 'a "quoted" }, { and \\ [], {} , ]'},
                {"list": [{"ph": "X", "name": "inner", "ts": "1"}, {"ph": "f", "id": 3}, {"x": [1, {"y": "}, {"}]}]}
                if event_lists else {"list": [{"x": [1, {"y": "}, {"}]}, {"z": 2}]},
                {'}, {"ph": "X"}, {': 1, "k": "v"}][i % 4]
        out.append({"ph": "X", "name": f"outer{i}", "pid": 1, "tid": 7, "ts": f"{ts}.000", "dur": 8, "args": args})
        out.append({"ph": "X", "name": f"inner{i}", "pid": 1, "tid": 7, "ts": f"{ts + 1}.500", "dur": 2})
        out.append({"ph": "B", "name": f"be{i}", "pid": 1, "tid": 8, "ts": f"{ts}.000"})
        out.append({"ph": "E", "pid": 1, "tid": 8, "ts": f"{ts + 5}.000"})
        out.append({"ph": "s", "name": "f", "cat": "async_npu", "id": str(i), "pid": 1, "tid": 7,
                    "ts": f"{ts + 1}.000"})
        out.append({"ph": "f", "name": "f", "cat": "async_npu", "id": str(i), "bp": "e", "pid": 1, "tid": 8,
                    "ts": f"{ts + 2}.000"})
        out.append({"ph": "C", "name": "mem", "pid": 1, "tid": 0, "ts": f"{ts}.000", "args": {"MB": i}})
    return out


def _stage(tmp_path, path, split: bool, threads: int = 4):
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    sqlfuncs.install(con)
    tl = TraceLoad(con.cursor(), "s_", path, tmp_path / "work", "trace.json", split_read=split)
    tl.read()
    rows = con.execute("SELECT * EXCLUDE (args), CAST(args AS VARCHAR) FROM s_ev ORDER BY seq").fetchall()
    con.close()
    return rows, tl.warnings


@pytest.fixture
def tricky(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(tricky_events(N_SMALL)))
    return path


def test_every_separator_as_a_cut_reads_the_same_rows_or_falls_back(tmp_path, tricky, monkeypatch):
    whole, _ = _stage(tmp_path, tricky, split=False)
    data = tricky.read_bytes()
    seps = [(m.start() + 1, m.end() - 1) for m in re.finditer(rb"\}\s*,\s*\{", data)]
    monkeypatch.setattr(tracesplit, "SPLIT_MIN_BYTES", 0)
    used, fell_back = [], []
    read = TraceLoad._read_parts

    def spy(self, path):
        ok = read(self, path)
        (used if ok else fell_back).append(cut)
        return ok

    monkeypatch.setattr(TraceLoad, "_read_parts", spy)
    for cut in seps:
        monkeypatch.setattr(tracesplit, "cut_points", lambda path, parts, cut=cut: [cut])
        rows, warnings = _stage(tmp_path, tricky, split=True)
        assert rows == whole, cut
        assert warnings == []
    true_cuts = len(tricky_events(N_SMALL)) - 1
    assert len(used) == true_cuts  # every cut between two events reads; every other one fails and falls back
    assert len(fell_back) == len(seps) - true_cuts > 10


@pytest.mark.parametrize("parts", [2, 3, 5, 8])
def test_cuts_found_near_the_wanted_offsets_skip_the_traps(tmp_path, monkeypatch, parts):
    """The heuristic's cuts pass over a ``}, {`` in strings and in args that are not events: the ranges read
    (no fallback), the same rows in the same order."""
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(tricky_events(40, event_lists=False)))
    whole, _ = _stage(tmp_path, path, split=False)
    monkeypatch.setattr(tracesplit, "SPLIT_MIN_BYTES", 0)
    made, outcomes = [], []
    real, read = tracesplit.split_ranges, TraceLoad._read_parts
    monkeypatch.setattr(tracesplit, "split_ranges", lambda *a: made.append(real(*a)) or made[-1])
    monkeypatch.setattr(TraceLoad, "_read_parts", lambda self, p: outcomes.append(read(self, p)) or outcomes[-1])
    rows, _ = _stage(tmp_path, path, split=True, threads=parts)
    assert outcomes == [True] and rows == whole
    for t in threading.enumerate():  # (the copies are removed beside what follows the read)
        if t.name == "trace-parts-unlink":
            t.join()
    assert len(made[0]) == parts and not any(p.exists() for p in made[0])


def test_a_run_read_in_ranges_equals_the_whole_file_run(tmp_path, monkeypatch):
    """The whole ingest: tracks, slices (depths, parents), flows, counters and steps equal."""
    folder = tmp_path / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "trace_view.json").write_text(json.dumps(tricky_events(400)))
    ingest_path(tmp_path / "r_ascend_pt", tmp_path / "whole.duckdb")  # below SPLIT_MIN_BYTES: one reader
    monkeypatch.setattr(tracesplit, "SPLIT_MIN_BYTES", 0)
    made = []
    real = tracesplit.split_ranges
    monkeypatch.setattr(tracesplit, "split_ranges", lambda *a: made.append(real(*a)) or made[-1])
    ingest_path(tmp_path / "r_ascend_pt", tmp_path / "ranges.duckdb")
    assert made and made[0] and len(made[0]) >= 2
    tables = []
    for name in ("whole", "ranges"):
        with duckdb.connect(str(tmp_path / f"{name}.duckdb"), read_only=True) as con:
            tables.append({q: con.execute(f"SELECT * FROM {q}").fetchall() for q in RUN_TABLES})
    assert tables[0] == tables[1]
    assert len(tables[0]["slices ORDER BY slice_id"]) == 3 * 400 and len(tables[0]["flows ORDER BY flow_id"]) == 400


def test_no_split_when_the_copies_would_not_fit(tmp_path, tricky, monkeypatch):
    monkeypatch.setattr(tracesplit, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(tracesplit.shutil, "disk_usage", lambda p: type("U", (), {"free": 10})())
    assert tracesplit.split_ranges(tricky, tmp_path / "w", 4) is None
    assert tracesplit.split_ranges(tricky, tmp_path / "w", 1) is None
