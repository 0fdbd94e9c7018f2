"""/api/runs/{id}/serving/…: percentiles, per-request TTFT / TPOT / queue, batches, KV cache and the serving
advice against generated serving runs whose answers are known by construction (tests/serving_sample.py)."""

from __future__ import annotations

import pytest

from tests.serving_sample import nearest_rank, serving_store


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data = tmp_path_factory.mktemp("serving-data")
    ids, truths = serving_store(data, tmp_path_factory.mktemp("serving-work"))
    app = create_app(Settings.from_env(environ={}, data_dir=str(data)))
    with TestClient(app) as client:
        yield client, ids, truths


def get(client, run_id, path, **params):
    resp = client.get(f"/api/runs/{run_id}/serving/{path}", params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.parametrize("name", ["burst", "burst_us", "burst_db", "csv_only"])
def test_summary_percentiles(served, name):
    client, ids, truths = served
    reqs = truths[name]["requests"]
    out = get(client, ids[name], "summary")
    assert out["has_serving"] and out["counts"]["requests"] == len(reqs)
    for metric in ("ttft_ns", "tpot_ns", "e2e_ns", "queue_ns"):
        values = [r[metric] for r in reqs]
        assert out["percentiles"][metric] == {f"p{int(q * 100)}": nearest_rank(values, q) for q in (0.5, 0.9, 0.99)}
    window = max(r["arrival_ns"] + r["e2e_ns"] for r in reqs) - min(r["arrival_ns"] for r in reqs)
    assert out["throughput"]["output_tokens_per_s"] == pytest.approx(
        sum(r["output_tokens"] for r in reqs) * 1e9 / window)


def test_requests_and_range_filter(served):
    client, ids, truths = served
    reqs = sorted(truths["burst"]["requests"], key=lambda r: r["arrival_ns"])
    out = get(client, ids["burst"], "requests")
    rows = out["rows"]
    assert rows["rid"] == [r["rid"] for r in reqs] and not out["truncated"]
    assert rows["queue_ns"] == [r["queue_ns"] for r in reqs]
    assert rows["ttft_ns"] == [r["ttft_ns"] for r in reqs]
    assert rows["tpot_ns"] == [r["tpot_ns"] for r in reqs]
    assert rows["prefill_ns"] == [r["ttft_ns"] - r["queue_ns"] for r in reqs]
    # a range that starts after req-0 ends keeps only the requests still alive then
    cut = reqs[0]["arrival_ns"] + reqs[0]["e2e_ns"] + 1
    alive = [r["rid"] for r in reqs if r["arrival_ns"] + r["e2e_ns"] >= cut]
    part = get(client, ids["burst"], "requests", start_ns=cut)
    assert part["rows"]["rid"] == alive and part["total"] == len(alive)
    summary = get(client, ids["burst"], "summary", start_ns=cut)
    assert summary["counts"]["in_range"] == sum(1 for r in reqs if r["arrival_ns"] >= cut)


def test_batches_link_requests(served):
    client, ids, truths = served
    out = get(client, ids["burst"], "batches")
    rows = out["rows"]
    assert len(rows["batch_id"]) == len(truths["burst"]["batches"])
    for i, b in enumerate(truths["burst"]["batches"]):
        assert rows["rids"][i] == sorted(item[0] for item in b["items"])
        assert rows["batch_size"][i] == len(b["items"])
    assert out["origin_ns"] == str(truths["burst"]["requests"][0]["arrival_ns"])


def test_kvcache_series(served):
    client, ids, truths = served
    rows = get(client, ids["burst"], "kvcache")["rows"]
    assert rows["free_blocks"] == [k["free"] for k in truths["burst"]["kvcache"]]
    assert get(client, ids["burst_db"], "kvcache")["rows"]["free_blocks"] == []


def test_slowest_reasons(served):
    client, ids, truths = served
    slow = get(client, ids["burst"], "summary")["slowest"]
    reqs = truths["burst"]["requests"]
    assert [s["rid"] for s in slow] == [r["rid"] for r in sorted(reqs, key=lambda r: (-r["e2e_ns"], r["rid"]))]
    # the last arrivals waited for the first ones' prefills and decodes: queueing is why they were slow
    assert slow[0]["reason"] == "queued"


def test_advice_rules(served):
    client, ids, _ = served

    def keys(name):
        resp = client.get(f"/api/runs/{ids[name]}/advice")
        assert resp.status_code == 200, resp.text
        return {f["id"].split(":")[-1] for f in resp.json()["findings"] if f["category"] == "serving"}

    assert keys("burst") == {"queue_dominates_ttft", "decode_batches_small"}
    assert keys("calm") == set()
    assert "kvcache_exhausted" in keys("tiny_kv")


def test_no_serving_data_is_said(client, runs):
    out = client.get(f"/api/runs/{runs.ids['level1']}/serving/summary").json()
    assert out == {"has_serving": False, "origin_ns": None}
    for path in ("requests", "batches", "kvcache"):
        resp = client.get(f"/api/runs/{runs.ids['level1']}/serving/{path}")
        assert resp.status_code == 200 and resp.json()["has_serving"] is False


@pytest.mark.parametrize("params", [{"start_ns": "x"}, {"limit": 0}, {"limit": 10**9}, {"end_ns": 2**70}])
def test_bad_parameters_are_422(served, params):
    client, ids, _ = served
    for path in ("summary", "requests", "batches", "kvcache"):
        if "limit" in params and path == "summary":
            continue
        resp = client.get(f"/api/runs/{ids['burst']}/serving/{path}", params=params)
        assert resp.status_code == 422, (path, params, resp.text)


def test_curves_account_for_every_request(served):
    client, ids, truths = served
    reqs = truths["burst"]["requests"]
    c = get(client, ids["burst"], "summary")["curves"]
    bucket = c["bucket_ns"]
    assert c["t_ns"] == sorted(c["t_ns"]) and len(c["t_ns"]) >= 2
    assert round(sum(c["finished_per_s"]) * bucket / 1e9) == len(reqs)
    assert round(sum(c["output_tokens_per_s"]) * bucket / 1e9) == sum(r["output_tokens"] for r in reqs)
    assert max(v for v in c["ttft_p99"] if v is not None) == max(r["ttft_ns"] for r in reqs)


def test_a_run_of_no_ranks_answers_everywhere(served):
    """Serving CSVs opened alone make a run without ranks: no view or API answers 5xx."""
    client, ids, _ = served
    run = ids["csv_only"]
    assert client.get(f"/api/runs/{run}").json()["id"] == run
    for path in ("serving/summary", "advice", "summary/overview", "timeline/tracks", "cluster/overview",
                 "operators/kernels", "memory/peaks", "communication/overview"):
        resp = client.get(f"/api/runs/{run}/{path}")
        assert resp.status_code < 500, (path, resp.status_code, resp.text[:300])
    for view in ("timeline", "serving", "summary", "advice", "cluster", "operator", "memory", "communication",
                 "query"):
        resp = client.get(f"/runs/{run}/{view}")
        assert resp.status_code == 200, (view, resp.status_code)


def test_preempted_is_the_reason(served):
    client, ids, truths = served
    out = get(client, ids["preempted"], "summary")
    victim = next(r["rid"] for r in truths["preempted"]["requests"] if r["preempted"])
    assert out["counts"]["preempted"] == 1
    assert {s["rid"]: s["reason"] for s in out["slowest"]}[victim] == "preempted"


def test_forward_queues_pd_and_coordinator(served):
    client, ids, truths = served
    more = truths["pd"]["more"]
    fwd = get(client, ids["pd"], "forward")
    assert len(fwd["rows"]["prof_id"]) == len(more["forwards"]) and not fwd["truncated"]
    lanes = {lane["prof_id"]: lane for lane in fwd["lanes"]}
    for card in ("0", "1"):
        mine = [f for f in more["forwards"] if f["prof_id"] == card]
        assert lanes[card]["forwards"] == len(mine)
        assert lanes[card]["bubble_ns"] == sum(f["bubble_ns"] or 0 for f in mine)
    queues = get(client, ids["pd"], "queues")["rows"]
    waiting = [s for q, s in zip(queues["queue"], queues["size"]) if q == "waiting"]
    assert max(waiting) == max(q["size"] for q in more["queues"] if q["queue"] == "waiting")
    pd = get(client, ids["pd"], "pd")["rows"]
    reqs = {r["rid"]: r for r in truths["pd"]["requests"]}
    for i, rid in enumerate(pd["rid"]):
        assert pd["kv_transfer_ns"][i] == more["kv_transfer_ns"][rid]
        assert pd["prefill_ns"][i] == reqs[rid]["ttft_ns"] and pd["e2e_ns"][i] == reqs[rid]["e2e_ns"]
    coord = get(client, ids["pd"], "coordinator")["rows"]
    assert sorted(coord["node_type"]) == ["decode", "prefill"]
    # a run without those files answers empty lists
    assert get(client, ids["burst"], "pd")["rows"]["rid"] == [] and get(client, ids["burst"], "forward")["lanes"] == []


def test_slowest_requests_carry_their_queue_and_transfer(served):
    client, ids, truths = served
    more = truths["pd"]["more"]
    slow = get(client, ids["pd"], "summary")["slowest"]
    top = slow[0]
    req = next(r for r in truths["pd"]["requests"] if r["rid"] == top["rid"])
    waited = [q["size"] for q in more["queues"] if q["queue"] == "waiting"
              and req["arrival_ns"] <= q["ts_ns"] <= req["arrival_ns"] + req["queue_ns"]]
    assert top["waiting_max"] == max(waited) and top["swapped_max"] == 0
    assert top["kv_transfer_ns"] == more["kv_transfer_ns"][top["rid"]]
    assert get(client, ids["burst"], "summary")["slowest"][0]["waiting_max"] is None
