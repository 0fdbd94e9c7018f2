"""The timeline export is valid Chrome trace JSON (ts in µs, flows paired by (cat, id), named processes and
threads) and our own ingest reads it back with the same lanes, slices, counters and flows — on the generated twin
and on the real level1 sample, for one rank and for two ranks in a window."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

import duckdb
import pytest

from ascendscope.chrometrace import us
from ascendscope.ingest import trace_tables
from ascendscope.ingest.pipeline import ingest_path

SLICE_KEY = """
SELECT t.process_name, t.thread_name, t.tid, s.name, s.ts_ns, s.dur_ns, s.depth, s.cat, s.ph, s.args::VARCHAR
FROM slices s JOIN tracks t USING (track_id) WHERE s.rank IN ({ranks}) AND s.ts_ns <= ? AND s.ts_ns + s.dur_ns >= ?
"""
FLOW_KEY = """
SELECT f.cat, f.name, f.src_ts_ns, f.dst_ts_ns, a.name, a.ts_ns, a.dur_ns, ta.thread_name, b.name, b.ts_ns, b.dur_ns,
       tb.thread_name
FROM flows f JOIN slices a ON a.slice_id = f.src_slice_id JOIN slices b ON b.slice_id = f.dst_slice_id
JOIN tracks ta ON ta.track_id = a.track_id JOIN tracks tb ON tb.track_id = b.track_id
WHERE f.rank IN ({ranks}) AND a.ts_ns <= ? AND a.ts_ns + a.dur_ns >= ? AND b.ts_ns <= ? AND b.ts_ns + b.dur_ns >= ?
"""
COUNTER_KEY = """
SELECT t.process_name, c.name, c.series, c.ts_ns, c.value FROM counters c JOIN tracks t USING (track_id)
WHERE c.rank IN ({ranks}) AND c.ts_ns BETWEEN ? AND ?
"""
LANES = """
SELECT process_name, thread_name, kind, process_sort_index, thread_sort_index FROM tracks WHERE rank IN ({ranks})
AND (slice_count > 0 OR counter_name IS NOT NULL)
"""
BIG = 2 ** 62


def keyed(con, sql, ranks, params) -> Counter:
    return Counter(con.execute(sql.format(ranks=",".join(map(str, ranks))), params).fetchall())


def exported(run, tmp_path, ranks, lo=None, hi=None):
    out = tmp_path / "export.json"
    counts = run.export_trace(out, ranks=ranks, start_ns=lo, end_ns=hi)
    db = tmp_path / "again.duckdb"
    summary = ingest_path(out, db)
    return out, counts, summary, duckdb.connect(str(db), read_only=True)


def check_chrome_json(path) -> dict:
    doc = json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal)
    events = doc["traceEvents"]
    names = {(e["pid"]) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    ends: dict = {}
    for e in events:
        assert "ph" in e and "pid" in e
        if e["ph"] in ("X", "i", "C", "s", "f"):
            assert isinstance(e["ts"], (int, Decimal)), e  # a number of µs
            assert e["pid"] in names, f"no process_name for pid {e['pid']}"
        if e["ph"] in ("X", "i"):
            assert (e["pid"], e["tid"]) in threads, f"no thread_name for {e['pid']}/{e['tid']}"
            assert e["ph"] != "X" or e["dur"] >= 0
        if e["ph"] in ("s", "f"):
            ends.setdefault((e["cat"], e["id"]), []).append(e["ph"])
    assert all(sorted(v) == ["f", "s"] for v in ends.values()), "every (cat, id) is one s and one f"
    return {"flows": len(ends), "events": events}


def test_us_is_exact():
    assert us(1736408883694756090) == "1736408883694756.090"
    assert us(5) == "0.005" and us(-1500) == "-1.500" and us(0) == "0.000"


@pytest.mark.parametrize("name", ["generated", "level1"])
def test_one_rank_round_trips(opened, runs, tmp_path, name):
    if name not in runs.ids:
        pytest.skip("no sample")
    run = opened[name]
    out, counts, summary, again = exported(run, tmp_path, [0])
    doc = check_chrome_json(out)
    assert counts["flows"] == doc["flows"] > 0 and counts["slices"] > 0
    # a trace alone: no rank id, and its communication operators made from the trace (no communication.json)
    assert not summary["warnings"] or all("rank 0 assigned" in w["message"] or "exact decimal" in w["message"]
                                          or w["message"].startswith(trace_tables.MISSING)
                                          for w in summary["warnings"]), summary["warnings"]
    con = duckdb.connect(str(run.database), read_only=True)
    for sql, params in ((SLICE_KEY, [BIG, -BIG]), (COUNTER_KEY, [-BIG, BIG])):
        assert keyed(again, sql, [0], params) == keyed(con, sql, [0], params)
    flows_before = keyed(con, FLOW_KEY, [0], [BIG, -BIG, BIG, -BIG])
    assert keyed(again, FLOW_KEY, [0], [BIG, -BIG, BIG, -BIG]) == flows_before
    assert sum(flows_before.values()) == counts["flows"]
    lanes = keyed(con, LANES, [0], [])
    assert keyed(again, LANES, [0], []) == lanes


def test_two_ranks_in_a_window(opened, tmp_path):
    run = opened["generated"]
    con = duckdb.connect(str(run.database), read_only=True)
    lo, hi = con.execute("SELECT min(ts_ns), max(ts_ns + dur_ns) FROM slices").fetchone()
    lo, hi = lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3
    out, counts, summary, again = exported(run, tmp_path, [0, 1], lo, hi)
    doc = check_chrome_json(out)
    pids = {e["pid"] >> 32 for e in doc["events"] if e["ph"] == "X"}
    assert pids == {0, 1}  # each rank's processes keep apart
    labels = {e["args"]["labels"] for e in doc["events"] if e["ph"] == "M" and e["name"] == "process_labels"}
    assert any("rank 1" in label for label in labels)
    before = keyed(con, SLICE_KEY, [0, 1], [hi, lo])
    assert keyed(again, SLICE_KEY, [0], [BIG, -BIG]) == before  # read back as one rank: the same slices
    flows = keyed(con, FLOW_KEY, [0, 1], [hi, lo, hi, lo])
    assert keyed(again, FLOW_KEY, [0], [BIG, -BIG, BIG, -BIG]) == flows and counts["flows"] == sum(flows.values())
    assert keyed(again, COUNTER_KEY, [0], [-BIG, BIG]) == keyed(con, COUNTER_KEY, [0, 1], [lo, hi])


def test_bad_arguments(opened, tmp_path):
    run = opened["generated"]
    with pytest.raises(ValueError, match="no rank 7"):
        run.export_trace(tmp_path / "x.json", ranks=[7])
    with pytest.raises(ValueError, match="before"):
        run.export_trace(tmp_path / "x.json", start_ns=10, end_ns=5)
    assert not (tmp_path / "x.json").exists()
