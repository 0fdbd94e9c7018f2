"""``Run.requests()`` / ``Run.batches()``: the serving twin's requests and batches as DataFrames, integers exact."""

from __future__ import annotations

import pytest

import ascendscope
from ascendscope.sample_data.serving import burst, write_serving
from tests.serving_sample import ingest_serving


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    truth = burst()
    work = tmp_path_factory.mktemp("serving-py")
    write_serving(work / "serve", truth, "ms")
    with ascendscope.open(ingest_serving(work / "serve", work / "run.duckdb")) as run:
        yield run, truth


def test_requests_frame(served):
    run, truth = served
    df = run.requests()
    want = sorted(truth["requests"], key=lambda r: r["arrival_ns"])
    assert list(df["rid"]) == [r["rid"] for r in want]
    for col in ("arrival_ns", "queue_ns", "ttft_ns", "e2e_ns", "tpot_ns"):
        assert str(df[col].dtype) == "Int64"
        assert [int(v) for v in df[col]] == [r[col] for r in want]
    cut = want[0]["arrival_ns"] + want[0]["e2e_ns"] + 1  # req-0 has ended
    late = run.requests(start_ns=cut)
    assert list(late["rid"]) == [r["rid"] for r in want if r["arrival_ns"] + r["e2e_ns"] >= cut]
    assert "req-0" not in set(late["rid"])
    assert run.requests(arrow=True).num_rows == len(want)


def test_batches_frame(served):
    run, truth = served
    df = run.batches()
    assert len(df) == len(truth["batches"])
    assert [list(r) for r in df["rids"]] == [sorted(i[0] for i in b["items"]) for b in truth["batches"]]
    assert list(df["batch_size"]) == [len(b["items"]) for b in truth["batches"]]


def test_advice_has_the_serving_findings(served):
    run, _ = served
    df = run.advice()
    assert set(df.loc[df["category"] == "serving", "id"]) == {"serving:all:queue_dominates_ttft",
                                                               "serving:all:decode_batches_small"}
