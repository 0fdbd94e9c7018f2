"""The rest of msServiceProfiler's output (ingest/readers/serving_more.py): forward.csv, request_status.csv,
pd_split_communication.csv, pd_split_kvcache.csv, coordinator.csv and profiler.db's latency curves, from a generated
run whose every figure is known (sample_data/serving_more.py), wall clocks written in UTC+8."""

from __future__ import annotations

import duckdb
import pytest

from ascendscope.ingest.readers.serving_more import wall_ns
from ascendscope.sample_data.serving import burst, write_serving
from ascendscope.sample_data.serving_more import KV_BASE_MS, KV_TOKENS_PER_MS, write_more
from tests.serving_sample import ingest_serving

MS = 1_000_000


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("serving-more")
    truth = burst()
    write_serving(work / "serve", truth, "ms")
    more = write_more(work / "serve", truth)
    return truth, more, ingest_serving(work / "serve", work / "run.duckdb")


def rows(path, sql):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_forward_passes_per_card(run):
    truth, more, path = run
    got = rows(path, "SELECT prof_id, forward_iter, start_ns, end_ns, bubble_ns FROM serving_forward "
                     "ORDER BY prof_id, forward_iter")
    want = sorted((f["prof_id"], f["forward_iter"], f["start_ns"], f["end_ns"], f["bubble_ns"])
                  for f in more["forwards"])
    assert got == want and len(got) == 2 * len(truth["batches"])
    # back-to-back batches: the card waits only while the next batch is formed (1 ms)
    assert rows(path, "SELECT min(bubble_ns) FROM serving_forward")[0][0] == MS


def test_queue_sizes(run):
    _, more, path = run
    got = rows(path, "SELECT ts_ns, queue, size FROM serving_request_status ORDER BY src_row, queue")
    assert sorted(got) == sorted((q["ts_ns"], q["queue"], q["size"]) for q in more["queues"])
    assert max(q["size"] for q in more["queues"] if q["queue"] == "waiting") > 1  # the burst queues


def test_pd_transfer_per_request(run):
    truth, more, path = run
    got = dict(rows(path, "SELECT rid, dur_ns FROM serving_pd_kvcache"))
    assert got == more["kv_transfer_ns"]
    assert got["req-0"] == (KV_BASE_MS + truth["requests"][0]["input_tokens"] // KV_TOKENS_PER_MS) * MS
    pd = rows(path, "SELECT rid, http_req_ns, prefill_res_ns, end_ns FROM serving_pd_requests ORDER BY rid")
    assert pd == sorted((r["rid"], r["arrival_ns"], r["arrival_ns"] + r["ttft_ns"], r["arrival_ns"] + r["e2e_ns"])
                        for r in truth["requests"])


def test_wall_clocks_take_the_zone_from_a_numeric_time(run):
    truth, more, path = run
    # coordinator.csv has only a local wall clock: UTC+8 is told by request_status.csv's pairs
    coord = rows(path, "SELECT ts_ns, node_type, add_count, end_count FROM serving_coordinator ORDER BY node_type")
    first = min(r["arrival_ns"] for r in truth["requests"])
    n = len(truth["requests"])
    assert coord == [(first - first % (5_000 * MS), "decode", n, n), (first - first % (5_000 * MS), "prefill", n, n)]
    curve = rows(path, "SELECT ts_ns, p50 FROM serving_curves WHERE curve = 'first_token_latency' ORDER BY src_row")
    ends = sorted(r["arrival_ns"] + r["ttft_ns"] for r in truth["requests"])
    assert [c[0] for c in curve] == ends and [c[1] for c in curve] == [c[4] for c in more["curve"]]
    assert not rows(path, "SELECT * FROM warnings WHERE message LIKE '%read as UTC%'")


def test_without_a_numeric_time_wall_clocks_are_utc_and_said(tmp_path):
    truth = burst()
    write_serving(tmp_path / "serve", truth, "ms")
    write_more(tmp_path / "serve", truth)
    for name in ("request_status.csv", "forward.csv"):
        (tmp_path / "serve" / name).unlink()
    path = ingest_serving(tmp_path / "serve", tmp_path / "run.duckdb")
    first = min(r["arrival_ns"] for r in truth["requests"])
    got = rows(path, "SELECT min(ts_ns) FROM serving_coordinator")[0][0]
    assert got == first - first % (5_000 * MS) + 8 * 3600 * 1_000 * MS
    warns = rows(path, "SELECT file, message FROM warnings WHERE message LIKE '%read as UTC%'")
    assert {f for f, _ in warns} == {"coordinator.csv", "profiler.db:first_token_latency"}


def test_bad_rows_are_left_out_with_a_warning(tmp_path):
    truth = burst()
    write_serving(tmp_path / "serve", truth, "ms")
    write_more(tmp_path / "serve", truth)
    path = tmp_path / "serve" / "pd_split_kvcache.csv"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace(lines[2].split(",")[-2], "soon")
    path.write_text("\n".join(lines) + "\n")
    out = ingest_serving(tmp_path / "serve", tmp_path / "run.duckdb")
    assert rows(out, "SELECT count(*) FROM serving_pd_kvcache")[0][0] == len(truth["requests"]) - 1
    warns = rows(out, "SELECT message FROM warnings WHERE file = 'pd_split_kvcache.csv'")
    assert warns and "row 2" in warns[0][0] and "soon" in warns[0][0]


@pytest.mark.parametrize(("text", "ns"), [("2024-11-19 15:06:40:024000", 1_732_028_800_024_000_000),
                                          ("2024-11-19 15:06:40.5", 1_732_028_800_500_000_000),
                                          ("2024-11-19 15:06:40", 1_732_028_800_000_000_000), ("15:06", None)])
def test_wall_clock(text, ns):
    assert wall_ns(text) == ns


def test_sharded_run_keeps_them_in_cluster(tmp_path):
    from ascendscope.ingest.layout import connect
    from ascendscope.ingest.shards import ingest_sharded

    truth = burst()
    write_serving(tmp_path / "serve", truth, "ms")
    more = write_more(tmp_path / "serve", truth)
    ingest_sharded(tmp_path / "serve", tmp_path / "run", workers=1)
    con, _ = connect(tmp_path / "run")
    try:
        assert con.execute("SELECT count(*) FROM serving_forward").fetchone()[0] == len(more["forwards"])
        assert con.execute("SELECT sum(dur_ns) FROM serving_pd_kvcache").fetchone()[0] == sum(
            more["kv_transfer_ns"].values())
    finally:
        con.close()
