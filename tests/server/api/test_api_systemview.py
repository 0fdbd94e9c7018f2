"""System View and the timeline's range API on the real sample level1: every number is recomputed here in plain
Python from the rows of the run database's ``slices`` (and ``kernels``) tables and compared with the answer."""

from __future__ import annotations

from collections import defaultdict

import duckdb
import pytest

from tests.conftest import needs_samples
from tests.samples import HAVE_REAL, STEP

pytestmark = needs_samples

COMPUTE = {"AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE"}
BIG = 2 ** 62


@pytest.fixture(scope="module")
def run1(runs) -> str:
    return runs.ids["level1"]


@pytest.fixture(scope="module")
def src(runs):
    """Every slice of level1 as a dict (with its lane kind, lane name and Task Type), and the kernels rows."""
    con = duckdb.connect(str(runs.dbs["level1"]), read_only=True)
    try:
        cols = ["slice_id", "parent_id", "track_id", "rank", "ts_ns", "dur_ns", "depth", "name", "kind", "lane",
                "task_type"]
        rows = con.execute("""
            SELECT s.slice_id, s.parent_id, s.track_id, s.rank, s.ts_ns, s.dur_ns, s.depth, s.name, t.kind,
                   t.thread_name, s.args->>'Task Type'
            FROM slices s JOIN tracks t USING (track_id)""").fetchall()
        kernels = con.execute("SELECT rank, start_ns, src_row, accelerator_core, type FROM kernels").fetchall()
        origin = con.execute("SELECT min(start_ns) FROM ranks").fetchone()[0]
        span = con.execute("SELECT min(start_ns), max(end_ns) FROM ranks").fetchone()
    finally:
        con.close()
    return {"slices": [dict(zip(cols, r)) for r in rows], "kernels": kernels, "origin": origin, "span": span}


def get(client, url, status=200, **params):
    resp = client.get(url, params=params)
    assert resp.status_code == status, resp.text
    return resp.json()


def clip(s, start, end):
    """The slice's part inside [start, end) as (b, e), or None when it is out (an instant counts inside)."""
    ts, te = s["ts_ns"], s["ts_ns"] + s["dur_ns"]
    if not (ts < end and (te > start or ts >= start)):
        return None
    return max(ts, start), min(te, end)


def scoped(src, rank, kind, start=-BIG, end=BIG, planes=True):
    out = []
    for s in src["slices"]:
        if s["rank"] != rank or s["kind"] != kind:
            continue
        if not planes and (s["lane"] or "").startswith("Plane"):
            continue
        c = clip(s, start, end)
        if c:
            out.append(s | {"b": c[0], "e": c[1], "d": c[1] - c[0]})
    return out


def self_times(rows):
    """slice_id -> its time minus the part its children (in the same rows) cover, never below 0."""
    by_id = {r["slice_id"]: r for r in rows}
    covered = defaultdict(int)
    for r in rows:
        p = by_id.get(r["parent_id"])
        if p is not None and r["e"] > p["b"] and r["b"] < p["e"]:
            covered[p["slice_id"]] += min(r["e"], p["e"]) - max(r["b"], p["b"])
    return {r["slice_id"]: max(r["d"] - covered[r["slice_id"]], 0) for r in rows}


def stats(rows, key, self_of=None):
    out = {}
    for r in rows:
        k = key(r)
        o = out.setdefault(k, {"count": 0, "total_ns": 0, "min_ns": None, "max_ns": None, "self_ns": 0})
        o["count"] += 1
        o["total_ns"] += r["d"]
        o["min_ns"] = r["d"] if o["min_ns"] is None else min(o["min_ns"], r["d"])
        o["max_ns"] = r["d"] if o["max_ns"] is None else max(o["max_ns"], r["d"])
        if self_of is not None:
            o["self_ns"] += self_of[r["slice_id"]]
    return out


def kernel_names(src, rank):
    """start_ns -> (core, type) of the first kernel_details row at that start."""
    first = {}
    for r, start, row, core, ktype in src["kernels"]:
        if r == rank and (start not in first or row < first[start][0]):
            first[start] = (row, core, ktype)
    return {k: v[1:] for k, v in first.items()}


def tree(rows):
    return {r["key"]: r for r in rows} | {k: v for r in rows for k, v in tree(r["children"]).items()}


def a_range(src, part=4):
    lo, hi = src["span"]
    a = lo + (hi - lo) // part
    return a, a + (hi - lo) // 5


# ---- Overall Metrics ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("ranged", [False, True])
def test_overall_metrics_equal_the_overlap_lane(client, run1, src, rank, ranged):
    start, end = a_range(src) if ranged else (-BIG, BIG)
    params = {"rank": rank} | ({"start_ns": start, "end_ns": end} if ranged else {})
    body = get(client, f"/api/runs/{run1}/systemview/overall", **params)
    assert body["rank"] == rank and body["has_data"]
    lane = scoped(src, rank, "overlap", start, end)
    want = stats(lane, lambda r: r["name"])
    e2e = max(r["e"] for r in lane) - min(r["b"] for r in lane)
    assert body["e2e_ns"] == e2e
    rows = tree(body["rows"])
    for name, label in (("Computing", "Computing Time"), ("Communication", "Communication Time"),
                        ("Communication(Not Overlapped)", "Not Overlapped"), ("Free", "Free Time")):
        row = next(r for r in rows.values() if r["name"] == label)
        w = want[name]
        assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == \
            (w["count"], w["total_ns"], w["min_ns"], w["max_ns"]), name
        assert row["ratio"] == pytest.approx(w["total_ns"] / e2e)
        assert row["avg_ns"] == pytest.approx(w["total_ns"] / w["count"])
    assert rows["overlapped"]["total_ns"] == \
        want["Communication"]["total_ns"] - want["Communication(Not Overlapped)"]["total_ns"]
    assert rows["e2e"]["total_ns"] == e2e and rows["e2e"]["ratio"] == 1
    if ranged:  # the three parts of the lane tile the range's busy span
        assert sum(want[n]["total_ns"] for n in ("Computing", "Communication(Not Overlapped)", "Free")) == e2e

    # Computing's split: compute tasks by the accelerator core and type of their kernel_details row
    names = kernel_names(src, rank)
    tasks = [r for r in scoped(src, rank, "hardware", start, end) if r["task_type"] in COMPUTE]
    split = stats(tasks, lambda r: names.get(r["ts_ns"], (r["task_type"], r["name"])))
    computing = next(r for r in body["rows"] if r["name"] == "Computing Time")
    got = {(core["name"], k["name"]): (k["count"], k["total_ns"], k["min_ns"], k["max_ns"])
           for core in computing["children"] for k in core["children"]}
    assert got == {k: (v["count"], v["total_ns"], v["min_ns"], v["max_ns"]) for k, v in split.items()}
    for core in computing["children"]:
        assert core["total_ns"] == sum(k["total_ns"] for k in core["children"])
    assert {c["name"] for c in computing["children"]} >= {"AI_CORE", "AI_VECTOR_CORE"}


def test_overall_rows_list_their_slices(client, run1, src):
    body = get(client, f"/api/runs/{run1}/systemview/overall", rank=0)
    rows = tree(body["rows"])
    core = rows["core:AI_CORE"]
    listed = get(client, f"/api/runs/{run1}/systemview/overall/slices", rank=0, key=core["key"], limit=500)
    assert listed["total"] == core["count"] and not listed["truncated"]
    assert sum(r["time_ns"] for r in listed["rows"]) == core["total_ns"]
    durs = [r["dur_ns"] for r in listed["rows"]]
    assert durs == sorted(durs, reverse=True)  # longest first
    kernel = core["children"][0]
    one = get(client, f"/api/runs/{run1}/systemview/overall/slices", rank=0, key=kernel["key"], limit=500)
    assert one["total"] == kernel["count"]
    exposed = next(r for r in rows.values() if r["name"] == "Not Overlapped")
    lane = [s for s in src["slices"] if s["rank"] == 0 and s["kind"] == "overlap"
            and s["name"] == "Communication(Not Overlapped)"]
    got = get(client, f"/api/runs/{run1}/systemview/overall/slices", rank=0, key=exposed["key"], sort="start",
              order="asc", limit=500)
    assert [r["slice_id"] for r in got["rows"]] == [s["slice_id"] for s in sorted(lane, key=lambda s: s["ts_ns"])]
    assert got["rows"][0]["ts_ns"] == min(s["ts_ns"] for s in lane) - src["origin"]
    assert not rows["e2e"]["has_slices"] and not rows["overlapped"]["has_slices"]


# ---- per-name pages --------------------------------------------------------------------------------------------------

def all_rows(client, url, **params):
    out, offset = [], 0
    while True:
        body = get(client, url, offset=offset, limit=500, **params)
        out.extend(body["rows"])
        offset += len(body["rows"])
        if not body["truncated"]:
            return body, out


@pytest.mark.parametrize("page, kind", [("python", "python"), ("cann", "cann")])
@pytest.mark.parametrize("ranged", [False, True])
def test_api_summaries_with_self_time(client, run1, src, page, kind, ranged):
    start, end = a_range(src, 3) if ranged else (-BIG, BIG)
    params = {"rank": 1} | ({"start_ns": start, "end_ns": end} if ranged else {})
    body, rows = all_rows(client, f"/api/runs/{run1}/systemview/{page}", **params)
    lane = scoped(src, 1, kind, start, end)
    want = stats(lane, lambda r: r["name"], self_times(lane))
    got = {r["key"]: {k: r[k] for k in ("count", "total_ns", "min_ns", "max_ns", "self_ns")} for r in rows}
    assert got == want
    assert body["total"] == len(want) and body["self"] is True
    assert body["totals"] == {"count": len(lane), "total_ns": sum(r["d"] for r in lane),
                              "self_ns": sum(v["self_ns"] for v in want.values())}
    totals = [r["total_ns"] for r in rows]
    assert totals == sorted(totals, reverse=True)
    if page == "python":  # nesting is real here: self time is below wall time (well below in the real sample)
        self_ns, wall_ns = sum(v["self_ns"] for v in want.values()), sum(v["total_ns"] for v in want.values())
        assert self_ns < (wall_ns / 2 if HAVE_REAL else wall_ns)


def test_hardware_and_communication_summaries(client, run1, src):
    hw = scoped(src, 0, "hardware")
    _, rows = all_rows(client, f"/api/runs/{run1}/systemview/hardware", rank=0)
    assert {r["key"]: (r["count"], r["total_ns"]) for r in rows} == \
        {k: (v["count"], v["total_ns"]) for k, v in stats(hw, lambda r: r["name"]).items()}
    assert "self_ns" not in rows[0]
    notify = next(r for r in rows if r["key"] == "Notify Wait")
    assert notify["task_types"] == "Notify Wait"
    _, by_type = all_rows(client, f"/api/runs/{run1}/systemview/hardware", rank=0, group_by="task_type")
    assert {r["key"]: r["total_ns"] for r in by_type} == \
        {k: v["total_ns"] for k, v in stats(hw, lambda r: r["task_type"] or "").items()}

    ops = scoped(src, 0, "communication", planes=False)
    assert ops and all(r["name"].startswith("hcom_allReduce_") for r in ops)
    body = get(client, f"/api/runs/{run1}/systemview/communication", rank=0)
    assert [(r["key"], r["count"], r["total_ns"]) for r in body["rows"]] == \
        [("hcom_allReduce_", len(ops), sum(r["d"] for r in ops))]
    listed = get(client, f"/api/runs/{run1}/systemview/communication/slices", rank=0, key="hcom_allReduce_")
    assert sorted(r["slice_id"] for r in listed["rows"]) == sorted(r["slice_id"] for r in ops)


def test_pages_filter_sort_and_page(client, run1, src):
    url = f"/api/runs/{run1}/systemview/python"
    first = get(client, url, rank=0, limit=5, sort="count", order="desc")
    assert len(first["rows"]) == 5 and first["truncated"] and first["total"] > 5
    counts = [r["count"] for r in first["rows"]]
    assert counts == sorted(counts, reverse=True)
    second = get(client, url, rank=0, limit=5, offset=5, sort="count", order="desc")
    assert not {r["key"] for r in first["rows"]} & {r["key"] for r in second["rows"]}
    past = get(client, url, rank=0, offset=100_000)
    assert past["rows"] == [] and past["total"] == first["total"] and past["totals"] == first["totals"]
    aten = get(client, url, rank=0, q="ATEN::", limit=500)
    assert aten["rows"] and all("aten::" in r["key"].lower() for r in aten["rows"])
    assert aten["total"] == len({s["name"] for s in src["slices"]
                                 if s["rank"] == 0 and s["kind"] == "python" and "aten::" in s["name"].lower()})
    python0 = [s for s in src["slices"] if s["rank"] == 0 and s["kind"] == "python"]
    name = max(sorted({s["name"] for s in python0}), key=lambda n: sum(s["name"] == n for s in python0))
    inst = [s for s in python0 if s["name"] == name]  # the most repeated: aten::copy_ in the real sample
    listed = get(client, f"{url}/slices", rank=0, key=name, limit=3)
    assert listed["total"] == len(inst) and len(listed["rows"]) == 3 and listed["truncated"]
    assert listed["rows"][0]["dur_ns"] == max(s["dur_ns"] for s in inst)


def test_systemview_ranks_and_errors(client, run1):
    body = get(client, f"/api/runs/{run1}/systemview")
    assert [r["rank"] for r in body["ranks"]] == [0, 1]
    assert body["ranks"][0]["pages"] == ["overall", "python", "cann", "hardware", "communication"]
    assert get(client, f"/api/runs/{run1}/systemview/python")["rank"] == 0  # the first rank by default
    base = f"/api/runs/{run1}/systemview"
    for url, params, status, code in (
        (f"{base}/python", {"sort": "nope"}, 400, "bad_sort"),
        (f"{base}/hardware", {"group_by": "nope"}, 400, "bad_group_by"),
        (f"{base}/overall/slices", {"key": "overlap:Nope"}, 400, "bad_key"),
        (f"{base}/python", {"start_ns": 10, "end_ns": 5}, 400, "invalid_range"),
        (f"{base}/nope", {}, 422, "invalid_parameter"),
        (f"{base}/python", {"start_ns": 2 ** 63}, 422, "invalid_parameter"),
    ):
        resp = client.get(url, params=params)
        assert resp.status_code == status, (url, resp.text)
        assert resp.json()["error"]["code"] == code


# ---- range statistics: self time, instances, per-rank offsets, alignment ---------------------------------------------

def range_want(src, start, end, shifts=None, name=None):
    """Per name over every slice whose (shifted) interval overlaps the range: count, wall, self (whole slices)."""
    shifts = shifts or {}
    rows = []
    for s in src["slices"]:
        off = shifts.get(s["rank"], 0)
        if clip({"ts_ns": s["ts_ns"] + off, "dur_ns": s["dur_ns"]}, start, end):
            rows.append(s | {"b": s["ts_ns"], "e": s["ts_ns"] + s["dur_ns"], "d": s["dur_ns"]})
    by_id = {s["slice_id"]: s for s in src["slices"]}
    covered = defaultdict(int)
    for c in src["slices"]:  # children are counted whether or not they are in the range themselves
        p = by_id.get(c["parent_id"])
        if p is not None:
            a, b = max(c["ts_ns"], p["ts_ns"]), min(c["ts_ns"] + c["dur_ns"], p["ts_ns"] + p["dur_ns"])
            covered[p["slice_id"]] += max(b - a, 0)
    self_of = {r["slice_id"]: max(r["d"] - covered[r["slice_id"]], 0) for r in rows}
    if name is not None:
        return sorted((r for r in rows if r["name"] == name), key=lambda r: (r["ts_ns"] + shifts.get(r["rank"], 0),
                                                                             r["slice_id"])), self_of
    return stats(rows, lambda r: r["name"], self_of)


def test_range_stats_have_self_time(client, run1, src):
    a, b = a_range(src)
    body = get(client, f"/api/runs/{run1}/timeline/range_stats", start_ns=a, end_ns=b)
    want = range_want(src, a, b)
    got = {n: (c, t, s) for n, c, t, s in zip(body["name"], body["count"], body["total_ns"], body["self_ns"])}
    assert got == {n: (v["count"], v["total_ns"], v["self_ns"]) for n, v in want.items()}
    assert body["totals"]["self_ns"] == sum(v["self_ns"] for v in want.values())
    assert any(s < t for _, t, s in got.values())  # some names have children in this range


def test_range_instances_list_a_name_in_time_order(client, run1, src):
    a, b = a_range(src)
    body = get(client, f"/api/runs/{run1}/timeline/range_stats", start_ns=a, end_ns=b)
    name = next(n for n, c in zip(body["name"], body["count"]) if c >= 3)
    want, self_of = range_want(src, a, b, name=name)
    got = get(client, f"/api/runs/{run1}/timeline/range_instances", start_ns=a, end_ns=b, name=name, limit=2)
    assert got["total"] == len(want) and got["truncated"] == (len(want) > 2)
    assert got["slice_id"] == [r["slice_id"] for r in want[:2]]
    assert got["ts_ns"] == [r["ts_ns"] - src["origin"] for r in want[:2]]
    assert got["self_ns"] == [self_of[r["slice_id"]] for r in want[:2]]
    rest = get(client, f"/api/runs/{run1}/timeline/range_instances", start_ns=a, end_ns=b, name=name, offset=2,
               limit=500)
    assert rest["slice_id"] == [r["slice_id"] for r in want[2:]]


def test_range_stats_and_instances_follow_rank_offsets(client, run1, src):
    a, b = a_range(src)
    shift = 3_000_000  # rank 1 drawn 3 ms later
    params = {"start_ns": a, "end_ns": b, "offset_rank": [1], "offset_ns": [shift]}
    body = get(client, f"/api/runs/{run1}/timeline/range_stats", **params)
    want = range_want(src, a, b, {1: shift})
    assert {n: (c, t) for n, c, t in zip(body["name"], body["count"], body["total_ns"])} == \
        {n: (v["count"], v["total_ns"]) for n, v in want.items()}
    assert want != range_want(src, a, b)  # the shift changes what is in the range
    name = body["name"][0]
    rows, _ = range_want(src, a, b, {1: shift}, name=name)
    got = get(client, f"/api/runs/{run1}/timeline/range_instances", name=name, limit=500, **params)
    assert got["ts_ns"] == [r["ts_ns"] + (shift if r["rank"] == 1 else 0) - src["origin"] for r in rows]
    resp = client.get(f"/api/runs/{run1}/timeline/range_stats", params={"offset_rank": [1, 0], "offset_ns": [5]})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_parameter"


def test_align_matches_the_same_occurrence_on_the_reference_rank(client, run1, src):
    def named(rank, name):
        return sorted((s for s in src["slices"] if s["rank"] == rank and s["name"] == name),
                      key=lambda s: (s["ts_ns"], s["slice_id"]))

    step1, step0 = named(1, f"ProfilerStep#{STEP}")[0], named(0, f"ProfilerStep#{STEP}")[0]
    body = get(client, f"/api/runs/{run1}/timeline/align", slice_id=step1["slice_id"], rank=0)
    assert body["match"]["slice_id"] == step0["slice_id"] and body["how"] == "occurrence"
    assert body["shift_ns"] == step0["ts_ns"] - step1["ts_ns"]
    # an allReduce of rank 1 matches the same-named one of rank 0
    ops1 = sorted((s for s in src["slices"] if s["rank"] == 1 and s["kind"] == "communication"
                   and s["name"].startswith("hcom_allReduce")), key=lambda s: s["ts_ns"])
    op = ops1[min(2, len(ops1) - 1)]
    same = named(0, op["name"])
    body = get(client, f"/api/runs/{run1}/timeline/align", slice_id=op["slice_id"], rank=0)
    assert body["match"]["slice_id"] == same[0]["slice_id"]
    assert body["shift_ns"] == same[0]["ts_ns"] - op["ts_ns"]
    resp = client.get(f"/api/runs/{run1}/timeline/align", params={"slice_id": step1["slice_id"], "rank": 7})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "no_match"
