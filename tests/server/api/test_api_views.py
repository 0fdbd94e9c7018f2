"""The operator, memory, summary and communication APIs on the real samples: shapes, bounds, server-side sort /
filter / paging, CSV twins, the one error shape, timeline links, and the M4 down-sampling against its naive form."""

from __future__ import annotations

import csv
import io
import json

import duckdb
import pytest

from tests.conftest import PYTORCH_TEXT, VIEW_SAMPLES, needs_samples, run_connection
from tests.samples import HAVE_REAL, STEP

pytestmark = needs_samples

ENDPOINTS = [
    "operators", "operators/groups", "operators/groups?group_by=name", "operators/groups?group_by=name_shapes",
    "operators/groups?group_by=core", "operators/instances", "operators/torch", "operators/torch?group_by=none",
    "memory", "memory/curves", "memory/modules", "memory/allocations",
    "summary", "summary?source=overlap", "summary?source=step_trace",
    "communication", "communication/ranks", "communication/ops", "communication/bandwidth", "communication/matrix",
    "communication/gantt",
]
CSV_ENDPOINTS = ["operators/groups.csv", "operators/instances.csv", "operators/torch.csv", "memory/allocations.csv",
                 "communication/ops.csv", "summary/breakdown.csv"]
RUNS = ["level1", "st4", "fixtures"]
ST4 = VIEW_SAMPLES["st4"] / "level2"


def csv_rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


def output(root, rank_dir: str):
    return root / rank_dir / "ASCEND_PROFILER_OUTPUT"


def get(client, view_runs, run, path, **params):
    r = client.get(f"/api/runs/{view_runs[run]}/{path}", params=params)
    assert r.status_code == 200, (path, r.text)
    return r.json()


def db_of(runs, view_runs, run):
    return run_connection(runs.data_dir, view_runs[run])


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_every_endpoint_answers(client, view_runs, run, path):
    r = client.get(f"/api/runs/{view_runs[run]}/{path}")
    assert r.status_code == 200, r.text
    body = r.json()
    if "rows" in body and "total" in body:
        assert len(body["rows"]) <= body["limit"] <= 500
        assert body["truncated"] == (body["offset"] + len(body["rows"]) < body["total"])


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("path", CSV_ENDPOINTS)
def test_csv_twins(client, view_runs, run, path):
    r = client.get(f"/api/runs/{view_runs[run]}/{path}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    assert r.headers["x-truncated"] == "false"
    rows = list(csv.reader(io.StringIO(r.text)))
    assert int(r.headers["x-row-count"]) == len(rows) - 1
    json_path = path.replace(".csv", "").replace("summary/breakdown", "summary")
    body = get(client, view_runs, run, json_path, limit=1)
    expected = len(body["breakdown"]) if "breakdown" in body else body["total"]
    assert len(rows) - 1 == expected


@pytest.mark.parametrize("path, params, code", [
    ("operators/groups", {"sort": "nope"}, "bad_sort"),
    ("operators/groups", {"group_by": "nope"}, "invalid_parameter"),
    ("operators/groups", {"limit": 501}, "invalid_parameter"),
    ("operators/instances", {"group_key": "not json"}, "bad_group_key"),
    ("operators/instances", {"group_key": json.dumps(["a"])}, "bad_group_key"),
    ("memory/allocations", {"sort": "size; DROP TABLE kernels"}, "bad_sort"),
    ("memory/curves", {"start_ns": 10, "end_ns": 5}, "bad_range"),
    ("communication/ops", {"order": "sideways"}, "invalid_parameter"),
    ("communication/matrix", {"slot": "top9"}, "invalid_parameter"),
])
def test_one_error_shape(client, view_runs, path, params, code):
    r = client.get(f"/api/runs/{view_runs['level1']}/{path}", params=params)
    assert 400 <= r.status_code < 500
    err = r.json()["error"]
    assert err["code"] == code and err["status"] == r.status_code and err["message"]


def test_unknown_run_is_404(client):
    r = client.get("/api/runs/no-such-run/operators")
    assert r.status_code == 404 and r.json()["error"]["code"] == "run_not_found"


def test_groups_sort_filter_page_on_the_server(client, view_runs):
    base = dict(rank=0, group_by="name", kind="all")
    desc = get(client, view_runs, "level1", "operators/groups", **base, sort="total", limit=500)
    totals = [r["total_ns"] for r in desc["rows"]]
    assert totals == sorted(totals, reverse=True)
    asc = get(client, view_runs, "level1", "operators/groups", **base, sort="count", order="asc", limit=500)
    counts = [r["count"] for r in asc["rows"]]
    assert counts == sorted(counts)
    page2 = get(client, view_runs, "level1", "operators/groups", **base, sort="total", offset=5, limit=5)
    assert [r["group_key"] for r in page2["rows"]] == [r["group_key"] for r in desc["rows"][5:10]]
    assert page2["truncated"] and page2["total"] == desc["total"]
    matmul = get(client, view_runs, "level1", "operators/groups", **base, q="matmul", limit=500)
    assert matmul["rows"] and all("matmul" in r["name"].lower() for r in matmul["rows"])
    assert abs(sum(r["share"] for r in desc["rows"]) - 1) < 1e-9


def test_kind_splits_computing_and_communication(client, view_runs):
    ov = {k: get(client, view_runs, "level1", "operators", rank=0, kind=k)
          for k in ("all", "computing", "communication")}
    assert ov["computing"]["total_ns"] + ov["communication"]["total_ns"] == ov["all"]["total_ns"]
    assert {c["accelerator_core"] for c in ov["communication"]["cores"]} == {"HCCL"}
    assert "HCCL" not in {c["accelerator_core"] for c in ov["computing"]["cores"]}
    top = ov["all"]["top"]
    assert len(top["rows"]) == 15 and top["other_ns"] == ov["all"]["total_ns"] - sum(r["total_ns"] for r in top["rows"])


def test_instances_link_to_their_slice(client, runs, view_runs):
    groups = get(client, view_runs, "level1", "operators/groups", rank=1, group_by="type", kind="all", limit=500)
    con = db_of(runs, view_runs, "level1")
    linked = 0
    for g in groups["rows"]:
        inst = get(client, view_runs, "level1", "operators/instances", rank=1, group_by="type", kind="all",
                   group_key=g["group_key"], limit=500)
        assert inst["has_trace"] and inst["total"] == g["count"]
        for k in inst["rows"]:
            assert k["slice_id"] is not None, k["name"]
            assert k["timeline_url"] == f"/runs/{view_runs['level1']}/timeline?slice={k['slice_id']}"
            name, ts, kind, rank = con.execute(
                "SELECT s.name, s.ts_ns, t.kind, t.rank FROM slices s JOIN tracks t USING (track_id) "
                "WHERE s.slice_id = ?", [k["slice_id"]]).fetchone()
            assert (name, rank) == (k["name"], 1)
            if kind == "hardware":
                assert ts == int(k["start_ns"])
            else:  # HCCL kernels are drawn on the Communication op lane, their start rounded differently
                assert kind == "communication" and abs(ts - int(k["start_ns"])) <= 1_000
            linked += 1
    # every kernel of rank 1 (191 in the real sample)
    assert linked == len(csv_rows(output(PYTORCH_TEXT / "level1", "rank1_ascend_pt") / "kernel_details.csv"))


def test_no_trace_runs_have_no_links(client, view_runs):
    inst = get(client, view_runs, "st4", "operators/instances", rank=0, limit=20)
    kernels = len(csv_rows(output(ST4, "rank_0_ascend_pt") / "kernel_details.csv"))  # 2463 in the real sample
    assert inst["total"] == kernels and not inst["has_trace"]
    assert all(r["slice_id"] is None and r["timeline_url"] is None for r in inst["rows"])
    ops = get(client, view_runs, "st4", "communication/ops", limit=500)
    assert ops["trace_ranks"] == [] and all(r["timeline_url"] is None for r in ops["rows"])
    alloc = get(client, view_runs, "st4", "memory/allocations", rank=2, limit=5)
    assert not alloc["has_trace"] and all(r["timeline_url"] is None for r in alloc["rows"])


def test_default_rank_is_the_first_with_data(client, view_runs):
    ov = get(client, view_runs, "st4", "operators")
    assert ov["rank"] == 0 and [r["rank"] for r in ov["ranks"] if r["kernels"]] == [0, 2]
    mem = get(client, view_runs, "st4", "memory", rank=1)
    assert mem["components"] == [] and [r["rank"] for r in mem["ranks"]] == [0, 2]


def test_comm_ops_link_to_communication_slices(client, runs, view_runs):
    ops = get(client, view_runs, "level1", "communication/ops", limit=500)
    comm = json.loads((output(PYTORCH_TEXT / "level1", "rank0_ascend_pt") / "communication.json").read_text())
    per_rank = sum(len(set(step["collective"]) - {"Total Op Info"}) for step in comm.values())
    assert ops["total"] == 2 * per_rank  # 2 ranks (8 ops in the real sample)
    con = db_of(runs, view_runs, "level1")
    for op in ops["rows"]:
        name, ts, kind = con.execute("SELECT s.name, s.ts_ns, t.kind FROM slices s JOIN tracks t USING (track_id) "
                                     "WHERE s.slice_id = ?", [op["slice_id"]]).fetchone()
        assert name == op["op_name"] and kind == "communication"
        assert abs(ts - int(op["start_ns"])) <= 2_000


def test_memory_curves_are_downsampled_and_say_so(client, view_runs):
    n = len(csv_rows(output(ST4, "rank_0_ascend_pt") / "memory_record.csv"))  # 18,659 in the real sample
    full = get(client, view_runs, "st4", "memory/curves", rank=0, max_points=50_000)
    small = get(client, view_runs, "st4", "memory/curves", rank=0, max_points=200 if n > 2000 else 16)
    assert not full["downsampled"] and full["points"] == full["source_points"] == n
    assert small["downsampled"] and small["source_points"] == n and small["points"] < n / (10 if HAVE_REAL else 2)
    assert small["method"]
    for a, b in zip(full["series"], small["series"]):
        assert (a["component"], a["measure"]) == (b["component"], b["measure"])
        values = [v for v in a["mb"] if v is not None]
        kept = [v for v in b["mb"] if v is not None]
        assert max(kept) == max(values) and min(kept) == min(values)
        assert b["t_ns"][0] == a["t_ns"][0] and b["t_ns"][-1] == a["t_ns"][-1]


@pytest.mark.parametrize("max_points", [200, 2_000, 50_000])
def test_memory_curve_peaks_are_exact_after_downsampling(client, runs, view_runs, max_points):
    """Each series' peak is its maximum at the earliest time it is reached (memory plateaus at its peak, so ties are
    the rule), the same as the overview's, and that point is drawn however few points are kept."""
    got = get(client, view_runs, "st4", "memory/curves", rank=0, max_points=max_points)
    assert got["downsampled"] == (max_points < got["source_points"])
    origin = int(got["origin_ns"])
    con = db_of(runs, view_runs, "st4")
    columns = {"allocated": "total_allocated_mb", "reserved": "total_reserved_mb", "active": "total_active_mb"}
    overview = {c["component"]: c for c in get(client, view_runs, "st4", "memory", rank=0)["components"]}
    tied = 0
    for s in got["series"]:
        col = columns[s["measure"]]
        mb, first, ties = con.execute(
            f"SELECT {col}, min(timestamp_ns), count(*) FROM memory_record WHERE rank = 0 AND component = ? "
            f"AND {col} = (SELECT max({col}) FROM memory_record WHERE rank = 0 AND component = ?) GROUP BY {col}",
            [s["component"], s["component"]]).fetchone()
        tied += ties > 1
        assert s["peak"] == {"mb": mb, "t_ns": first - origin}, s["component"]
        assert (first - origin, mb) in set(zip(s["t_ns"], s["mb"]))
        if s["measure"] != "active":
            assert int(overview[s["component"]][f"peak_{s['measure']}_ns"]) == first
    assert tied  # the sample has plateaus: the earliest time is a real choice


def test_memory_peak_keeps_its_earliest_time_whatever_the_row_order():
    """A plateau at the peak, stored latest first: bucket maxima among tied rows may be any of them, but the peak's
    earliest row is always kept (here it lies inside a bucket, neither its first nor its last row)."""
    from ascendscope.server.queries import DuckRunner
    from ascendscope.server.queries import memory as mq

    con = duckdb.connect()
    con.execute("CREATE TABLE memory_record (rank INTEGER, component VARCHAR, src_row INTEGER, timestamp_ns BIGINT, "
                "total_allocated_mb DOUBLE, total_reserved_mb DOUBLE)")
    t = list(range(0, 1_000_000, 1_000))  # 1000 rows, 1 µs apart
    mb = [100.0 if 423_000 <= ts <= 800_000 else 50.0 for ts in t]
    rows = [(0, "PTA", i, ts, v, 2 * v) for i, (ts, v) in enumerate(zip(t, mb))]
    con.executemany("INSERT INTO memory_record VALUES (?, ?, ?, ?, ?, ?)", rows[::-1])
    got = mq.curves(DuckRunner(con), 0, 0, max_points=40)  # 10 buckets of 100 µs
    assert got["downsampled"] and got["points"] < 100
    for s in got["series"]:
        top = max(v for v in mb) * (2 if s["measure"] == "reserved" else 1)
        assert s["peak"] == {"mb": top, "t_ns": 423_000}
        assert (423_000, top) in set(zip(s["t_ns"], s["mb"]))


def test_memory_module_peaks_survive_downsampling(client, view_runs):
    got = get(client, view_runs, "st4", "memory/modules", rank=0, max_points=64)
    assert got["downsampled"] and got["points"] < got["source_points"]
    for s in got["series"]:
        assert s["peak"]["mb"] == s["peak_mb"] == max(v for v in s["mb"] if v is not None)


def test_memory_window_and_instant(client, view_runs):
    ov = get(client, view_runs, "level1", "memory", rank=0)
    comp = ov["components"][0]
    lo, hi = int(comp["start_ns"]), int(comp["end_ns"])
    mid = (lo + hi) // 2
    live = get(client, view_runs, "level1", "memory/allocations", rank=0, at_ns=mid, limit=500)
    assert live["total"] > 0 and live["live_kb"] == pytest.approx(sum(r["size_kb"] for r in live["rows"]))
    for r in live["rows"]:
        assert int(r["allocation_time_ns"]) <= mid
        assert r["release_time_ns"] is None or int(r["release_time_ns"]) > mid
    window = get(client, view_runs, "level1", "memory/allocations", rank=0, start_ns=lo, end_ns=mid, limit=500)
    for r in window["rows"]:
        inside = [t for t in (r["allocation_time_ns"], r["release_time_ns"]) if t and lo <= int(t) <= mid]
        assert inside
    curves = get(client, view_runs, "level1", "memory/curves", rank=0, start_ns=lo, end_ns=mid)
    origin = int(curves["origin_ns"])
    assert all(lo <= origin + t <= mid for s in curves["series"] for t in s["t_ns"])
    peak = [r for r in get(client, view_runs, "level1", "memory/allocations", rank=0, sort="allocation_total_allocated",
                           limit=1)["rows"]]
    assert peak[0]["is_peak"] and peak[0]["src_row"] == ov["peak_allocation"]["src_row"]


def test_summary_sources_and_findings(client, view_runs):
    auto = get(client, view_runs, "level1", "summary")
    assert auto["sources"] == ["step_trace"] and len(auto["breakdown"]) == 2
    derived = get(client, view_runs, "level1", "summary", source="overlap")
    assert derived["sources"] == ["overlap"] and [r["step"] for r in derived["breakdown"]] == [STEP, STEP]
    kinds = {f["kind"] for f in auto["findings"]}
    assert {"host_bound", "exposed_communication", "slowest_rank"} <= kinds
    assert any("host-bound" in f["text"].lower() for f in auto["findings"])
    st4 = get(client, view_runs, "st4", "summary")
    assert [r["rank"] for r in st4["breakdown"]] == [0, 1, 2, 3]
    assert {g["group_name"] for g in st4["parallel_groups"]} >= {"default_group", "dp_cp", "pp", "tp"}
    r0 = st4["ranks"][0]
    assert r0["torch_npu_version"] == "2.7.1" and r0["cann_version"] == "8.3.RC1"
    assert r0["env"]["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert r0["experimental_config"]["_profiler_level"] == "Level2"
    assert r0["distributed_args"]["world_size"] == 4


def test_communication_cluster_views(client, view_runs):
    ov = get(client, view_runs, "fixtures", "communication")
    assert ov["ranks"] == [0, 1] and ov["trace_ranks"] == []
    totals = ov["totals"]
    assert [r["rank"] for r in totals["rows"]] == [0, 1] and totals["most_waiting"]["rank"] in (0, 1)
    assert {link["transport_type"] for link in ov["slow_links"]} == {"HCCS", "RDMA"}
    keys = ov["matrix_options"]
    total_key = next(k for k in keys if k["op_type"] == "Total Op Info" and k["comm_type"] == "collective")
    m = get(client, view_runs, "fixtures", "communication/matrix", step=total_key["step"], op_type="Total Op Info",
            comm_type="collective")
    columns = {"src_rank", "dst_rank", "bandwidth_gbps", "transport_type"}
    assert m["cells"] and all(columns <= set(c) for c in m["cells"])
    assert len({(c["src_rank"], c["dst_rank"]) for c in m["cells"]}) == len(m["cells"])
    st4 = get(client, view_runs, "st4", "communication")
    groups = set()  # the groups named by the ops' keys (op@group) of every rank's communication.json: 12 (real)
    for path in ST4.glob("*/ASCEND_PROFILER_OUTPUT/communication.json"):
        for step in json.loads(path.read_text()).values():
            groups |= {key.split("@")[1] for kind in step.values() for key in kind if "@" in key}
    assert len(st4["groups"]) == len(groups) and st4["ranks"] == [0, 1, 2, 3]
    one_group = st4["groups"][0]["group_id"]
    ops = get(client, view_runs, "st4", "communication/ops", group=one_group, limit=500)
    assert ops["rows"] and all(r["group_id"] == one_group for r in ops["rows"])


def test_pages_render(client, view_runs):
    for run in RUNS:
        for view, root in (("operator", "operator-view"), ("memory", "memory-view"), ("summary", "summary-view"),
                           ("communication", "communication-view")):
            r = client.get(f"/runs/{view_runs[run]}/{view}")
            assert r.status_code == 200 and f'id="{root}"' in r.text
            assert 'id="rank-select"' in r.text and "/plotly.min.js" in r.text


def test_m4_downsampling_equals_its_naive_definition(runs, view_runs):
    """Per component and bucket, the kept rows are the first and the last row and a row holding the min and the max
    of each measure (any one of tied rows), and nothing else."""
    from ascendscope.server.queries import DuckRunner
    from ascendscope.server.queries import memory as mq

    con = db_of(runs, view_runs, "st4")
    n, = con.execute("SELECT count(*) FROM memory_record WHERE rank = 0").fetchone()
    max_points = min(400, max(16, n // 4))  # 400 of the real sample's 18,659 rows; a twin has a few hundred
    got = mq.curves(DuckRunner(con), 0, 0, max_points=max_points)
    assert got["downsampled"]
    lo, hi, n_comp = con.execute("SELECT min(timestamp_ns), max(timestamp_ns), count(DISTINCT component) "
                                 "FROM memory_record WHERE rank = 0").fetchone()
    buckets = max_points // n_comp // mq.POINTS_PER_BUCKET  # the point budget is shared by the components
    kept_rows = set(con.execute(
        mq.CURVE_SQL.replace("SELECT r.component, r.ts, r.allocated, r.reserved, r.active",
                             "SELECT r.component, r.src_row")
        .format(active="total_active_mb"), [0, lo, hi, lo, buckets, hi - lo + 1]).fetchall())
    assert len(kept_rows) == got["points"]
    rows = con.execute("SELECT component, src_row, timestamp_ns, total_allocated_mb, total_reserved_mb, "
                       "total_active_mb FROM memory_record WHERE rank = 0").fetchall()
    groups: dict = {}
    for r in rows:
        groups.setdefault((r[0], (r[2] - lo) * buckets // (hi - lo + 1)), []).append(r)
    naive_count = 0
    for (comp, _), rs in groups.items():
        kept = [r for r in rs if (comp, r[1]) in kept_rows]
        roles = [lambda r, t=min(r[2] for r in rs): r[2] == t, lambda r, t=max(r[2] for r in rs): r[2] == t]
        for i in (3, 4, 5):
            vals = [r[i] for r in rs if r[i] is not None]
            if vals:
                roles += [lambda r, i=i, v=min(vals): r[i] == v, lambda r, i=i, v=max(vals): r[i] == v]
        assert all(any(role(r) for r in kept) for role in roles)  # every role is filled …
        assert all(any(role(r) for role in roles) for r in kept)  # … and every kept row fills one
        assert len(kept) <= len(roles)
        naive_count += len(kept)
    assert naive_count == got["points"]
