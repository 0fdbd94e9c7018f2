"""Impossible serving times get a warning (issue #44): a request that a batch holds before the request arrived
(request.csv and batch.csv on clocks that disagree) gave a negative TTFT (p50 −2.0 s) and said nothing. Built from
the generated ``burst`` run, its requests moved 2 s later than their batches: every TTFT the batches give would
be negative, so none is derived, and the warning says how many and by how much."""

from __future__ import annotations

import csv

import duckdb

from ascendscope.sample_data.serving import burst, write_serving
from tests.serving_sample import ingest_serving

SHIFT_US = 2_000_000
ARRIVAL = "start_time_httpReq(microsecond)"


def _shift_arrivals(path, by_us: int) -> None:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row[ARRIVAL] = str(int(row[ARRIVAL]) + by_us)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _ingest(tmp_path, shift_us: int):
    write_serving(tmp_path / "serve", burst(), "us")  # no first-token column: TTFT comes from the batches
    (tmp_path / "serve" / "chrome_tracing.json").unlink()
    _shift_arrivals(tmp_path / "serve" / "request.csv", shift_us)
    with duckdb.connect(str(ingest_serving(tmp_path / "serve", tmp_path / "run.duckdb")), read_only=True) as con:
        ttfts = con.execute("SELECT ttft_ns FROM serving_requests ORDER BY rid").fetchall()
        warnings = [m for (m,) in
                    con.execute("SELECT message FROM warnings WHERE message LIKE 'impossible%'").fetchall()]
    return [t for (t,) in ttfts], warnings


def test_requests_held_before_they_arrived_are_warned_about_and_get_no_ttft(tmp_path):
    ttfts, warnings = _ingest(tmp_path, SHIFT_US)
    n = len(burst()["requests"])
    assert ttfts == [None] * n  # (each would have been about -2 s)
    (warning,) = warnings
    assert warning.startswith(f"impossible times: {n} request(s) are in a batch that started before they arrived")
    assert "up to 2,000.000 ms before" in warning
    assert f"no TTFT is derived for the {n} whose first prefill batch ended before they arrived" in warning


def test_possible_times_get_no_warning(tmp_path):
    ttfts, warnings = _ingest(tmp_path, 0)
    assert warnings == [] and all(t is not None and t > 0 for t in ttfts)
