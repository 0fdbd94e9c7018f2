"""/api/runs/{id}/phases and /phases/summary against runs whose answers are known by construction
(``sample_data.phases``: a 1F1B pipeline run and an RL job, each as the text and the db export), one file and
sharded."""

from __future__ import annotations

import pytest

from ascendscope.server.queries.phase_model import busy_and_gaps, chain


def get(client, run_id, path="", **params):
    r = client.get(f"/api/runs/{run_id}/phases{path}", params=params)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("name", ["pp_text", "pp_db"])
def test_pipeline_bubbles_match_the_1f1b_schedule(client, phase_runs, name):
    t = phase_runs.truth[name]
    s = get(client, phase_runs.ids[name], "/summary")
    assert s["has_phases"] and s["mode"] == "pipeline"
    (pp,) = s["pipeline"]
    assert (pp["stages"], pp["microbatches"], pp["pp_type"]) == (4, 8, "1f1b")
    assert pp["step_ns"] == t["step_ns"] == 3_300_000
    assert [st["bubble_ns"] for st in pp["per_stage"]] == t["bubble_ns"] == [3 * 300_000] * 4
    # uniform stages: every stage's bubble ratio is the schedule's theoretical (p-1)/(m+p-1) = 3/11
    assert pp["theory_bubble_ratio"] == pytest.approx(3 / 11)
    assert all(st["bubble_ratio"] == pytest.approx(3 / 11) for st in pp["per_stage"])
    assert all((st["forward"], st["backward"]) == (8, 8) for st in pp["per_stage"])


def test_the_slow_stage_sets_the_step(client, phase_runs):
    t = phase_runs.truth["pp_slow"]
    (pp,) = get(client, phase_runs.ids["pp_slow"], "/summary")["pipeline"]
    assert pp["step_ns"] == t["step_ns"] and [st["bubble_ns"] for st in pp["per_stage"]] == t["bubble_ns"]
    assert pp["setter"] == t["setter"] == 2
    assert pp["per_stage"][2]["bubble_ratio"] < min(st["bubble_ratio"] for i, st in enumerate(pp["per_stage"])
                                                    if i != 2)


def test_phase_rows_keep_the_message_and_parse_it(client, phase_runs):
    run = phase_runs.ids["pp_text"]
    out = get(client, run, rank=1, source="device", limit=3)
    assert out["total"] == 16 and out["truncated"]
    first = out["rows"][0]
    assert first["message"] == "{'name': 'forward_step', 'current_microbatch': 0}"
    assert (first["phase"], first["microbatch"], first["iteration"], first["source"]) == ("forward_step", 0, 1,
                                                                                           "device")
    sched = phase_runs.truth["pp_text"]["schedule"][1][0]
    assert int(first["start_ns"]) == phase_runs.truth["pp_text"]["t0_ns"] + sched[2] * 1000
    assert first["timeline"].startswith(f"/runs/{run}/timeline?ranks=1&start_ns=")
    assert f"slice={first['slice_id']}" in first["timeline"]
    # the host range is there too, 3 µs earlier, with the same message
    host = get(client, run, rank=1, source="host", limit=1)["rows"][0]
    assert host["message"] == first["message"] and int(host["start_ns"]) == int(first["start_ns"]) - 3000
    # the summary's ranges: a rank with device ranges gives those only
    preferred = get(client, run, preferred="true", limit=1000)
    assert preferred["total"] == 64 and {r["source"] for r in preferred["rows"]} == {"device"}
    assert get(client, phase_runs.ids["pp_db"], preferred="true")["total"] == 64


@pytest.mark.parametrize("name", ["rl_text", "rl_db"])
def test_rl_roles_iterations_and_deciding_chain(client, phase_runs, name):
    t = phase_runs.truth[name]
    run = phase_runs.ids[name]
    s = get(client, run, "/summary")
    assert s["mode"] == "roles"
    roles = {(r["role"], r["role_source"]): r["ranks"] for r in s["roles"]}
    assert roles == {("actor", "name"): 4, ("rollout", "name"): 4, ("ref", "folder"): 4}
    assert [it["iteration"] for it in s["iterations"]] == [1, 2]
    for it, want in zip(s["iterations"], t["iterations"]):
        assert it["wall_ns"] == want["wall_ns"] and it["start_ns"] == str(want["start_ns"])
        assert [(c["phase"], c["rank"]) for c in it["chain"]] == [tuple(x) for x in want["chain"]]
        for w in it["workers"]:
            assert w["busy_ns"] == t["busy_ns"][(it["iteration"], w["rank"])]
            assert w["idle_ns"] == it["wall_ns"] - w["busy_ns"]
            assert sum(g["dur_ns"] for g in w["gaps"]) == w["idle_ns"]
        table = {p["phase"]: p for p in it["phases"]}
        assert list(table) == ["generate_sequences", "compute_log_prob", "compute_ref_log_prob", "update_actor",
                               "sync_weights"]
        k = it["iteration"] - 1
        for n, p in enumerate(it["phases"]):
            # one straggler per phase and iteration, 400 µs slower than base + 3 µs × worker
            assert p["straggler"] % 4 == (k * 3 + n) % 4 and p["max_ns"] - 400_000 <= p["min_ns"] + 9000
    r = get(client, run, role="ref", iteration=2)
    assert r["total"] == 4 and {x["rank"] for x in r["rows"]} == {4, 5, 6, 7}


def test_a_run_without_mstx_ranges_says_how_to_add_them(client, runs):
    s = get(client, runs.ids["generated"], "/summary")
    assert s["available"] and not s["has_phases"]
    assert "torch_npu.npu.mstx.range_start" in s["how_to"] and "msprof_tx=True" in s["how_to"]
    assert get(client, runs.ids["generated"])["total"] == 0


def test_bad_parameters_are_refused(client, phase_runs):
    run = phase_runs.ids["pp_text"]
    assert client.get(f"/api/runs/{run}/phases", params={"source": "gpu"}).status_code == 422
    assert client.get(f"/api/runs/{run}/phases", params={"limit": 10 ** 6}).status_code == 422


def test_chain_and_gaps_on_hand_made_rows():
    def row(rank, phase, s, e):
        return {"rank": rank, "role": None, "phase": phase, "slice_id": None, "start_ns": s, "end_ns": e}
    rows = [row(0, "a", 0, 10), row(1, "a", 0, 14), row(0, "b", 16, 30), row(1, "b", 16, 20)]
    assert [(c["rank"], c["phase"]) for c in chain(rows)] == [(1, "a"), (0, "b")]
    assert busy_and_gaps([(0, 10), (5, 12), (20, 25)], 0, 30) == (17, [(12, 20), (25, 30)])


def test_dualpipev_phases_are_counted_without_a_1f1b_formula():
    from ascendscope.server.queries.phase_model import pipeline

    def row(rank, phase, mb, s, e):
        return {"rank": rank, "iteration": 1, "phase": phase, "microbatch": mb, "start_ns": s, "end_ns": e}
    rows = [row(0, "forward_step_with_model_graph", 0, 0, 10), row(1, "forward_step_with_model_graph", 0, 10, 20),
            row(1, "forward_backward_overlaping", 1, 20, 40), row(0, "backward_step", 0, 40, 60),
            row(0, "WeightGradStore.pop", None, 60, 65)]
    (pp,) = pipeline(rows, None, None)
    assert pp["pp_type"] == "dualpipev" and pp["theory_bubble_ratio"] is None and pp["step_ns"] == 65
    stages = {s["rank"]: s for s in pp["per_stage"]}
    assert (stages[0]["busy_ns"], stages[0]["bubble_ns"], stages[1]["busy_ns"]) == (35, 30, 30)
    assert (stages[1]["overlap"], stages[0]["weight"], stages[0]["backward"]) == (1, 1, 1)
    assert pp["setter"] == 0 and pp["microbatches"] == 2


@pytest.mark.parametrize("name", ["rl_discrete", "rl_discrete_db"])
def test_rl_discrete_keeps_every_role_folder_and_matches_the_construction(client, phase_runs, name):
    """verl's discrete mode (a folder per role and call, every role numbering its workers from 0), the text export
    sharded and the db export in one file: every folder is a rank of the run, named <folder>·<own rank>, and the
    RL view's numbers are the construction's."""
    t = phase_runs.truth[name]
    run = phase_runs.ids[name]
    ranks = client.get(f"/api/runs/{run}").json()["ranks"]
    assert len(ranks) == 4 * 3 * 2  # folders × workers × iterations
    assert {(r["group_folder"], r["own_rank"], r["session"]) for r in ranks} == {
        (f, w, k) for f in ("rollout_generate", "actor_compute_log_prob", "ref_compute_log_prob", "actor_update")
        for w in range(3) for k in (1, 2)}
    s = get(client, run, "/summary")
    label = s["labels"]
    assert sorted(set(label.values())) == sorted(w for ws in t["workers_of"].values() for w in ws)
    assert {(r["role"], r["role_source"]): r["ranks"] for r in s["roles"]} == {
        ("rollout", "folder"): 6, ("actor", "folder"): 12, ("ref", "folder"): 6}
    assert [it["iteration"] for it in s["iterations"]] == [1, 2]
    for it, want in zip(s["iterations"], t["iterations"]):
        k = it["iteration"]
        assert it["wall_ns"] == want["wall_ns"] and it["start_ns"] == str(want["start_ns"])
        assert [(c["phase"], label[str(c["rank"])]) for c in it["chain"]] == [tuple(x) for x in want["chain"]]
        workers = {label[str(w["rank"])]: w for w in it["workers"]}
        assert set(workers) == {w for (i, w) in t["busy_ns"] if i == k}
        for name, w in workers.items():
            assert w["busy_ns"] == t["busy_ns"][(k, name)] and w["idle_ns"] == it["wall_ns"] - w["busy_ns"]
            assert sum(g["dur_ns"] for g in w["gaps"]) == w["idle_ns"]
        for p in it["phases"]:
            durs = {w: t["busy_ns"][(k, w)] for w in t["workers_of"][p["phase"]]}
            assert (p["ranks"], p["min_ns"], p["max_ns"]) == (3, min(durs.values()), max(durs.values()))
            assert p["median_ns"] == sorted(durs.values())[1]
            assert label[str(p["straggler"])] == max(durs, key=durs.get)
    # the other views answer on this run
    for path in ("/summary", "/cluster/overview", "/cluster/heatmap", "/timeline/tracks"):
        assert client.get(f"/api/runs/{run}{path}").status_code == 200, path
    first = get(client, run, limit=1)["rows"][0]
    assert first["label"] == label[str(first["rank"])]
    r = client.get(f"/api/runs/{run}/timeline/slices", params={"ranks": first["rank"], "start_ns": first["start_ns"],
                                                                "end_ns": first["end_ns"]})
    assert r.status_code < 500, r.text


@pytest.mark.parametrize("name", ["dualpipev_text", "dualpipev_db"])
def test_dualpipev_overlapped_blocks_and_bubbles_match_the_construction(client, phase_runs, name):
    t = phase_runs.truth[name]
    s = get(client, phase_runs.ids[name], "/summary")
    (pp,) = s["pipeline"]
    assert (pp["pp_type"], pp["stages"], pp["microbatches"], pp["theory_bubble_ratio"]) == ("dualpipev", 4, 8, None)
    assert pp["step_ns"] == t["step_ns"]
    assert [st["bubble_ns"] for st in pp["per_stage"]] == t["bubble_ns"]
    assert [st["busy_ns"] for st in pp["per_stage"]] == t["busy_ns"]
    assert [st["bubble_ratio"] for st in pp["per_stage"]] == pytest.approx(t["bubble_ratio"])
    assert [{k: st[k] for k in ("forward", "backward", "overlap", "weight")} for st in pp["per_stage"]] == t["counts"]
    # every stage runs 2m forwards and 2m backwards, each overlapped block one of each
    assert all(c["forward"] + c["overlap"] == 16 == c["backward"] + c["overlap"] for c in t["counts"])
    assert pp["setter"] == t["setter"]
    rows = get(client, phase_runs.ids[name], rank=3, phase="forward_backward_overlaping", preferred="true")["rows"]
    assert len(rows) == t["counts"][3]["overlap"] and all(r["microbatch"] is not None for r in rows)


def test_busy_and_gaps_equals_the_clipped_union():
    """The one-pass busy_and_gaps against its slow equivalent: clip the union of the intervals to the window and
    take the rest as gaps."""
    import random

    from ascendscope.server.queries.phase_model import union

    def slow(ivs, lo, hi):
        merged = [(max(s, lo), min(e, hi)) for s, e in union(ivs) if e > lo and s < hi]
        gaps, at = [], lo
        for s, e in merged:
            if s > at:
                gaps.append((at, s))
            at = max(at, e)
        return sum(e - s for s, e in merged), gaps + ([(at, hi)] if at < hi else [])

    rng = random.Random(38)
    for _ in range(3000):
        ivs = [(s, s + rng.randint(0, 15)) for s in (rng.randint(0, 50) for _ in range(rng.randint(0, 8)))]
        lo = rng.randint(0, 30)
        hi = lo + rng.randint(0, 40)
        assert busy_and_gaps(ivs, lo, hi) == slow(ivs, lo, hi)
