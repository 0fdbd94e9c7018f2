"""/api/runs/{id}/critical_path and its model (server/queries/critical_model.py): the path and the what-if of
runs built so that both are known (sample_data.waits), the model's replay of the measured times, and the real
2-rank sample."""

from __future__ import annotations

import pytest

from ascendscope.server.queries import DuckRunner
from ascendscope.server.queries import critical_path as cp
from ascendscope.server.queries.critical_model import Element, Model
from tests.samples import STEP, needs_real

US = 1000


def get(client, run_id, **params):
    r = client.get(f"/api/runs/{run_id}/critical_path", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def path_of(answer, key="path") -> list[tuple[str, str | None, int]]:
    segs = answer[key] if key == "path" else answer["whatif"]["path"]
    return [(s["kind"], s["name"], s["dur_ns"] // US) for s in segs]


def test_the_late_ranks_path_is_its_own_work(client, wait_runs):
    a = get(client, wait_runs.ids["waits"], rank=2, step=1)
    assert a["step_ns"] == 780 * US
    assert path_of(a) == [
        ("before", "before the path", 12), ("work", "AscendCL@aclnnMm", 6), ("gap_launch", "launch latency", 12),
        ("work", "MatMul", 400), ("work", "Add", 50), ("gap_stream", "stream gap", 10),
        ("work", "hcom_allReduce__123_0_1", 200), ("gap_stream", "stream gap", 5), ("work", "Mul", 80),
        ("tail", "AscendCL@aclrtSynchronizeStream", 3), ("work", "host until the step's end", 2)]
    assert sum(s["dur_ns"] for s in a["path"]) == a["step_ns"]
    assert abs(sum(s["share"] for s in a["path"]) - 1) < 1e-9
    top = {t["name"]: t["share"] for t in a["top"]}
    assert top["MatMul"] == pytest.approx(400 / 780)


def test_a_waiting_ranks_path_goes_through_the_late_rank(client, wait_runs):
    a = get(client, wait_runs.ids["waits_sharded"], rank=0, step=1)
    assert path_of(a) == [
        ("remote", "rank 2 before hcom_allReduce__123_0_1", 490), ("transfer", "hcom_allReduce__123_0_1", 200),
        ("gap_stream", "stream gap", 5), ("work", "Mul", 80), ("tail", "AscendCL@aclrtSynchronizeStream", 3),
        ("work", "host until the step's end", 2)]
    remote = a["path"][0]
    assert remote["rank"] == 2 and remote["category"] == "waiting for another rank"
    assert remote["peer_parts"]["computing"] == 450 * US  # the late rank's window (cluster_collectives)
    cats = {c["category"]: c["ns"] for c in a["categories"]}
    assert cats["waiting for another rank"] == 490 * US


@pytest.mark.parametrize("factor", [2, 4, 8])
def test_what_if_on_the_late_rank_saves_what_construction_says(client, wait_runs, factor):
    """MatMul ×f on rank 2 saves 400 − 400/f µs, but never more than its 300 µs lead: then it waits for the others."""
    t = wait_runs.truth
    a = get(client, wait_runs.ids["waits"], rank=2, step=1, kernel="MatMul", factor=factor)
    w = a["whatif"]
    assert w["elements_changed"] == 1 and w["factor"] == factor
    assert w["saved_ns"] == t["whatif_late_us"][factor] * US
    assert w["estimated_step_ns"] == a["step_ns"] - w["saved_ns"]
    assert sum(s["dur_ns"] for s in w["path"]) == w["estimated_step_ns"]
    if factor == 8:  # 50 µs of MatMul: rank 2 arrives first, the others decide: the path waits for one of them
        assert w["path"][0]["kind"] == "remote" and w["path"][0]["rank"] in (0, 1, 3)


def test_what_if_on_a_waiting_rank(client, wait_runs):
    run = wait_runs.ids["waits"]
    a = get(client, run, rank=0, step=1, kernel="MatMul", factor=4)
    assert a["whatif"]["saved_ns"] == 0  # its MatMul is not on its path: it waits for rank 2 anyway
    b = get(client, run, rank=0, step=1, communication="true", factor=2)
    assert b["whatif"]["saved_ns"] == 100 * US  # the 200 µs transfer after rank 2 arrived, halved
    c = get(client, run, rank=0, step=1, kernel_type="AI_VECTOR_CORE", factor=2)  # Add and Mul: Mul is on the path
    assert c["whatif"]["saved_ns"] == 40 * US
    assert {k["name"] for k in a["kernel_names"]} >= {"MatMul", "Add", "Mul"}


def test_level0_ranks_launch_from_their_torch_ops(client, wait_runs):
    """No CANN lane: the torch ops that launched the kernels (async_npu) are the host side, and the host's step end
    waits for the last kernel (no synchronize call is traced). Rank 0 is this run's late rank (MatMul 220 µs)."""
    a = get(client, wait_runs.ids["waits_level0"], rank=0, step=1)
    assert not a["has_cann"] and a["step_ns"] == 600 * US
    assert path_of(a) == [
        ("before", "before the path", 10), ("work", "aten::mm", 10), ("gap_launch", "launch latency", 10),
        ("work", "MatMul", 220), ("work", "Add", 50), ("gap_stream", "stream gap", 10),
        ("work", "hcom_allReduce__123_0_1", 200), ("gap_stream", "stream gap", 5), ("work", "Mul", 80),
        ("tail", "host until the step's end", 5)]


def test_errors(client, wait_runs, runs):
    run = wait_runs.ids["waits"]
    r = client.get(f"/api/runs/{run}/critical_path", params={"rank": 0, "step": 99})
    assert r.status_code == 404 and r.json()["error"]["code"] == "step_not_found"
    r = client.get(f"/api/runs/{run}/critical_path", params={"rank": 0, "kernel": "MatMul", "factor": 0})
    assert r.status_code == 422
    r = client.get(f"/api/runs/{run}/critical_path", params={"rank": 0, "kernel": "MatMul"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_factor"
    r = client.get(f"/api/runs/{run}/critical_path", params={"rank": 7})
    assert r.status_code == 404


def _replays_measured(model: Model) -> None:
    """Nothing sped up, the model gives back every measured time, and the path covers the step exactly."""
    s = model.schedule(lambda e: 1.0)
    assert s.start == [e.start for e in model.el] and s.end == [e.end for e in model.el]
    segs = model.walk(s)
    assert segs == model.walk(model.measured)  # the same binding choices as the measured times'
    assert segs[0]["start"] == model.step_start and segs[-1]["end"] == s.step_end
    assert all(a["end"] == b["start"] for a, b in zip(segs, segs[1:]))


def test_the_model_replays_a_hand_made_graph():
    """Two streams, a launch, a wait task bound to the other stream, a host sync: every rule once."""
    el = [
        Element("host", "launch", 0, 10, ("thread", 1)),
        Element("kernel", "A", 20, 120, ("track", 1)),
        Element("wait", "wait", 5, 130, ("track", 2)),
        Element("kernel", "B", 135, 175, ("track", 2)),
        Element("sync", "sync", 12, 180, ("thread", 1)),
        Element("end", "end", 190, 190, ("thread", 1)),
    ]
    el[1].preds.append((0, "start", 10, "launch"))
    el[2].target = 1
    el[3].preds.append((2, "end", 0, "stream"))
    el[4].preds.append((0, "end", 0, "thread"))
    el[4].target = 3
    el[5].preds.append((4, "end", 0, "thread"))
    m = Model(el, 0)
    _replays_measured(m)
    assert [(g["kind"], g["index"], g["end"] - g["start"]) for g in m.walk(m.measured)] == [
        ("work", 0, 10), ("gap_launch", 1, 10), ("work", 1, 100), ("tail", 2, 10), ("gap_stream", 3, 5),
        ("work", 3, 40), ("tail", 4, 5), ("gap_thread", 5, 10)]
    half = m.schedule(lambda e: 0.5 if e.name == "A" else 1.0)  # A 100 → 50: everything after moves 50 earlier
    assert half.step_end == 140


@pytest.mark.parametrize("name", ["waits", "waits_level0"])
def test_the_model_replays_the_constructed_runs(wait_runs, runs, name):
    import duckdb

    from ascendscope.server.runs import RunStore

    con = duckdb.connect(str(RunStore(runs.data_dir).db_path(wait_runs.ids[name])), read_only=True)
    for rank in (0, 1):
        model, _ = cp.load(DuckRunner(con), rank, None)
        _replays_measured(model)
    con.close()


def test_the_model_replays_the_level1_sample(client, runs):
    """level1 (or its twin), both ranks: the model replays the measured step and the path covers it; a kernel sped
    up never costs time."""
    import duckdb

    con = duckdb.connect(str(runs.dbs["level1"]), read_only=True)
    for rank in (0, 1):
        model, st = cp.load(DuckRunner(con), rank, STEP)
        _replays_measured(model)
        assert model.measured.step_end == max(st["host_end_ns"], st["device_end_ns"])
    con.close()
    a = get(client, runs.ids["level1"], rank=0, step=STEP)
    assert sum(s["dur_ns"] for s in a["path"]) == a["step_ns"]
    k = a["kernel_names"][0]["name"]
    b = get(client, runs.ids["level1"], rank=0, step=STEP, kernel=k, factor=2)
    assert 0 <= b["whatif"]["saved_ns"] <= a["kernel_names"][0]["ns"] // 2 + 1


@needs_real
def test_the_real_sample(client, runs):
    """level1 rank 0 waited for rank 1 at the first allReduce, so the path runs through rank 1's arrival; halving
    communication saves time, a kernel never costs."""
    a = get(client, runs.ids["level1"], rank=0, step=50, communication="true", factor=2)
    assert a["step_ns"] == 1736408883842726510 - 1736408883686740710
    remote = [s for s in a["path"] if s["kind"] == "remote"]
    assert remote and remote[0]["rank"] == 1 and remote[0]["name"] == "rank 1 before hcom_allReduce__586_0_1"
    assert remote[0]["end_ns"] == "1736408883737849280"  # rank 1's arrival
    assert 0 < a["whatif"]["saved_ns"] < a["step_ns"]
    k = a["kernel_names"][0]["name"]
    b = get(client, runs.ids["level1"], rank=0, step=50, kernel=k, factor=2)
    assert 0 <= b["whatif"]["saved_ns"] <= a["kernel_names"][0]["ns"] // 2 + 1


@pytest.fixture(scope="module")
def no_wait_runs(runs, tmp_path_factory):
    """4 ranks without EVENT_WAIT / Notify Wait tasks: ``lead``, rank 1's Add lengthened by 300 µs while the other
    ranks' MatMul is 100 µs longer (it leads by 200 µs); ``d``, rank 3's MatMul lengthened by 300 µs (it leads by
    as much)."""
    from tests.insight_sample import add_generated_run

    work = tmp_path_factory.mktemp("no-waits")
    return {
        "lead": add_generated_run(runs.data_dir, work, "nowait_lead", ranks=4, late_rank=1, extra_us=300,
                                  late_kernel="Add", others_extra_us=100, wait_tasks=False),
        "d": add_generated_run(runs.data_dir, work, "nowait_d", ranks=4, late_rank=3, extra_us=300,
                               wait_tasks=False),
    }


@pytest.mark.parametrize("case", ["lead", "d"])
def test_without_wait_tasks_the_launch_order_links_the_collective(client, no_wait_runs, case):
    """Rank L's lengthened kernel × 1000 saves min(d, lead): the collective waits for the kernels launched before
    it, the kernel launched after it waits for it (inferred from the launch order, listed in the answer)."""
    run, t = no_wait_runs[case]
    d, lead = t["extra_us"] * US, t["lead_us"] * US
    assert (d // US, lead // US) == ((300, 200) if case == "lead" else (300, 300))
    a = get(client, run, rank=t["late_rank"], step=1, kernel=t["late_kernel"], factor=1000)
    w = a["whatif"]
    assert w["saved_ns"] == pytest.approx(min(d, lead), rel=0.05)
    assert w["saved_ns"] == t["whatif_1000_ns"]
    assert a["infer"] is True
    edges = {(e["from"]["name"], e["to"]["name"], e["rule"]) for e in a["inferred_edges"]}
    assert edges == {("Add", "hcom_allReduce__123_0_1", "before"), ("hcom_allReduce__123_0_1", "Mul", "after")}
    assert a["inferred_total"] == 2
    # the measured path now runs from Add to the collective (the gap after the inferred order), not from its launch
    kinds = [(s["kind"], s["name"]) for s in a["path"]]
    assert ("gap_inferred", "gap after an order inferred from the launches") in kinds
    off = get(client, run, rank=t["late_rank"], step=1, kernel=t["late_kernel"], factor=1000, infer="false")
    # without it the collective keeps its measured start (its launch long before) and Mul, chained to Add only,
    # runs before the collective ends: the step then ends with the collective, 5 + 80 + 3 + 2 µs earlier, whatever d
    assert off["infer"] is False and off["inferred_edges"] == [] and off["inferred_total"] == 0
    assert off["whatif"]["saved_ns"] == 90 * US


def test_wait_tasks_show_the_order_so_nothing_is_inferred(client, wait_runs):
    a = get(client, wait_runs.ids["waits"], rank=2, step=1)
    assert a["inferred_edges"] == [] and a["inferred_total"] == 0


def test_the_model_replays_a_run_without_wait_tasks(no_wait_runs, runs):
    import duckdb

    from ascendscope.server.runs import RunStore

    run, t = no_wait_runs["lead"]
    con = duckdb.connect(str(RunStore(runs.data_dir).db_path(run)), read_only=True)
    for rank in (0, t["late_rank"]):
        model, _ = cp.load(DuckRunner(con), rank, None)
        _replays_measured(model)
    con.close()
