"""``/api/runs/{id}/export/…``: each view's table whole as CSV or Parquet, equal to the Python API's, and the
timeline window as Chrome trace JSON; bad names, filters and windows are 4xx."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

import ascendscope


@pytest.fixture(scope="module")
def generated(runs):
    with ascendscope.open(runs.dbs["generated"]) as run:
        yield run


@pytest.mark.parametrize("name, params", [
    ("steps", {}),
    ("kernels", {"rank": 0, "group_by": "type"}),
    ("kernels", {"rank": 1, "group_by": "name", "kind": "computing", "sort": "count", "order": "asc"}),
    ("kernel_instances", {"rank": 0}),
    ("operators", {"rank": 0}),
    ("memory", {}),
    ("memory_allocations", {"rank": 1, "q": "aten"}),
    ("communication", {}),
    ("communication_ops", {"rank": 0}),
    ("advice", {"rank": 0}),
])
def test_tables_download_as_csv_and_parquet(client, runs, generated, name, params):
    rid = runs.ids["generated"]
    expected = generated.table(name, **params)
    assert len(expected) > 0
    csv = client.get(f"/api/runs/{rid}/export/{name}.csv", params={**params, "ranks": "0,1"})
    assert csv.status_code == 200, csv.text
    assert csv.headers["content-type"].startswith("text/csv")
    assert f'_{name}.csv"' in csv.headers["content-disposition"]
    assert int(csv.headers["x-row-count"]) == len(expected)
    got = pd.read_csv(io.StringIO(csv.text))
    assert list(got.columns) == list(expected.columns) and len(got) == len(expected)
    parquet = client.get(f"/api/runs/{rid}/export/{name}.parquet", params=params)
    assert parquet.status_code == 200 and parquet.headers["content-type"] == "application/vnd.apache.parquet"
    table = pd.read_parquet(io.BytesIO(parquet.content))
    assert list(table.columns) == list(expected.columns) and len(table) == len(expected)
    for column in ("total_ns", "start_ns", "e2e_ns", "allocation_time_ns"):
        if column in expected.columns:
            assert table[column].tolist() == expected[column].tolist()  # exact integers, epoch ns too


@pytest.mark.parametrize("path, params, status, code", [
    ("nope.csv", {}, 404, "table_not_found"),
    ("kernels.xlsx", {}, 404, "format_not_found"),
    ("kernels.csv", {"colour": "red"}, 400, "bad_parameter"),
    ("kernels.csv", {"rank": "x"}, 422, "invalid_parameter"),
    ("kernels.csv", {"group_by": "colour"}, 400, "bad_group_by"),
    ("timeline.json", {"start_ns": 10, "end_ns": 5}, 400, "bad_range"),
    ("timeline.json", {"ranks": "7"}, 404, "rank_not_found"),
])
def test_bad_requests(client, runs, path, params, status, code):
    resp = client.get(f"/api/runs/{runs.ids['generated']}/export/{path}", params=params)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code


def test_timeline_window_as_chrome_trace(client, runs, generated):
    rid = runs.ids["generated"]
    lo, hi = generated.sql("SELECT min(ts_ns) AS lo, max(ts_ns) AS hi FROM slices").iloc[0].tolist()
    mid = lo + (hi - lo) // 2
    resp = client.get(f"/api/runs/{rid}/export/timeline.json", params={"ranks": "1", "start_ns": lo, "end_ns": mid})
    assert resp.status_code == 200 and "attachment" in resp.headers["content-disposition"]
    doc = json.loads(resp.content)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    n = generated.sql("SELECT count(*) AS n FROM slices WHERE rank = 1 AND ts_ns <= ? AND ts_ns + dur_ns >= ?",
                      [mid, lo])["n"].iloc[0]
    assert len(xs) == n > 0


def test_a_too_large_window_is_refused(client, runs, monkeypatch):
    from ascendscope.server.api import export

    monkeypatch.setattr(export, "MAX_TRACE_SLICES", 10)
    resp = client.get(f"/api/runs/{runs.ids['generated']}/export/timeline.json")
    assert resp.status_code == 413 and "narrow" in resp.json()["error"]["message"]
