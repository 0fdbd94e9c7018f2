"""/api/runs/{id}/strategy: the rank grid, which dimension is slow, communication per group kind and the expert
load, against ``sample_data.strategy`` runs whose answers are known by construction, each ingested sharded as the
server does (tests/strategy_sample.py)."""

from __future__ import annotations

import json
import statistics

import pytest

from ascendscope.sample_data.strategy import LATE_US, TRAFFIC
from tests.run_helpers import pin
from tests.strategy_sample import add_strategy_runs

DIMS = ("dp", "pp", "tp", "cp", "ep")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data_dir = tmp_path_factory.mktemp("strategy-data")
    runs = add_strategy_runs(data_dir, tmp_path_factory.mktemp("strategy-src"))
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data_dir)))) as client:
        yield client, runs


def get(client, run_id, path, status=200, **params):
    r = client.get(f"/api/runs/{run_id}/strategy/{path}", params=params)
    assert r.status_code == status, r.text
    return r.json()


def _coords(g: dict) -> dict[int, dict]:
    return {r: {d: g[d][i] for d in DIMS} for i, r in enumerate(g["rank"])}


def _truth_coords(truth: dict) -> dict[int, dict]:
    return {r: {d: c[d] for d in DIMS} for r, c in truth["grid"].items()}


@pytest.mark.parametrize("name", ["stage", "rank", "moe"])
def test_grid_places_every_rank_where_the_run_put_it(served, name):
    client, runs = served
    truth = runs.truth[name]
    g = get(client, runs.ids[name], "grid", metric="computing")
    assert g["available"] and g["world"] == truth["world"] and g["order"] == "tp-cp-ep-dp-pp"
    assert {d: g["sizes"][d] for d in truth["sizes"]} == truth["sizes"]
    assert _coords(g) == _truth_coords(truth)
    assert all(g["in_run"])
    # the metric: each rank's mean computing per step, exact to the ns
    for i, r in enumerate(g["rank"]):
        want = statistics.fmean(truth["computing_us"][(r, s)] for s in range(truth["steps"])) * 1000
        assert abs(g["value"][i] - want) <= 1


def test_a_rank_without_a_file_is_placed_by_its_peers_groups_or_the_rank_order(served):
    client, runs = served
    truth = runs.truth["rank"]
    g = get(client, runs.ids["rank"], "grid")
    source = dict(zip(g["rank"], g["source"]))
    # rank 0's file lists its tp, pp, dp, cp and exp groups: their members are placed by it
    zero = {name: ranks for name, ranks in truth["groups"].values() if 0 in ranks}
    peers = set().union(*(set(zero[n]) for n in ("tp", "pp", "dp", "cp", "exp", "dp_cp"))) - {0}
    assert source[0] == "metadata"
    assert {r for r, s in source.items() if s == "peers"} == peers
    assert {r for r, s in source.items() if s == "inferred"} == set(range(truth["world"])) - peers - {0}
    assert g["counts"] == {"metadata": 1, "peers": len(peers), "inferred": truth["world"] - 1 - len(peers)}


def test_a_picked_order_places_the_ranks_no_file_places(served):
    client, runs = served
    truth = runs.truth["order"]
    default = get(client, runs.ids["order"], "grid")
    assert default["sizes_source"] == "distributed_args" and default["counts"]["inferred"] == truth["world"]
    assert _coords(default) != _truth_coords(truth)  # the files give sizes only: the default order is wrong here
    picked = get(client, runs.ids["order"], "grid", order="tp-cp-pp-ep-dp")
    assert picked["order"] == "tp-cp-pp-ep-dp" and picked["order_source"] == "user"
    assert _coords(picked) == _truth_coords(truth)
    sized = get(client, runs.ids["order"], "grid", order="tp-cp-pp-ep-dp", tp=4, pp=2)
    assert sized["sizes"]["tp"] == 4 and sized["sizes"]["dp"] == 1 and sized["sizes_source"] == "user"


def test_groups_fit_another_order_and_it_is_used(served, tmp_path):
    """Every rank's file states its groups, laid out tp-cp-pp-ep-dp: the order is read from the groups."""
    client, runs = served
    more = add_strategy_runs(runs.data_dir, tmp_path, {"order_all": {"tp": 2, "pp": 2, "dp": 2,
                                                                     "order": "tp-cp-pp-ep-dp"}})
    g = get(client, more.ids["order_all"], "grid")
    assert g["order"] == "tp-cp-pp-ep-dp" and g["order_source"] == "groups" and g["counts"]["metadata"] == 8
    assert _coords(g) == _truth_coords(more.truth["order_all"])


def test_the_slow_stage_is_named_on_computing_per_microbatch(served):
    client, runs = served
    truth = runs.truth["stage"]
    v = get(client, runs.ids["stage"], "verdicts")
    warn = [x for x in v["verdicts"] if x["severity"] == "warning"]
    assert [x["kind"] for x in warn] == ["pp_stage"] and warn[0]["stage"] == truth["slow_stage"]
    assert warn[0]["excess"] == pytest.approx(truth["slow_stage_extra"], abs=0.006)
    assert warn[0]["per"] == "microbatch" and v["summary"].startswith("PP stage 2 is 20 % slower")
    assert sorted(warn[0]["ranks"]) == sorted(r for r, c in truth["grid"].items() if c["pp"] == 2)
    # the last stage's head is expected, not a finding; the DP replicas agree
    kinds = {x["kind"]: x for x in v["verdicts"]}
    assert kinds["pp_stage_design"]["stage"] == 3 and kinds["pp_stage_design"]["severity"] == "info"
    assert kinds["dp_agree"]["excess"] < 0.01 and "DP replicas agree within" in kinds["dp_agree"]["text"]
    # step time is the same on every rank (they wait for each other): no spread between stages on it
    assert v["spreads"]["pp"]["between_pct"] == pytest.approx(0, abs=0.01)
    comp = get(client, runs.ids["stage"], "verdicts", metric="computing")["spreads"]["pp"]
    assert comp["worst_slice"] == 2 and comp["between_pct"] > 15


def test_the_slow_rank_is_named_through_its_tp_group(served):
    client, runs = served
    truth = runs.truth["rank"]
    v = get(client, runs.ids["rank"], "verdicts")
    warn = [x for x in v["verdicts"] if x["severity"] == "warning"]
    assert [x["kind"] for x in warn] == ["slow_rank"]
    w = warn[0]
    assert w["rank"] == truth["slow_rank"] and w["dim"] == "tp" and sorted(w["group"]) == truth["late_group"]
    assert w["excess"] == pytest.approx(truth["slow_rank_extra"], abs=0.006)
    assert w["wait_caused_ns"] == truth["wait_caused_us"] * 1000 // truth["steps"]
    assert v["summary"].startswith(f"TP group {{{','.join(map(str, truth['late_group']))}}} waits on rank 5")
    assert set(w["ranks"]) == set(truth["late_group"])
    # within the TP groups on computing: the worst is the slow rank's
    comp = get(client, runs.ids["rank"], "verdicts", metric="computing")["spreads"]["tp"]
    assert comp["worst_group"] == truth["late_group"] and comp["worst_group_slowest"] == 5
    grid = get(client, runs.ids["rank"], "grid", metric="wait_caused")
    caused = dict(zip(grid["rank"], grid["value"]))
    assert caused[5] == truth["wait_caused_us"] * 1000 // truth["steps"]
    assert all(v == 0 for r, v in caused.items() if r != 5)


def test_a_run_with_nothing_slow_says_so(served):
    client, runs = served
    v = get(client, runs.ids["moe"], "verdicts")
    assert not [x for x in v["verdicts"] if x["severity"] == "warning"]
    assert v["summary"].startswith("No dimension stands out") and "DP replicas agree" in v["summary"]
    assert set(v["spreads"]) == {"pp", "tp", "ep", "dp"}


def test_a_step_range(served):
    client, runs = served
    truth = runs.truth["stage"]
    g = get(client, runs.ids["stage"], "grid", metric="computing", from_step=2, to_step=2)
    for i, r in enumerate(g["rank"]):
        assert abs(g["value"][i] - truth["computing_us"][(r, 1)] * 1000) <= 1
    assert get(client, runs.ids["stage"], "grid", status=400, from_step=2, to_step=1)["error"]["code"] == "bad_range"


def test_communication_per_group_kind(served):
    client, runs = served
    truth = runs.truth["moe"]
    c = get(client, runs.ids["moe"], "communication")
    kinds = {k["kind"]: k for k in c["kinds"]}
    assert set(kinds) == {"tp", "dp", "ep", "pp"}
    world, steps = truth["world"], truth["steps"]
    ops = {"tp": 2 * world * steps, "ep": 2 * world * steps, "dp": world * steps, "pp": world * steps}
    names = {"tp": ["tp"], "dp": ["dp"], "ep": ["exp"], "pp": ["pp"]}
    for kind, (_, transport, mb, transit_ms, _) in TRAFFIC.items():
        k = kinds[kind]
        assert k["ops"] == ops[kind] and k["group_names"] == names[kind]
        assert k["bandwidth"][transport]["gbps"] == pytest.approx(mb / transit_ms)
    # the slow rank's TP peers waited for it: the TP wait is the base wait plus the lateness
    rank = get(client, runs.ids["rank"], "communication")
    tp = {k["kind"]: k for k in rank["kinds"]}["tp"]
    base_wait = (TRAFFIC["tp"][4] - TRAFFIC["tp"][3]) * 1e6
    late = runs.truth["rank"]["wait_caused_us"] * 1000
    assert tp["wait_ns"] == pytest.approx(base_wait * tp["ops"] + late, abs=tp["ops"])
    # only rank 0's file names groups: the others' groups are told by where their ranks sit
    assert tp["groups"] == runs.truth["rank"]["world"] // 2 and tp["group_names"] == ["tp"]


def test_expert_load_from_the_dumps(served):
    client, runs = served
    truth = runs.truth["moe"]["moe"]["dumps"]
    a = get(client, runs.ids["moe"], "experts")
    assert a["source"] == "dumps" and a["sources"][:2] == ["dumps", "deployment"] and a["phase"] == "decode"
    assert a["expert_from"] == "deployment" and a["experts"] == list(range(truth["experts"]))
    for i, layer in enumerate(a["layers"]):
        assert a["z"][i] == [truth["tokens"][(layer, e)] for e in a["experts"]]  # the last collection only
        p = a["per_layer"][i]
        assert p["hottest_expert"] == truth["hottest"][layer]
        assert p["imbalance"] == pytest.approx(truth["imbalance"][layer], abs=1e-4)
    top = a["hottest"][0]
    assert top["expert"] == truth["hottest"][top["layer"]] and len(top["ranks"]) == truth["devices"]
    dep = get(client, runs.ids["moe"], "experts", source="deployment")
    hot_copies = {h["layer"]: h["expert"] for h in dep["hottest"]}
    assert hot_copies == truth["hottest"]


def test_expert_load_from_the_kernels(served):
    client, runs = served
    truth = runs.truth["moe"]
    a = get(client, runs.ids["moe"], "experts", source="kernels")
    holders = set(truth["moe"]["kernels"]["hot_holders"])
    assert a["ranks"] == list(range(truth["world"])) and a["layers"] == list(range(truth["moe"]["layers"]))
    assert {h["rank"] for h in a["hottest_ranks"]} <= holders and all(h["ep"] == 0 for h in a["hottest_ranks"])
    per = truth["moe"]["kernels"]["per_rank_call"]
    for p in a["per_call"]:
        members = [r for r, c in truth["grid"].items() if c["pp"] == p["stage"]]
        durs = [per[(r, 1, p["call"])][1] for r in members]
        assert p["imbalance"] == pytest.approx(max(durs) / statistics.fmean(durs), abs=1e-4)
        assert p["hottest_rank"] in holders


def test_bad_parameters(served):
    client, runs = served
    run = runs.ids["stage"]
    assert get(client, run, "grid", status=400, order="tp-pp")["error"]["code"] == "bad_strategy"
    assert get(client, run, "grid", status=422, metric="bogus")["error"]["code"] == "invalid_parameter"
    assert get(client, run, "grid", status=422, tp=0)["error"]["code"] == "invalid_parameter"
    assert get(client, run, "experts")["available"] is False
    assert get(client, run, "experts", source="kernels")["available"] is False
    assert get(client, runs.ids["moe"], "experts", status=400, phase="prefill")["error"]["code"] == "no_such_phase"
    assert get(client, runs.ids["moe"], "experts", status=422, source="bogus")["error"]["code"] == "invalid_parameter"


def test_the_grid_and_verdicts_answer_before_any_shard_is_ready(served):
    """The strategy comes from the small files' pass: a run whose shards are all pending answers the same."""
    client, runs = served
    from ascendscope.server.runs import RunStore

    run_dir = RunStore(runs.data_dir).run_dir(runs.ids["rank"])
    manifest = (run_dir / "manifest.json").read_text()
    before = get(client, runs.ids["rank"], "verdicts")
    try:
        pin(run_dir, pending=list(range(runs.truth["rank"]["world"])))
        assert json.loads((run_dir / "manifest.json").read_text())["ranks"]
        during = get(client, runs.ids["rank"], "verdicts")
        grid = get(client, runs.ids["rank"], "grid")
    finally:
        (run_dir / "manifest.json").write_text(manifest)
    assert during["summary"] == before["summary"] and len(grid["rank"]) == runs.truth["rank"]["world"]
    assert LATE_US > 0


def test_a_lone_middle_stage_is_held_to_the_end_stages():
    """PP 3: stage 1 has no other middle stage to be compared with; it is compared with the end stages."""
    from ascendscope.server.queries import strategy as sq
    from ascendscope.server.queries import strategy_verdicts as vq

    coords = {s: {"dp": 0, "pp": s, "tp": 0, "cp": 0, "ep": 0} for s in range(3)}
    g = sq.Grid({"tp": 1, "pp": 3, "dp": 1, "cp": 1, "ep": 1}, 3, "tp-cp-ep-dp-pp", "default", "distributed_args",
                None, None, [], [0, 1, 2], coords, dict.fromkeys(range(3), "metadata"), {0, 1, 2}, None)
    found, _ = vq._stage_verdicts(g, {0: 1030.0, 1: 1200.0, 2: 1060.0})
    slow = [v for v in found if v["kind"] == "pp_stage"]
    assert [v["stage"] for v in slow] == [1] and slow[0]["excess"] == pytest.approx(1200 / 1030 - 1, abs=1e-4)
    assert slow[0]["per"] == "step" and "per step (every stage runs every microbatch)" in slow[0]["text"]
