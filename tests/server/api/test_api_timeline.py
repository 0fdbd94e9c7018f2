"""The runs and timeline JSON API on the real samples: every answer is checked against a direct SQL query of the
run database (the slow, obvious equivalent of what the endpoint computes)."""

from __future__ import annotations

import duckdb
import pytest

from tests.conftest import needs_samples

pytestmark = needs_samples

OVERLAP_ROWS = ["Computing", "Communication", "Communication(Not Overlapped)", "Free"]


@pytest.fixture(scope="module")
def db1(runs):
    con = duckdb.connect(str(runs.dbs["level1"]), read_only=True)
    yield con
    con.close()


@pytest.fixture(scope="module")
def run1(runs) -> str:
    return runs.ids["level1"]


def get(client, url, status=200, **params):
    resp = client.get(url, params=params)
    assert resp.status_code == status, resp.text
    return resp.json()


def tracks_of(client, run_id):
    return get(client, f"/api/runs/{run_id}/timeline/tracks")


def track_id(db, rank, kind, thread_name=None):
    sql = "SELECT track_id FROM tracks WHERE rank = ? AND kind = ?"
    params = [rank, kind]
    if thread_name:
        sql += " AND thread_name = ?"
        params.append(thread_name)
    return db.execute(sql + " ORDER BY slice_count DESC LIMIT 1", params).fetchone()[0]


# ---- runs ------------------------------------------------------------------------------------------------------

def test_runs_list_and_one_run(client, runs, db1):
    listed = get(client, "/api/runs")
    assert {r["id"] for r in listed["runs"]} >= set(runs.ids.values())
    assert listed["truncated"] is False
    run = get(client, f"/api/runs/{runs.ids['level1']}")
    assert run["status"] == "ready"
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    lo, hi = db1.execute("SELECT min(start_ns), max(end_ns) FROM ranks").fetchone()
    assert (run["start_ns"], run["end_ns"]) == (str(lo), str(hi))
    assert isinstance(run["start_ns"], str) and run["origin_ns"] == run["start_ns"]
    assert run["duration_ns"] == hi - lo
    assert run["warnings"]["count"] == db1.execute("SELECT count(*) FROM warnings").fetchone()[0]


# ---- tracks ----------------------------------------------------------------------------------------------------

def test_level1_has_every_lane_on_both_ranks(client, run1):
    body = tracks_of(client, run1)
    assert body["ranks"] == [0, 1]
    for rank in (0, 1):
        mine = [t for t in body["tracks"] if t["rank"] == rank]
        kinds = {t["kind"] for t in mine}
        assert {"python", "cann", "hardware", "communication", "overlap", "counter"} <= kinds
        assert {t["process_name"] for t in mine if t["kind"] == "hardware"} == {"Ascend Hardware"}
        assert any(t["thread_name"].startswith("Stream ") for t in mine if t["kind"] == "hardware")
        assert any(t["thread_name"].startswith("Plane ") for t in mine if t["kind"] == "communication")
        assert sorted(t["thread_name"] for t in mine if t["kind"] == "overlap") == sorted(OVERLAP_ROWS)
        assert any(t["counter_name"] == "AI Core Freq" and t["series"] for t in mine if t["kind"] == "counter")
        order = [t["sort_index"] for t in mine]
        assert order == sorted(order)
    cats = {c["cat"] for c in body["flow_categories"]}
    assert {"async_npu", "HostToDevice", "async_task_queue", "fwdbwd"} <= cats


def test_level0_has_no_named_cann_lane(client, runs):
    body = tracks_of(client, runs.ids["level0"])
    kinds = {t["kind"] for t in body["tracks"]}
    assert "cann" not in kinds
    assert {"python", "hardware", "communication", "overlap"} <= kinds
    assert any(t["process_name"].startswith("Process ") for t in body["tracks"])


# ---- slices ----------------------------------------------------------------------------------------------------

EXACT_SQL = """
SELECT slice_id, ts_ns, dur_ns, depth, name FROM slices
WHERE track_id = ? AND ts_ns < ? AND (ts_ns + dur_ns > ? OR ts_ns >= ?) ORDER BY slice_id
"""


def window(db, track, fraction_start, fraction_len):
    lo, hi = db.execute("SELECT min(ts_ns), max(ts_ns + dur_ns) FROM slices WHERE track_id = ?", [track]).fetchone()
    start = lo + int((hi - lo) * fraction_start)
    return start, start + max(1, int((hi - lo) * fraction_len))


def test_exact_slices_equal_sql(client, run1, db1):
    track = track_id(db1, 0, "python")
    start, end = window(db1, track, 0.30, 0.02)
    body = get(client, f"/api/runs/{run1}/timeline/slices", track_id=track, start_ns=start, end_ns=end,
               width_px=2000)
    origin = int(body["origin_ns"])
    (t,) = body["tracks"]
    assert t["lod"] is False and t["truncated"] is False
    want = db1.execute(EXACT_SQL, [track, end, start, start]).fetchall()
    assert t["slice_id"] == [r[0] for r in want]
    assert [ts + origin for ts in t["ts_ns"]] == [r[1] for r in want]
    assert t["dur_ns"] == [r[2] for r in want]
    assert t["depth"] == [r[3] for r in want]
    assert [body["names"][i] for i in t["name_id"]] == [r[4] for r in want]
    assert len(set(body["names"])) == len(body["names"])


NAIVE_LOD_SQL = """
SELECT depth, ts_ns // $1 AS b, count(*), arg_max(slice_id, (dur_ns, -slice_id)), min(ts_ns), max(ts_ns + dur_ns)
FROM slices WHERE track_id = $2 GROUP BY depth, b HAVING max(ts_ns + dur_ns) > $3 AND min(ts_ns) < $4
ORDER BY depth, b
"""


def lod_width(db, start, end) -> int:
    """A canvas width at which [start, end) needs the finest LOD level (≥ 1 bucket_ns per half pixel)."""
    finest = db.execute("SELECT min(bucket_ns) FROM lod_levels").fetchone()[0]
    return max(1, (end - start) // (2 * finest))


def test_zoomed_out_slices_come_from_lod(client, run1, db1):
    track = track_id(db1, 0, "python")
    start, end = db1.execute("SELECT min(start_ns), max(end_ns) FROM ranks").fetchone()
    width = lod_width(db1, start, end)
    body = get(client, f"/api/runs/{run1}/timeline/slices", track_id=track, start_ns=start, end_ns=end,
               width_px=width)
    (t,) = body["tracks"]
    origin = int(body["origin_ns"])
    exact = db1.execute(EXACT_SQL, [track, end, start, start]).fetchall()
    assert len(exact) > 2 * width and t["lod"] is True
    level, bucket = db1.execute("SELECT level, bucket_ns FROM lod_levels WHERE bucket_ns <= ? "
                                "ORDER BY bucket_ns DESC LIMIT 1", [(end - start) / (2 * width)]).fetchone()
    assert t["bucket_ns"] == bucket
    lod = db1.execute("SELECT min_ts_ns, max_end_ns, depth, slice_id, slice_count, name FROM slice_lod "
                      "WHERE level = ? AND track_id = ? AND max_end_ns > ? AND min_ts_ns < ? ORDER BY depth, bucket",
                      [level, track, start, end]).fetchall()
    assert t["slice_id"] == [r[3] for r in lod]
    # …and the fast path equals its naive definition over every slice of the track
    naive = db1.execute(NAIVE_LOD_SQL, [bucket, track, start, end]).fetchall()
    assert list(zip(t["depth"], t["slice_id"], t["slice_count"])) == [(r[0], r[3], r[2]) for r in naive]
    assert [(a + origin, a + origin + d) for a, d in zip(t["ts_ns"], t["dur_ns"])] == [(r[4], r[5]) for r in naive]
    assert [a + origin for a in t["ts_ns"]] == [r[0] for r in lod]
    assert [a + origin + d for a, d in zip(t["ts_ns"], t["dur_ns"])] == [r[1] for r in lod]
    assert sum(t["slice_count"]) == len(exact)
    assert len(t["slice_id"]) < len(exact)
    # every exact slice lies inside a summary row of its depth, and the summary's slice is a real, longest one
    boxes = {}
    for ts, dur, depth in zip(t["ts_ns"], t["dur_ns"], t["depth"]):
        boxes.setdefault(depth, []).append((ts + origin, ts + origin + dur))
    for _sid, ts, dur, depth, _name in exact:
        assert any(a <= ts and ts + dur <= b for a, b in boxes[depth]), (ts, dur, depth)
    longest = dict(db1.execute("SELECT slice_id, dur_ns FROM slices WHERE track_id = ?", [track]).fetchall())
    for sid in t["slice_id"]:
        assert sid in longest


def test_several_tracks_in_one_request_and_caps(client, run1, db1, runs):
    tracks = [track_id(db1, 0, k) for k in ("python", "cann", "hardware", "overlap")]
    body = get(client, f"/api/runs/{run1}/timeline/slices", track_id=tracks, width_px=800)
    assert [t["track_id"] for t in body["tracks"]] == tracks
    for t in body["tracks"]:
        assert t["count"] == len(t["ts_ns"]) == len(t["slice_id"]) == len(t["name_id"])
        assert all(0 <= i < len(body["names"]) for i in t["name_id"])

    # several dense tracks share one slice_lod scan: each still gets exactly its own rows
    lo, hi = db1.execute("SELECT min(start_ns), max(end_ns) FROM ranks").fetchone()
    body = get(client, f"/api/runs/{run1}/timeline/slices", track_id=tracks, width_px=lod_width(db1, lo, hi))
    lods = [t for t in body["tracks"] if t["lod"]]
    assert len(lods) >= 2
    origin = int(body["origin_ns"])
    start, end = int(body["start_ns"]), int(body["end_ns"])
    for t in lods:
        want = db1.execute("SELECT slice_id, min_ts_ns FROM slice_lod WHERE level = ? AND track_id = ? "
                           "AND max_end_ns > ? AND min_ts_ns < ? ORDER BY depth, bucket",
                           [t["level"], t["track_id"], start, end]).fetchall()
        assert t["slice_id"] == [r[0] for r in want]
        assert [x + origin for x in t["ts_ns"]] == [r[1] for r in want]

    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    small = TestClient(create_app(Settings.from_env(environ={}, data_dir=str(runs.data_dir),
                                                    max_slices_per_track=10)))
    start, end = window(db1, tracks[0], 0.2, 0.6)
    body = small.get(f"/api/runs/{run1}/timeline/slices",
                     params={"track_id": tracks[0], "start_ns": start, "end_ns": end, "width_px": 20000}).json()
    assert body["tracks"][0]["truncated"] is True and body["tracks"][0]["count"] == 10


# ---- flows, detail -----------------------------------------------------------------------------------------------

def test_slice_detail_has_its_async_npu_flow(client, run1, db1):
    op, kernel, kernel_track = db1.execute(
        "SELECT f.src_slice_id, f.dst_slice_id, f.dst_track_id "
        "FROM flows f JOIN slices s ON s.slice_id = f.src_slice_id "
        "WHERE f.cat = 'async_npu' AND f.rank = 0 AND f.dst_slice_id IS NOT NULL AND s.args LIKE '%Call stack%' "
        "ORDER BY f.flow_id LIMIT 1").fetchone()
    d = get(client, f"/api/runs/{run1}/timeline/slices/{op}")
    name, ts, dur, args_depth = db1.execute("SELECT name, ts_ns, dur_ns, depth FROM slices WHERE slice_id = ?",
                                            [op]).fetchone()
    assert (d["name"], d["start_abs_ns"], d["dur_ns"], d["depth"]) == (name, str(ts), dur, args_depth)
    assert d["call_stack"] and not any(";\r\n" in frame for frame in d["call_stack"])
    assert d["parent"] is not None and d["track"]["kind"] == "python"
    out = [f for f in d["flows"] if f["cat"] == "async_npu" and f["direction"] == "out"]
    assert out and out[0]["other"]["slice_id"] == kernel
    assert out[0]["other"]["track_id"] == kernel_track and out[0]["other"]["track"]["kind"] == "hardware"
    k = get(client, f"/api/runs/{run1}/timeline/slices/{kernel}")
    assert any(f["direction"] == "in" and f["other"]["slice_id"] == op for f in k["flows"])
    assert k["children"]["count"] == 0


def test_flows_in_range_equal_sql(client, run1, db1):
    start, end = db1.execute("SELECT min(start_ns), max(end_ns) FROM ranks").fetchone()
    mid = start + (end - start) // 3
    body = get(client, f"/api/runs/{run1}/timeline/flows", start_ns=mid, end_ns=mid + 5_000_000, cat="async_npu")
    want = db1.execute("SELECT flow_id FROM flows WHERE cat = 'async_npu' AND least(src_ts_ns, dst_ts_ns) < ? "
                       "AND greatest(src_ts_ns, dst_ts_ns) >= ? ORDER BY flow_id", [mid + 5_000_000, mid]).fetchall()
    assert body["flow_id"] == [r[0] for r in want] and body["count"] == len(want) > 0
    assert set(body["cat"]) == {"async_npu"}
    every = get(client, f"/api/runs/{run1}/timeline/flows", start_ns=mid, end_ns=mid + 5_000_000)
    assert every["count"] >= body["count"]


def test_counters_equal_sql(client, run1, db1):
    track = db1.execute("SELECT track_id FROM tracks WHERE rank = 0 AND counter_name = 'APP/HBM'").fetchone()[0]
    body = get(client, f"/api/runs/{run1}/timeline/counters", track_id=track, width_px=2000)
    origin = int(body["origin_ns"])
    (t,) = body["tracks"]
    (s,) = t["series"]
    start, end = int(body["start_ns"]), int(body["end_ns"])
    want = db1.execute("SELECT ts_ns, value FROM counters WHERE track_id = ? AND ts_ns >= ? AND ts_ns < ? "
                       "ORDER BY ts_ns", [track, start, end]).fetchall()
    assert [x + origin for x in s["ts_ns"]] == [r[0] for r in want]
    assert s["value"] == [r[1] for r in want]


# ---- search, range stats -------------------------------------------------------------------------------------------

def test_search_pages_in_time_order(client, run1, db1):
    total = db1.execute("SELECT count(*) FROM slices WHERE contains(lower(name), 'aten::')").fetchone()[0]
    first = get(client, f"/api/runs/{run1}/timeline/search", q="ATEN::", limit=7)
    assert first["total"] == total > 7 and first["count"] == 7 and first["truncated"] is True
    want = db1.execute("SELECT slice_id FROM slices WHERE contains(lower(name), 'aten::') ORDER BY ts_ns, slice_id "
                       "LIMIT 14").fetchall()
    second = get(client, f"/api/runs/{run1}/timeline/search", q="aten::", limit=7, after=first["next_after"])
    assert first["hits"]["slice_id"] + second["hits"]["slice_id"] == [r[0] for r in want]
    assert {r for r in first["hits"]["rank"]} <= {0, 1}
    back = get(client, f"/api/runs/{run1}/timeline/search", q="aten::", limit=7, before=second["prev_before"])
    assert back["hits"]["slice_id"] == first["hits"]["slice_id"]
    none = get(client, f"/api/runs/{run1}/timeline/search", q="no such slice name")
    assert none["total"] == 0 and none["hits"]["slice_id"] == []
    both_ranks = get(client, f"/api/runs/{run1}/timeline/search", q="ProfilerStep#", limit=50)
    assert set(both_ranks["hits"]["rank"]) == {0, 1}


RANGE_SQL = """
SELECT name, count(*), sum(dur_ns), min(dur_ns), max(dur_ns) FROM slices
WHERE ts_ns < ? AND ts_ns + dur_ns > ? {extra} GROUP BY name ORDER BY sum(dur_ns) DESC, name
"""


def test_range_stats_equal_sql(client, run1, db1):
    start, end = db1.execute("SELECT min(start_ns), max(end_ns) FROM ranks").fetchone()
    a = start + (end - start) // 4
    b = a + (end - start) // 10
    body = get(client, f"/api/runs/{run1}/timeline/range_stats", start_ns=a, end_ns=b)
    want = db1.execute(RANGE_SQL.format(extra=""), [b, a]).fetchall()
    got = list(zip(body["name"], body["count"], body["total_ns"], body["min_ns"], body["max_ns"]))
    assert got == [tuple(r) for r in want]
    assert body["totals"]["count"] == sum(r[1] for r in want)
    assert body["totals"]["total_ns"] == sum(r[2] for r in want)
    hw = track_id(db1, 0, "hardware")
    one = get(client, f"/api/runs/{run1}/timeline/range_stats", start_ns=a, end_ns=b, track_id=hw)
    want = db1.execute(RANGE_SQL.format(extra="AND track_id = ?"), [b, a, hw]).fetchall()
    assert list(zip(one["name"], one["count"], one["total_ns"])) == [(r[0], r[1], r[2]) for r in want]


# ---- errors, docs, pages ---------------------------------------------------------------------------------------------

def assert_error(resp, status, code):
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code and body["error"]["status"] == status and body["error"]["message"]


def test_every_error_has_one_shape(client, run1, tmp_path):
    base = f"/api/runs/{run1}/timeline"
    assert_error(client.get("/api/runs/nope"), 404, "run_not_found")
    assert_error(client.get("/api/runs/nope/timeline/tracks"), 404, "run_not_found")
    assert_error(client.get(f"{base}/slices", params={"track_id": 999999}), 404, "track_not_found")
    assert_error(client.get(f"{base}/slices", params={"track_id": "x"}), 422, "invalid_parameter")
    assert_error(client.get(f"{base}/slices"), 422, "invalid_parameter")
    assert_error(client.get(f"{base}/slices", params={"track_id": 1, "start_ns": 10, "end_ns": 5}), 400,
                 "invalid_range")
    assert_error(client.get(f"{base}/slices/987654321"), 404, "slice_not_found")
    assert_error(client.get(f"{base}/search"), 422, "invalid_parameter")
    assert_error(client.get(f"{base}/search", params={"q": "a", "after": "bad"}), 400, "invalid_cursor")
    assert_error(client.get("/api/no/such/route"), 404, "not_found")

    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    store = RunStore(tmp_path)
    queued = store.create_run("later", str(tmp_path))
    other = TestClient(create_app(Settings.from_env(environ={}, data_dir=str(tmp_path)), store=store))
    assert_error(other.get(f"/api/runs/{queued.id}/timeline/tracks"), 409, "run_not_ready")
    assert other.get(f"/api/runs/{queued.id}").json()["status"] == "queued"


def test_openapi_lists_the_timeline_api(client):
    paths = get(client, "/openapi.json")["paths"]
    for p in ("/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/timeline/tracks",
              "/api/runs/{run_id}/timeline/slices", "/api/runs/{run_id}/timeline/flows",
              "/api/runs/{run_id}/timeline/slices/{slice_id}", "/api/runs/{run_id}/timeline/search",
              "/api/runs/{run_id}/timeline/range_stats", "/api/runs/{run_id}/timeline/counters"):
        assert p in paths, p
    assert client.get("/docs").status_code == 200


def test_pages_and_assets(client, run1):
    assert 'id="runs-table"' in client.get("/").text
    page = client.get(f"/runs/{run1}/timeline")
    assert page.status_code == 200 and 'id="timeline"' in page.text and "/runs/" in page.text
    for view in ("operator", "memory", "summary", "communication"):
        r = client.get(f"/runs/{run1}/{view}")
        assert r.status_code == 200 and f'href="../../runs/{run1}/{view}"' in r.text
    assert client.get(f"/runs/{run1}", follow_redirects=False).status_code == 307
    assert client.get(f"/runs/{run1}/nope").status_code == 404
    assert client.get("/runs/nope/timeline").status_code == 404
    plotly = client.get("/vendor/plotly.min.js")
    assert plotly.status_code == 200 and len(plotly.content) > 1_000_000
    assert client.get("/static/js/timeline/main.js").status_code == 200
