"""/api/compare and /api/compare/timeline on the real samples: every number of a side is the Summary / Operator /
Communication endpoints' number for that rank and step, deltas are B − A, rows are aligned by key with the
one-sided ones flagged, the timeline's lanes are the timeline endpoint's slices shifted to each side's step start
(ProfilerStep, first device task, or the trace start of a run without steps), a GPU Kineto trace compares against
an NPU run, and every table and lane list is capped and says so."""

from __future__ import annotations

import csv
import re
import shutil
from collections import defaultdict

import pytest

from tests.compare_sample import add_kineto_run, add_stepless_run
from tests.conftest import PYTORCH_TEXT, needs_samples, run_connection
from tests.samples import HAVE_REAL, STEP

pytestmark = needs_samples

BREAKDOWN_FIELDS = ("computing_ns", "communication_ns", "communication_not_overlapped_ns", "overlapped_ns",
                    "computing_not_overlapped_ns", "free_ns", "preparing_ns", "e2e_ns", "stage_ns", "bubble_ns",
                    "computing_ratio", "communication_ratio", "free_ratio")
# (run A, rank A, run B, rank B): two runs, and two ranks of one run
PAIRS = [("level1", 0, "level2", 0), ("level1", 0, "level1", 1)]


@pytest.fixture(scope="module")
def ids(view_runs, runs, level1_db) -> dict[str, str]:
    return {**view_runs, "level0": runs.ids["level0"], "kineto": add_kineto_run(runs.data_dir),
            "stepless": add_stepless_run(runs.data_dir, level1_db)}


def get(client, path, **params):
    r = client.get(path, params={k: v for k, v in params.items() if v is not None})
    assert r.status_code == 200, r.text
    return r.json()


def compare(client, ids, a, b, **params):
    return get(client, "/api/compare", a=ids[a], b=ids[b], **params)


def delta_ok(row, field=None):
    a, b = (row["a"], row["b"]) if field is None else (row["a"][field], row["b"][field])
    d = row["delta"] if field is None else row["delta"][field]
    p = row["delta_pct"] if field is None else row["delta_pct"][field]
    if a is None or b is None:
        return d is None
    if d != pytest.approx(b - a, rel=1e-12, abs=1e-9):
        return False
    return p is None if (not a or (field is None and row.get("ratio"))) else p == pytest.approx((b - a) / a)


def db_of(runs, run_id):
    return run_connection(runs.data_dir, run_id)


@pytest.mark.parametrize("a, rank_a, b, rank_b", PAIRS)
def test_breakdown_is_the_summary_row_of_each_side(client, ids, a, rank_a, b, rank_b):
    body = compare(client, ids, a, b, rank_a=rank_a, rank_b=rank_b)
    assert (body["a"]["rank"], body["a"]["step"], body["b"]["rank"], body["b"]["step"]) == (rank_a, STEP, rank_b, STEP)
    rows = {r["key"]: r for r in body["breakdown"]["rows"]}
    assert set(rows) == set(BREAKDOWN_FIELDS)
    for side, run, rank in (("a", a, rank_a), ("b", b, rank_b)):
        summary = get(client, f"/api/runs/{ids[run]}/summary")
        row = next(r for r in summary["breakdown"] if r["rank"] == rank and r["step"] == STEP)
        assert body["breakdown"]["source"][side] == row["source"]
        for field in BREAKDOWN_FIELDS:
            assert rows[field][side] == row[field], (side, field)
    for row in rows.values():
        assert delta_ok(row), row
    # B − A, not A − B: the real level2's exposed communication is shorter than level1's on rank 0
    if HAVE_REAL and (a, b) == ("level1", "level2"):
        assert rows["communication_not_overlapped_ns"]["delta"] < 0


@pytest.mark.parametrize("group_by", ["name", "type"])
@pytest.mark.parametrize("a, rank_a, b, rank_b", PAIRS)
def test_kernel_groups_are_the_operator_views(client, ids, a, rank_a, b, rank_b, group_by):
    body = compare(client, ids, a, b, rank_a=rank_a, rank_b=rank_b, group_by=group_by)["kernels"]
    sides = {}
    for side, run, rank in (("a", a, rank_a), ("b", b, rank_b)):
        got = get(client, f"/api/runs/{ids[run]}/operators/groups", rank=rank, group_by=group_by, step=STEP, limit=500)
        assert not got["truncated"]
        sides[side] = {r["group_key"]: r for r in got["rows"]}
        assert body["source"][side] == "kernel_details" and body["step_filtered"][side]
    keys = set(sides["a"]) | set(sides["b"])
    assert not body["truncated"] and body["total"] == len(keys) == len(body["rows"])
    assert {r["key"] for r in body["rows"]} == keys
    assert body["only_a"] == len(set(sides["a"]) - set(sides["b"]))
    assert body["only_b"] == len(set(sides["b"]) - set(sides["a"]))
    for row in body["rows"]:
        for side in ("a", "b"):
            theirs = sides[side].get(row["key"])
            if theirs is None:
                assert row[side] is None and row["only"] == ("b" if side == "a" else "a")
                continue
            assert row[side] == {"count": theirs["count"], "total_ns": theirs["total_ns"], "avg_ns": theirs["avg_ns"]}
        if row["only"] is None:
            for field in ("count", "total_ns", "avg_ns"):
                assert delta_ok(row, field), (row, field)
        else:
            assert set(row["delta"].values()) == {None}
    # largest on either side first
    sizes = [max((r["a"] or {}).get("total_ns") or 0, (r["b"] or {}).get("total_ns") or 0) for r in body["rows"]]
    assert sizes == sorted(sizes, reverse=True)


def test_hccl_kernels_of_two_runs_are_told_apart_by_name_and_aligned_by_type(client, ids):
    by_name = compare(client, ids, "level1", "level2")["kernels"]
    hccl = [r for r in by_name["rows"] if r["accelerator_core"] == "HCCL"]
    assert hccl
    if HAVE_REAL:  # the real runs' op names carry a per-run id (hcom_allReduce__586_…); the twins share one model
        assert all(r["only"] for r in hccl)
    by_type = compare(client, ids, "level1", "level2", group_by="type")["kernels"]
    row = next(r for r in by_type["rows"] if r["accelerator_core"] == "HCCL")
    want = [hccl_kernels(level) for level in ("level1", "level2")]  # 4 and 4 in the real sample
    assert row["only"] is None and (row["a"]["count"], row["b"]["count"]) == tuple(want)


def hccl_kernels(level: str) -> int:
    """Rank 0's HCCL rows of the step in the level's kernel_details.csv."""
    path = PYTORCH_TEXT / level / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return sum(r["Accelerator Core"] == "HCCL" and r["Step Id"] == str(STEP) for r in csv.DictReader(fh))


@pytest.mark.parametrize("a, rank_a, b, rank_b", PAIRS)
def test_torch_ops_are_the_operator_views(client, ids, a, rank_a, b, rank_b):
    body = compare(client, ids, a, b, rank_a=rank_a, rank_b=rank_b)["torch_ops"]
    sides = {}
    for side, run, rank in (("a", a, rank_a), ("b", b, rank_b)):
        got = get(client, f"/api/runs/{ids[run]}/operators/torch", rank=rank, group_by="name", limit=500)
        assert not got["truncated"]
        sides[side] = {r["name"]: r for r in got["rows"]}
    assert {r["name"] for r in body["rows"]} == set(sides["a"]) | set(sides["b"])
    for row in body["rows"]:
        for side in ("a", "b"):
            theirs = sides[side][row["name"]]
            assert row[side] == {k: theirs[k] for k in row[side]}
        for field in row["a"]:
            assert delta_ok(row, field)


@pytest.mark.parametrize("a, rank_a, b, rank_b", PAIRS)
def test_communication_is_the_communication_views(client, ids, a, rank_a, b, rank_b):
    body = compare(client, ids, a, b, rank_a=rank_a, rank_b=rank_b)["communication"]
    sides = {}
    for side, run, rank in (("a", a, rank_a), ("b", b, rank_b)):
        ops = get(client, f"/api/runs/{ids[run]}/communication/ops", rank=rank, step=f"step{STEP}", limit=500)
        assert not ops["truncated"] and ops["rows"]
        per_type = defaultdict(lambda: defaultdict(int))
        for op in ops["rows"]:
            t = per_type[op["op_name"].split("__")[0]]
            t["count"] += 1
            for f in ("elapse_time_ns", "transit_time_ns", "wait_time_ns", "synchronization_time_ns",
                      "idle_time_ns"):
                t[f] += op[f]
        sides[side] = per_type
        total = next(r for r in get(client, f"/api/runs/{ids[run]}/communication/ranks", step=f"step{STEP}")["rows"]
                     if r["rank"] == rank)
        assert body["total_row"][side] == {k: total[k] for k in body["total_row"][side]}
    assert {r["op_type"] for r in body["rows"]} == set(sides["a"]) | set(sides["b"])
    for row in body["rows"]:
        for side in ("a", "b"):
            assert row[side] == dict(sides[side][row["op_type"]])
        for field in row["a"]:
            assert delta_ok(row, field)
    for field in body["total_row"]["a"]:
        assert delta_ok(body["total_row"], field)


def test_a_side_against_itself_has_no_difference(client, ids):
    body = compare(client, ids, "level1", "level1")
    assert body["a"] == body["b"]
    for table in ("kernels", "torch_ops", "communication"):
        for row in body[table]["rows"]:
            assert row["only"] is None and all(v == 0 for v in row["delta"].values())
    assert all(r["delta"] == 0 for r in body["breakdown"]["rows"])


def test_sort_by_delta_puts_the_largest_change_first(client, ids):
    rows = compare(client, ids, "level1", "level2", sort="delta")["torch_ops"]["rows"]
    changes = [abs((r["b"] or {}).get("device_self_duration_ns", 0) - (r["a"] or {}).get("device_self_duration_ns", 0))
               for r in rows]
    assert changes == sorted(changes, reverse=True) and changes[0] > 0


# ------------------------------------------------------------------------------------------------ timeline


def step_row(runs, run_id, rank, step):
    with db_of(runs, run_id) as conn:
        return conn.execute("SELECT host_start_ns, host_end_ns, device_start_ns, device_end_ns FROM steps "
                            "WHERE rank = ? AND step = ?", [rank, step]).fetchone()


def check_lanes_are_the_timelines_slices(client, run_id, side, lo, hi, width_px):
    """Each lane holds the timeline endpoint's slices of the same absolute window, shifted to the side's start."""
    align = int(side["align_ns"])
    tracks = get(client, f"/api/runs/{run_id}/timeline/tracks")
    origin = int(tracks["origin_ns"])
    for lane in side["lanes"]:
        ref = get(client, f"/api/runs/{run_id}/timeline/slices", track_id=lane["track_id"], start_ns=align + lo,
                  end_ns=align + hi, width_px=width_px)
        t = ref["tracks"][0]
        assert lane["ts_ns"] == [ts + origin - align for ts in t["ts_ns"]]
        assert lane["dur_ns"] == t["dur_ns"] and lane["slice_id"] == t["slice_id"] and lane["depth"] == t["depth"]
        assert lane["lod"] == t["lod"] and lane["count"] == t["count"]
        assert lane["truncated"] == t["truncated"]


def test_timeline_lanes_start_at_each_sides_step(client, ids, runs):
    lo, hi, width = -1_000_000, 160_000_000, 1200
    body = get(client, "/api/compare/timeline", a=ids["level1"], b=ids["level1"], rank_b=1, start_ns=lo, end_ns=hi,
               width_px=width)
    assert (body["start_ns"], body["end_ns"]) == (lo, hi)
    for side, rank in (("a", 0), ("b", 1)):
        s = body[side]
        hs, he, ds, de = step_row(runs, ids["level1"], rank, STEP)
        assert s["align_on"] == "step" and int(s["align_ns"]) == hs
        assert s["marks"] == {"host_start": 0, "host_end": he - hs, "device_start": ds - hs, "device_end": de - hs}
        kinds = [lane["kind"] for lane in s["lanes"]]
        assert kinds == sorted(kinds, key=["overlap", "hardware", "communication"].index)
        assert {lane["thread_name"] for lane in s["lanes"] if lane["kind"] == "overlap"} == {
            "Computing", "Communication", "Communication(Not Overlapped)", "Free"}
        comm_lanes = [lane["thread_name"] for lane in s["lanes"] if lane["kind"] == "communication"]
        assert len(comm_lanes) == 1 and re.fullmatch(r"Group \S+ Communication", comm_lanes[0])  # not its planes
        check_lanes_are_the_timelines_slices(client, ids["level1"], s, lo, hi, width)
        names = body["names"]
        comm = next(lane for lane in s["lanes"] if lane["kind"] == "communication")
        assert names[comm["name_id"][0]].startswith("hcom_allReduce")


def test_timeline_aligns_on_the_first_device_task(client, ids, runs):
    body = get(client, "/api/compare/timeline", a=ids["level1"], b=ids["level2"], align="device", width_px=800)
    for side, run in (("a", "level1"), ("b", "level2")):
        hs, he, ds, de = step_row(runs, ids[run], 0, STEP)
        assert body[side]["align_on"] == "device" and int(body[side]["align_ns"]) == ds
        assert body[side]["step_start_ns"] == hs - ds < 0
    # the default window covers both steps
    assert body["start_ns"] == min(body["a"]["step_start_ns"], body["b"]["step_start_ns"])
    assert body["end_ns"] == max(body["a"]["step_end_ns"], body["b"]["step_end_ns"])


def kineto_steps(runs, ids) -> list[int]:
    """Rank 0's steps in the Kineto run (551, 552 in the real trace)."""
    with db_of(runs, ids["kineto"]) as conn:
        return [s for (s,) in conn.execute("SELECT step FROM steps WHERE rank = 0 ORDER BY step").fetchall()]


def test_a_gpu_kineto_trace_against_an_npu_run(client, ids, runs):
    body = get(client, "/api/compare/timeline", a=ids["level1"], b=ids["kineto"], width_px=1000)
    b = body["b"]
    first, second = kineto_steps(runs, ids)
    with db_of(runs, ids["kineto"]) as conn:
        step_ts = conn.execute("SELECT min(ts_ns) FROM slices WHERE rank = 0 AND name = ?",
                               [f"ProfilerStep#{first}"]).fetchone()[0]
        gpu = conn.execute("SELECT track_id FROM tracks WHERE rank = 0 AND kind = 'hardware' AND slice_count > 0 "
                           "ORDER BY sort_index, track_id").fetchall()
        overlap = conn.execute("SELECT track_id FROM tracks WHERE rank = 0 AND kind = 'overlap' AND slice_count > 0 "
                               "ORDER BY sort_index, track_id").fetchall()
    assert b["step"] == first and b["steps"] == [first, second]
    assert b["align_on"] == "step" and int(b["align_ns"]) == step_ts
    # the Overlap Analysis lane derived from the GPU kernels, then the GPU streams
    assert overlap and [lane["track_id"] for lane in b["lanes"]] == [t for (t,) in overlap + gpu]
    assert all(lane["count"] > 0 for lane in b["lanes"])
    check_lanes_are_the_timelines_slices(client, ids["kineto"], b, body["start_ns"], body["end_ns"], 1000)
    assert body["end_ns"] == max(body["a"]["step_end_ns"], b["step_end_ns"])
    tables = compare(client, ids, "level1", "kineto")
    assert tables["breakdown"]["source"] == {"a": "step_trace", "b": "overlap"}
    assert all(r["b"] is not None for r in tables["breakdown"]["rows"])
    kernels = tables["kernels"]
    assert kernels["source"] == {"a": "kernel_details", "b": "trace"}
    # no kernel_details.csv: the GPU lanes' slices of the step, by name and category
    with db_of(runs, ids["kineto"]) as conn:
        ds, de = conn.execute("SELECT device_start_ns, device_end_ns FROM steps WHERE rank = 0 AND step = ?",
                              [first]).fetchone()
        want = {(n, c): (k, t) for n, c, k, t in conn.execute(
            "SELECT s.name, s.cat, count(*), sum(s.dur_ns) FROM slices s JOIN tracks t USING (track_id) "
            "WHERE s.rank = 0 AND t.kind = 'hardware' AND s.ts_ns >= ? AND s.ts_ns < ? GROUP BY ALL",
            [ds, de]).fetchall()}
    got = {(r["name"], r["type"]): (r["b"]["count"], r["b"]["total_ns"]) for r in kernels["rows"] if r["b"]}
    assert got == want and all(r["only"] == "b" for r in kernels["rows"] if r["b"])
    assert tables["communication"]["rows"] and all(r["only"] == "a" for r in tables["communication"]["rows"])


def test_a_run_without_steps_aligns_on_its_trace_start(client, ids, runs):
    body = get(client, "/api/compare/timeline", a=ids["stepless"], b=ids["level1"], width_px=600)
    a = body["a"]
    with db_of(runs, ids["stepless"]) as conn:
        start, end = conn.execute("SELECT min(min_ts_ns), max(max_end_ns) FROM tracks WHERE rank = 0").fetchone()
    assert a["step"] is None and a["steps"] == [] and a["align_on"] == "trace"
    assert int(a["align_ns"]) == start and (a["step_start_ns"], a["step_end_ns"]) == (0, end - start)
    assert a["lanes"] and body["b"]["align_on"] == "step"
    check_lanes_are_the_timelines_slices(client, ids["stepless"], a, body["start_ns"], body["end_ns"], 600)
    # its breakdown is the Summary's row without a step (the Overlap Analysis lane over the whole trace)
    tables = compare(client, ids, "stepless", "level1")
    row = next(r for r in get(client, f"/api/runs/{ids['stepless']}/summary")["breakdown"] if r["rank"] == 0)
    assert row["step"] is None and tables["breakdown"]["source"]["a"] == "overlap"
    for r in tables["breakdown"]["rows"]:
        assert r["a"] == row[r["key"]]


def test_all_steps_is_the_whole_rank(client, ids, runs):
    body = get(client, "/api/compare/timeline", a=ids["level1"], b=ids["level1"], step_a="all", width_px=600)
    assert body["a"]["step"] is None and body["a"]["align_on"] == "trace" and body["b"]["step"] == STEP
    second = kineto_steps(runs, ids)[1]
    tables = compare(client, ids, "kineto", "kineto", step_a="all", step_b=str(second))
    assert tables["a"]["step"] is None and tables["b"]["step"] == second
    a_total = sum(r["a"]["count"] for r in tables["kernels"]["rows"] if r["a"])
    b_total = sum(r["b"]["count"] for r in tables["kernels"]["rows"] if r["b"])
    assert a_total > b_total > 0  # the whole rank holds more device slices than its step 552


# ------------------------------------------------------------------------------------------------ bounds, errors


def test_tables_and_lanes_are_capped(client, ids, monkeypatch):
    from ascendscope.server.queries import compare as cmp

    monkeypatch.setattr(cmp, "MAX_TABLE_ROWS", 5)
    monkeypatch.setattr(cmp, "MAX_LANES", 3)
    body = compare(client, ids, "level1", "level2")
    for table in ("kernels", "torch_ops"):
        assert len(body[table]["rows"]) == 5 and body[table]["total"] > 5 and body[table]["truncated"]
    assert not body["communication"]["truncated"]
    tl = get(client, "/api/compare/timeline", a=ids["level1"], b=ids["level2"])
    assert all(len(tl[s]["lanes"]) == 3 and tl[s]["lanes_truncated"] for s in "ab")


@pytest.mark.parametrize("params, status, code", [
    ({"b": "no-such-run"}, 404, "run_not_found"),
    ({"rank_b": 7}, 404, "rank_not_found"),
    ({"step_a": "49"}, 404, "step_not_found"),
    ({"step_a": "first"}, 422, "invalid_parameter"),
    ({"sort": "size"}, 422, "invalid_parameter"),
    ({"group_by": "name_shapes"}, 422, "invalid_parameter"),
])
def test_errors(client, ids, params, status, code):
    for path in ("/api/compare", "/api/compare/timeline"):
        if path.endswith("timeline") and ("sort" in params or "group_by" in params):
            continue
        r = client.get(path, params={"a": ids["level1"], "b": ids["level2"], **params})
        assert r.status_code == status, r.text
        assert r.json()["error"]["code"] == code


def test_timeline_window_errors(client, ids):
    base = {"a": ids["level1"], "b": ids["level2"]}
    r = client.get("/api/compare/timeline", params=base | {"start_ns": 10, "end_ns": 10})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_range"
    r = client.get("/api/compare/timeline", params=base | {"width_px": 20_001})
    assert r.status_code == 422
    r = client.get("/api/compare/timeline", params=base | {"align": "middle"})
    assert r.status_code == 422


def test_a_run_not_ready_is_refused(tmp_path, level1_db):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    store = RunStore(tmp_path)
    ready = store.create_run("ready", "ready")
    shutil.copy(level1_db, store.db_path(ready.id))
    store.set_status(ready.id, "ready")
    queued = store.create_run("queued", "queued")
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(tmp_path)))) as c:
        r = c.get("/api/compare", params={"a": ready.id, "b": queued.id})
        assert r.status_code == 409 and r.json()["error"]["code"] == "run_not_ready"
        assert "side B" in r.json()["error"]["message"]
        # a damaged database of one side marks that run failed
        store.db_path(queued.id).write_bytes(b"not a database" * 2000)
        store.set_status(queued.id, "ready")
        r = c.get("/api/compare/timeline", params={"a": queued.id, "b": ready.id})
        assert r.status_code == 409 and r.json()["error"]["code"] == "run_damaged"
        assert store.get(queued.id).status == "failed" and store.get(ready.id).status == "ready"


def test_the_compare_page_is_served_under_the_chart_policy(client):
    from ascendscope.server.security import CSP_WITH_PLOTLY

    r = client.get("/compare")
    assert r.status_code == 200 and r.headers["content-security-policy"] == CSP_WITH_PLOTLY
    assert re.search(r'src="\./static/v-[0-9a-f]+/js/views/compare\.js"', r.text) and "<script>" not in r.text
    page = client.get("/").text
    assert 'href="./compare"' in page


def test_a_rank_without_a_trace_has_tables_but_no_lanes(client, ids):
    body = get(client, "/api/compare/timeline", a=ids["level1"], b=ids["st4"])
    b = body["b"]
    assert not b["has_trace"] and b["lanes"] == [] and b["align_ns"] is None and b["align_on"] is None
    assert body["a"]["lanes"] and (body["start_ns"], body["end_ns"]) == (0, body["a"]["step_end_ns"])
    tables = compare(client, ids, "level1", "st4")
    summary = get(client, f"/api/runs/{ids['st4']}/summary")
    row = next(r for r in summary["breakdown"] if r["rank"] == tables["b"]["rank"] and r["step"] == tables["b"]["step"])
    assert all(r["b"] == row[r["key"]] for r in tables["breakdown"]["rows"])
