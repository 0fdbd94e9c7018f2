"""/api/runs/{id}/cluster/…: the cluster views' answers against the Summary and Communication endpoints on the
real 2-rank sample, msprof-analyze's cluster output, and a synthetic 1,000-rank × 100-step run whose rank tables
are empty (only the cluster tables answer), with its slow ranks and slow link known."""

from __future__ import annotations

import json

import duckdb
import pytest

from tests.cluster_sample import (
    BASE_COMPUTING_NS,
    SLOW_EXTRA_NS,
    SLOW_LINK_MS,
    add_with_cluster_tables,
    step_value,
    synthetic_cluster_run,
)
from tests.conftest import PYTORCH_TEXT, REAL_SAMPLES
from tests.samples import STEP, needs_real

FIXTURES = REAL_SAMPLES / "msinsight_server_fixtures"


@pytest.fixture(scope="module")
def cluster_runs(tmp_path_factory, level1_db):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data = tmp_path_factory.mktemp("cluster-data")
    work = tmp_path_factory.mktemp("cluster-work")
    ids = {"level1": add_with_cluster_tables(data, work, "level1", level1_db),
           "level1_plain": add_with_cluster_tables(data, work, "plain", level1_db)}
    big = synthetic_cluster_run(data, work)
    ids["big"] = big.run_id
    if FIXTURES.is_dir():
        from ascendscope.ingest.pipeline import ingest_path

        ingest_path(FIXTURES, work / "fixtures-src.duckdb")
        ids["fixtures"] = add_with_cluster_tables(data, work, "fixtures", work / "fixtures-src.duckdb", FIXTURES)
    # a run ingested before the cluster tables existed
    import shutil

    from ascendscope.server.runs import RunStore

    store = RunStore(data)
    old = store.create_run("old", "old")
    shutil.copy(level1_db, store.db_path(old.id))
    with duckdb.connect(str(store.db_path(old.id))) as con:
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'cluster%'"
                                    ).fetchall():
            con.execute(f"DROP TABLE {table}")
    store.set_status(old.id, "ready")
    ids["old"] = old.id
    # level1 ingested by the pipeline in both layouts (cluster tables built by ingest itself)
    from ascendscope.ingest.shards import ingest_sharded

    single = store.create_run("single", "level1")
    shutil.copy(level1_db, store.db_path(single.id))
    store.set_status(single.id, "ready")
    sharded = store.create_run("sharded", "level1")
    ingest_sharded(PYTORCH_TEXT / "level1", store.run_dir(sharded.id), workers=1)
    store.set_status(sharded.id, "ready")
    ids["single"], ids["sharded"] = single.id, sharded.id
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data)))) as client:
        yield client, ids, big


def get(client, run_id, path, **params):
    r = client.get(f"/api/runs/{run_id}/cluster/{path}", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_overview_and_heatmap_equal_the_summary_breakdown(cluster_runs):
    client, ids, _ = cluster_runs
    rid = ids["level1"]
    summary = client.get(f"/api/runs/{rid}/summary").json()["breakdown"]
    ov = get(client, rid, "overview")
    assert ov["ranks"]["rank"] == [0, 1] and ov["steps"] == [STEP]
    assert ov["per_rank"]["step_ns"] == [r["e2e_ns"] for r in summary]
    assert ov["per_rank"]["exposed_comm_ns"] == [r["communication_not_overlapped_ns"] for r in summary]
    assert ov["slow_ranks"] == [] and ov["cluster_analysis"]["found"] is False
    for metric, key in (("step", "e2e_ns"), ("computing", "computing_ns"),
                        ("exposed_comm", "communication_not_overlapped_ns"), ("free", "free_ns")):
        h = get(client, rid, "heatmap", metric=metric)
        assert h["ranks"] == [0, 1] and h["steps"] == [STEP]
        assert h["z"] == [[r[key]] for r in summary], metric


def test_matrix_equals_the_communication_views_matrix(cluster_runs):
    client, ids, _ = cluster_runs
    rid = ids["level1"]
    options = get(client, rid, "matrix")["options"]["keys"]
    assert options
    key = options[0]
    op_type = key["op_types"][0]
    mine = get(client, rid, "matrix", step=key["step"], group=key["group_id"], op_type=op_type)
    theirs = client.get(f"/api/runs/{rid}/communication/matrix",
                        params={"step": key["step"], "group": key["group_id"], "op_type": op_type,
                                "slot": "total", "comm_type": key["comm_type"]}).json()
    cells = [c for c in theirs["cells"] if c["src_rank"] != c["dst_rank"]]
    assert cells and mine["bin_size"] == 1 and mine["links"] == len(cells)
    got = {(mine["labels"][i], mine["labels"][j]): (bw, ns, n) for i, j, bw, ns, n in zip(
        *(mine["cells"][k] for k in ("i", "j", "bandwidth_gbps", "transit_time_ns", "links")))}
    assert got == {(str(c["src_rank"]), str(c["dst_rank"])): (c["bandwidth_gbps"], c["transit_time_ns"], 1)
                   for c in cells}  # LOCAL left out


def test_thousand_ranks_heatmap_is_complete_and_small(cluster_runs):
    client, ids, big = cluster_runs
    r = client.get(f"/api/runs/{ids['big']}/cluster/heatmap", params={"metric": "computing"})
    assert r.status_code == 200
    assert len(r.content) < 2_000_000  # 100,000 cells of integer ns
    h = r.json()
    assert h["ranks"] == list(range(big.ranks)) and h["steps"] == list(range(big.steps))
    assert not h["truncated"]
    assert h["z"][503][7] == step_value(503, 7, set(big.slow_ranks))[0]
    assert h["rank_total_ns"][3] == sum(step_value(3, s, set())[0] for s in range(big.steps))


def test_thousand_ranks_slow_ranks_named_with_their_cause(cluster_runs):
    client, ids, big = cluster_runs
    ov = get(client, ids["big"], "overview")
    assert ov["rank_count"] == big.ranks and len(ov["ranks"]["rank"]) == big.ranks
    assert sorted(s["rank"] for s in ov["slow_ranks"]) == big.slow_ranks
    for s in ov["slow_ranks"]:
        assert s["reason"] == "computing"
        computing = next(m for m in s["metrics"] if m["metric"] == "computing")
        assert computing["excess_ns"] > SLOW_EXTRA_NS * 0.9
        assert computing["median_ns"] > BASE_COMPUTING_NS
    assert ov["waiting_ranks"] == []


def test_thousand_ranks_matrix_is_binned_with_the_slow_link_first(cluster_runs):
    client, ids, big = cluster_runs
    r = client.get(f"/api/runs/{ids['big']}/cluster/matrix")
    assert r.status_code == 200
    assert len(r.content) < 200_000  # sparse cells
    m = r.json()
    assert m["links"] == big.ranks  # the ring, LOCAL left out
    assert m["bin_size"] == 4 and len(m["labels"]) == 250
    assert m["labels"][0] == "0–3" and m["labels"][-1] == "996–999" and len(m["ranks"]) == big.ranks
    src, dst = big.slow_link
    assert (m["slow_links"][0]["src_rank"], m["slow_links"][0]["dst_rank"]) == (src, dst)
    assert m["slow_links"][0]["transit_time_ns"] == int(SLOW_LINK_MS * 1_000_000)
    assert len(m["slow_links"]) <= 20
    cells = m["cells"]
    assert len(cells["i"]) == 250 + 250  # each block to itself, its last rank to the next block (999 → 0 too)
    # the block of ranks 40–43 sends to itself (40 → 41, 41 → 42, 42 → 43): its slowest link is the slow one, and
    # its bandwidth is the sum of sizes over the sum of times
    k = next(k for k in range(len(cells["i"])) if cells["i"][k] == 10 and cells["j"][k] == 10)
    assert cells["links"][k] == 3
    assert cells["min_bandwidth_gbps"][k] == pytest.approx(64.0 / SLOW_LINK_MS)
    assert cells["bandwidth_gbps"][k] == pytest.approx(3 * 64.0 / (SLOW_LINK_MS + 2 * 4.0))


@needs_real  # the real output's own numbers (16 ranks, rank 8's Computing)
def test_cluster_analysis_output_is_a_source(cluster_runs):
    client, ids, _ = cluster_runs
    if "fixtures" not in ids:
        pytest.skip(f"real sample {FIXTURES} not found")
    ov = get(client, ids["fixtures"], "overview")
    assert ov["cluster_analysis"]["found"] and ov["cluster_analysis"]["ranks"] == 16
    assert {f["status"] for f in ov["cluster_analysis"]["files"]} == {"loaded"}
    h = get(client, ids["fixtures"], "heatmap", source="cluster_analysis", metric="computing")
    assert h["ranks"] == list(range(16)) and h["steps"] == [2]
    assert h["z"][8] == [80072450]
    slow = get(client, ids["fixtures"], "overview", source="cluster_analysis")
    assert slow["per_rank"]["rank"] == list(range(16))


def test_runs_without_cluster_tables_answer_empty(cluster_runs):
    client, ids, _ = cluster_runs
    ov = get(client, ids["old"], "overview")
    assert ov["rank_count"] == 0 and ov["steps"] == [] and ov["cluster_analysis"]["found"] is False
    assert get(client, ids["old"], "heatmap")["z"] == []
    assert get(client, ids["old"], "matrix")["links"] == 0


def test_bad_parameters(cluster_runs):
    client, ids, _ = cluster_runs
    for path, params in (("heatmap", {"metric": "wall"}), ("overview", {"source": "x"}),
                         ("matrix", {"step": "s" * 100})):
        r = client.get(f"/api/runs/{ids['level1']}/cluster/{path}", params=params)
        assert r.status_code == 422, (path, r.text)
        assert json.loads(r.text)["error"]["code"] == "invalid_parameter"
    assert client.get("/api/runs/nope/cluster/overview").status_code == 404


@pytest.mark.parametrize(("path", "params"), [("overview", {}), ("heatmap", {"metric": "exposed_comm"}),
                                              ("matrix", {}), ("matrix", {"op_type": "allreduce"})])
def test_a_sharded_run_answers_like_a_single_file(cluster_runs, path, params):
    """The cluster tables of cluster.duckdb (made from every shard's) answer as the single file's do."""
    client, ids, _ = cluster_runs
    single = get(client, ids["single"], path, **params)
    sharded = get(client, ids["sharded"], path, **params)
    assert sharded == single
    assert single.get("rank_count", 2) == 2 and (path != "matrix" or single["links"] > 0)
