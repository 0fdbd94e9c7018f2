"""msServiceProfiler's parsed output (ingest/readers/serving.py): every file format of a generated serving run
gives back the queue wait, TTFT, TPOT and e2e of each request, its batches and its KV cache, as constructed."""

from __future__ import annotations

import duckdb
import pytest

from ascendscope.ingest.layout import connect
from ascendscope.ingest.readers.serving import to_ns
from ascendscope.sample_data.serving import burst, write_serving
from tests.serving_sample import FLAVOURS, ingest_serving

REQ_SQL = "SELECT rid, arrival_ns, queue_ns, ttft_ns, e2e_ns, tpot_ns, input_tokens, output_tokens FROM " \
          "serving_requests ORDER BY rid"


@pytest.fixture(scope="module")
def truth():
    return burst()


@pytest.fixture(scope="module", params=FLAVOURS)
def flavour_db(request, tmp_path_factory, truth):
    work = tmp_path_factory.mktemp(f"serving-{request.param}")
    write_serving(work / "serve", truth, request.param)
    return request.param, ingest_serving(work / "serve", work / "run.duckdb")


def test_requests_match_construction(flavour_db, truth):
    flavour, path = flavour_db
    with duckdb.connect(str(path), read_only=True) as con:
        got = con.execute(REQ_SQL).fetchall()
        sources = {r[0] for r in con.execute("SELECT DISTINCT ttft_source FROM serving_requests").fetchall()}
    want = [(r["rid"], r["arrival_ns"], r["queue_ns"], r["ttft_ns"], r["e2e_ns"], r["tpot_ns"], r["input_tokens"],
             r["output_tokens"]) for r in sorted(truth["requests"], key=lambda r: r["rid"])]
    assert got == want
    # the older CSVs have no first-token column: TTFT is the end of the request's first prefill batch
    assert sources == ({"batches"} if flavour == "us" else {"file"})


def test_batches_and_links(flavour_db, truth):
    _, path = flavour_db
    with duckdb.connect(str(path), read_only=True) as con:
        batches = con.execute("SELECT batch_id, min(start_ns), max(end_ns), max(batch_size), max(prefill_size), "
                              "max(decode_size) FROM serving_batches GROUP BY batch_id ORDER BY batch_id").fetchall()
        links = con.execute("SELECT batch_id, rid, phase FROM serving_batch_requests ORDER BY batch_id, rid").fetchall()
        phases = con.execute("SELECT DISTINCT phase FROM serving_batches ORDER BY 1").fetchall()
    assert phases == [("exec",), ("schedule",)]
    assert len(batches) == len(truth["batches"])
    epoch = 1_732_000_000_000 * 1_000_000
    for (_bid, start, end, size, p, d), b in zip(batches, truth["batches"]):
        assert (start - epoch, end - epoch) == (b["start"] * 1_000_000, b["end"] * 1_000_000)
        n_p = sum(1 for i in b["items"] if i[2] == 0)
        assert (size, p, d) == (len(b["items"]), n_p, len(b["items"]) - n_p)
    want = sorted((i + 1, rid, "prefill" if typ == 0 else "decode")
                  for i, b in enumerate(truth["batches"]) for rid, _, typ, _ in b["items"])
    assert links == want


def test_kvcache(flavour_db, truth):
    flavour, path = flavour_db
    with duckdb.connect(str(path), read_only=True) as con:
        got = con.execute("SELECT ts_ns, rid, name, free_blocks FROM serving_kvcache ORDER BY src_row").fetchall()
        warns = con.execute("SELECT file, message FROM warnings WHERE rank IS NULL").fetchall()
    if flavour == "db":  # the database's kvcache table has no numeric time: said, not guessed
        assert got == [] and any(f == "profiler.db:kvcache" and "no time column" in m for f, m in warns)
        return
    epoch = 1_732_000_000_000 * 1_000_000
    assert got == [(epoch + k["t"] * 1_000_000, k["rid"], k["name"], k["free"]) for k in truth["kvcache"]]


def test_chrome_trace_is_the_timeline(flavour_db):
    _, path = flavour_db
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM slices WHERE name = 'prefill'").fetchone()[0] == 8


def test_sharded_run_has_the_tables_in_cluster(tmp_path, truth):
    from ascendscope.ingest.shards import ingest_sharded

    write_serving(tmp_path / "serve", truth, "ms")
    ingest_sharded(tmp_path / "serve", tmp_path / "run", workers=1)
    con, _ = connect(tmp_path / "run")
    try:
        assert con.execute("SELECT count(*) FROM serving_requests").fetchone()[0] == len(truth["requests"])
        assert con.execute("SELECT sum(ttft_ns) FROM serving_requests").fetchone()[0] == sum(
            r["ttft_ns"] for r in truth["requests"])
    finally:
        con.close()


def test_bad_rows_are_named_and_the_rest_loads(tmp_path, truth):
    write_serving(tmp_path / "serve", truth, "ms")
    path = tmp_path / "serve" / "request.csv"
    lines = path.read_text().splitlines()
    cells = lines[2].split(",")
    cells[5] = "zero"  # req-1's queue wait: not a number
    lines[2] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    out = ingest_serving(tmp_path / "serve", tmp_path / "run.duckdb")
    with duckdb.connect(str(out), read_only=True) as con:
        rids = [r[0] for r in con.execute("SELECT rid FROM serving_requests ORDER BY rid").fetchall()]
        warns = con.execute("SELECT file, message FROM warnings WHERE file = 'request.csv'").fetchall()
    assert "req-1" not in rids and len(rids) == len(truth["requests"]) - 1
    assert warns and "row 2" in warns[0][1] and "zero" in warns[0][1]


def test_serving_folder_beside_ranks_is_found_and_not_a_rank(tmp_path, truth):
    from ascendscope.ingest.discover import discover
    from ascendscope.sample_data.generate import generate_run

    generate_run(tmp_path / "run", ranks=1, steps=1, ops_per_step=5)
    write_serving(tmp_path / "run" / "serving_out", truth, "ms")
    disc = discover(tmp_path / "run")
    assert [r.rank for r in disc.ranks] == [0]
    assert not any("profiler.db" in f for _, f, _ in disc.warnings)
    # its trace is not a rank among the NPU ranks, and that is said
    assert any(f == "serving_out/chrome_tracing.json" and "Serving tab" in m for _, f, m in disc.warnings)
    out = ingest_serving(tmp_path / "run", tmp_path / "run.duckdb")
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT DISTINCT source FROM serving_requests").fetchall() == [("serving_out",)]


@pytest.mark.parametrize(("text", "unit", "ns"), [("12.345", 1_000_000, 12_345_000), ("1732000000000123.5", 1_000,
                                                   1_732_000_000_000_123_500), ("", 1, None), (" 7 ", 1, 7)])
def test_to_ns_is_exact(text, unit, ns):
    assert to_ns(text, unit) == ns


def test_a_kvcache_time_without_unit_is_not_guessed(tmp_path, truth):
    write_serving(tmp_path / "serve", truth, "ms")
    path = tmp_path / "serve" / "kvcache.csv"
    path.write_text(path.read_text().replace("timestamp(ms)", "start_time", 1))
    out = ingest_serving(tmp_path / "serve", tmp_path / "run.duckdb")
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM serving_kvcache").fetchone()[0] == 0
        warns = con.execute("SELECT message FROM warnings WHERE file = 'kvcache.csv'").fetchall()
        assert con.execute("SELECT count(*) FROM serving_requests").fetchone()[0] == len(truth["requests"])
    assert len(warns) == 1 and "no time column with a unit" in warns[0][0]


def test_preempted_request(tmp_path):
    truth = burst(preempt_at_ms=60)
    write_serving(tmp_path / "serve", truth, "ms")
    out = ingest_serving(tmp_path / "serve", tmp_path / "run.duckdb")
    with duckdb.connect(str(out), read_only=True) as con:
        got = con.execute("SELECT rid, preempted, queue_ns, ttft_ns, prefill_ns FROM serving_requests ORDER BY rid"
                          ).fetchall()
    assert [(r, p) for r, p, *_ in got] == [(r["rid"], r["preempted"]) for r in truth["requests"]]
    assert sum(p for _, p, *_ in got) == 1
    for rid, preempted, queue, ttft, prefill in got:
        # a preempted request's queue wait counts its second wait too: its prefill span is not derived from it
        assert prefill == (None if preempted else ttft - queue), rid
