"""The parallel strategy at ingest (ingest/strategy.py): each rank's coordinates and the run's groups from the
profiler_metadata.json files (the real 8-rank metadata sample and the real 4-rank run, and their generated twins),
the text export's group ids, the rank order, and the single-file and sharded ingests agreeing."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from ascendscope.ingest import strategy
from ascendscope.ingest.layout import connect
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.ingest.shards import ingest_sharded
from ascendscope.sample_data.strategy import write_strategy_run
from tests.samples import REAL_ROOT, needs_real

METADATA_SAMPLE = REAL_ROOT / "msinsight_server_fixtures" / "metadata" / "profiler_metadata.json"
ST4 = REAL_ROOT / "msinsight_st_4rank_2025q4"
GRID_SQL = "SELECT rank, dp, pp, tp, cp, ep, source, in_run FROM rank_grid ORDER BY rank"


def _one_rank_run(root, metadata_file):
    """A run of rank 0 alone, its profiler_metadata.json the given file (copied into a temp folder only)."""
    folder = root / "rank0_ascend_pt"
    (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (folder / "profiler_info_0.json").write_text(json.dumps({"rank_id": 0}), encoding="utf-8")
    shutil.copy(metadata_file, folder / "profiler_metadata.json")
    (folder / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").write_text(
        "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
        "Communication(Not Overlapped and Exclude Receive),Preparing\r\n1,100.0,10.0,5.0,15.0,2.0,0,0,10.0,0\r\n",
        encoding="utf-8")
    return root


def _check_rank0_of_tp2_pp2_dp2(run_dir):
    """Rank 0's file of a TP2 × PP2 × DP2 run of 8 ranks: its groups place it and the members of its tp, dp and
    pp groups; the four others follow the rank order; each group keeps its kind."""
    con, _ = connect(run_dir)
    try:
        grid = {r: tuple(rest) for r, *rest in con.execute(GRID_SQL).fetchall()}
        head = con.execute("SELECT world_size, tp, pp, dp, cp, ep, sizes_source, \"order\", order_source "
                           "FROM parallel_strategy").fetchall()
        groups = {(n, tuple(r)): k for n, r, k in con.execute(
            "SELECT group_name, ranks, kind FROM parallel_groups").fetchall()}
    finally:
        con.close()
    assert head == [(8, 2, 2, 2, 1, 1, "distributed_args", "tp-cp-ep-dp-pp", "default")]
    #            rank: (dp, pp, tp, cp, ep, source, in_run)
    assert grid == {0: (0, 0, 0, 0, 0, "metadata", True), 1: (0, 0, 1, 0, 0, "peers", False),
                    2: (1, 0, 0, 0, 0, "peers", False), 3: (1, 0, 1, 0, 0, "inferred", False),
                    4: (0, 1, 0, 0, 0, "peers", False), 5: (0, 1, 1, 0, 0, "inferred", False),
                    6: (1, 1, 0, 0, 0, "inferred", False), 7: (1, 1, 1, 0, 0, "inferred", False)}
    assert groups[("tp", (0, 1))] == "tp" and groups[("pp", (0, 4))] == "pp" and groups[("dp", (0, 2))] == "dp"
    assert groups[("default_group", tuple(range(8)))] == "world" and groups[("dp_cp", (0, 2))] == "dp"


@needs_real
def test_real_metadata_sample_places_rank_0_and_its_groups(tmp_path):
    """../shared/real_samples/msinsight_server_fixtures/metadata: rank 0's file of an 8-rank TP2 × PP2 × DP2 job."""
    src = _one_rank_run(tmp_path / "src", METADATA_SAMPLE)
    ingest_sharded(src, tmp_path / "run", workers=1)
    _check_rank0_of_tp2_pp2_dp2(tmp_path / "run")
    con, _ = connect(tmp_path / "run")
    kinds = dict(con.execute("SELECT group_name, any_value(kind) FROM parallel_groups GROUP BY ALL").fetchall())
    con.close()
    # the composite groups of the real file: with ep 1 the expert groups are the tp / dp groups they equal
    assert kinds["tp_exp"] == "tp" and kinds["dp_modulo_exp"] == "dp" and kinds["embd"] == "pp"
    assert kinds["mp"] == "mp" and kinds["tp_dp"] == "tp_dp" and kinds["pp_new_stream"] == "pp"


def test_generated_twin_of_the_metadata_sample(tmp_path):
    """The same check on a generated rank 0 file of a TP2 × PP2 × DP2 run (the twin of the real sample)."""
    write_strategy_run(tmp_path / "gen", tp=2, pp=2, dp=2, metadata="rank0")
    src = _one_rank_run(tmp_path / "src", tmp_path / "gen" / "rank0_ascend_pt" / "profiler_metadata.json")
    ingest_sharded(src, tmp_path / "run", workers=1)
    _check_rank0_of_tp2_pp2_dp2(tmp_path / "run")


def _group_ids_are_named(run_dir) -> tuple[set, set]:
    con, _ = connect(run_dir)
    try:
        ids = {g for (g,) in con.execute("SELECT DISTINCT group_id FROM comm_ops "
                                         "WHERE group_id IS NOT NULL").fetchall()}
        named = {h for (h,) in con.execute("SELECT hashed_id FROM parallel_groups").fetchall()}
    finally:
        con.close()
    return ids, named


@needs_real
def test_real_4_rank_run_every_group_id_is_a_stated_group(tmp_path):
    """The text export names a group by the double hash of its parallel_group_info key: every group id in the real
    4-rank run's communication.json is one of its files' groups; TP1 × PP2 × DP2, every rank placed by its file."""
    ingest_sharded(ST4, tmp_path / "run", workers=2)
    ids, named = _group_ids_are_named(tmp_path / "run")
    assert ids and ids <= named
    con, _ = connect(tmp_path / "run")
    grid = con.execute(GRID_SQL).fetchall()
    con.close()
    assert grid == [(0, 0, 0, 0, 0, 0, "metadata", True), (1, 1, 0, 0, 0, 0, "metadata", True),
                    (2, 0, 1, 0, 0, 0, "metadata", True), (3, 1, 1, 0, 0, 0, "metadata", True)]


def test_generated_run_every_group_id_is_a_stated_group(tmp_path):
    write_strategy_run(tmp_path / "gen", tp=1, pp=2, dp=2)
    ingest_sharded(tmp_path / "gen", tmp_path / "run", workers=1)
    ids, named = _group_ids_are_named(tmp_path / "run")
    assert ids and ids <= named


def test_double_hash():
    # a key of the real 4-rank run and the id its communication.json names the group by
    assert strategy.double_hash("group_name_5") == 5862276114690318097
    assert strategy.double_hash("") == 0


@pytest.mark.parametrize("metadata", ["all", "rank0", "sizes"])
def test_the_grid_is_the_generated_layout(tmp_path, metadata):
    truth = write_strategy_run(tmp_path / "gen", tp=2, pp=2, dp=4, ep=2, metadata=metadata)
    out = tmp_path / "run.duckdb"
    ingest_path(tmp_path / "gen", out)
    with duckdb.connect(str(out), read_only=True) as con:
        grid = {r: dict(zip(("dp", "pp", "tp", "cp", "ep"), c)) for r, *c in
                con.execute("SELECT rank, dp, pp, tp, cp, ep FROM rank_grid").fetchall()}
        sources = {s for (s,) in con.execute("SELECT DISTINCT source FROM rank_grid").fetchall()}
    assert grid == {r: {d: c[d] for d in ("dp", "pp", "tp", "cp", "ep")} for r, c in truth["grid"].items()}
    assert sources == {"all": {"metadata"}, "rank0": {"metadata", "peers", "inferred"},
                       "sizes": {"inferred"}}[metadata]


def test_order_and_coordinates():
    sizes = {"tp": 2, "pp": 2, "dp": 4, "cp": 1, "ep": 2}
    order = strategy.parse_order(strategy.DEFAULT_ORDER)
    assert [strategy.coordinates(r, sizes, order)["dp"] for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [strategy.coordinates(r, sizes, order)["ep"] for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert strategy.coordinates(9, sizes, order)["pp"] == 1
    assert strategy.parse_order("tp-pp-dp-cp") == ["tp", "pp", "ep", "dp", "cp"]
    for bad in ("tp-pp", "tp-tp-cp-dp-pp", "tp-cp-dp-pp-xx"):
        with pytest.raises(ValueError, match="name each of tp, cp, dp, pp once"):
            strategy.parse_order(bad)


def test_bad_files_warn_and_the_rest_places_ranks(tmp_path):
    """A group without ranks, a group stated two ways, sizes that disagree and a group of the wrong size: each a
    warning naming the file, the other ranks still placed."""
    metas = {
        0: {"distributed_args": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1,
                                 "data_parallel_size": 2, "world_size": 4},
            "parallel_group_info": {"a": {"group_name": "tp", "global_ranks": [0, 1]}, "b": {"group_name": "dp"},
                                    "c": {"group_name": "dp", "global_ranks": [0, 1, 2]}}},
        1: {"distributed_args": {"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 1,
                                 "data_parallel_size": 1, "world_size": 4},
            "parallel_group_info": {"a": {"group_name": "tp", "global_ranks": [1, 3]}}},
        2: {"distributed_args": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1,
                                 "data_parallel_size": 2, "world_size": 4}},
    }
    sol = strategy.solve(metas, [0, 1, 2, 3], folders={0: "r0_ascend_pt", 1: "r1_ascend_pt"})
    text = "\n".join(sol.warnings)
    assert "r0_ascend_pt/profiler_metadata.json: group 'b' has no list of ranks" in text
    assert "r1_ascend_pt/profiler_metadata.json: group 'a' lists [1, 3]" in text
    assert "distributed_args disagree with those of most ranks (1 rank(s): 1)" in text
    assert "group 'c' (dp) has 3 ranks, the dp size is 2" in text
    assert sol.sizes["tp"] == 2 and sol.sizes["dp"] == 2
    assert {r: c for r, (c, _) in sol.grid.items()}[3] == {"dp": 1, "pp": 0, "tp": 1, "cp": 0, "ep": 0}


def test_single_file_and_sharded_ingests_agree(tmp_path):
    write_strategy_run(tmp_path / "gen", tp=2, pp=2, dp=2, ep=2, moe_layers=2, hot_expert=0, metadata="rank0")
    ingest_path(tmp_path / "gen", tmp_path / "one.duckdb")
    ingest_sharded(tmp_path / "gen", tmp_path / "run", workers=2)
    sharded, _ = connect(tmp_path / "run")
    with duckdb.connect(str(tmp_path / "one.duckdb"), read_only=True) as one:
        for table in ("parallel_strategy", "rank_grid", "parallel_groups", "expert_hotspot", "expert_deployment",
                      "expert_files", "cluster_moe_kernels"):
            sql = f"SELECT * FROM {table} ORDER BY ALL"
            assert one.execute(sql).fetchall() == sharded.execute(sql).fetchall(), table
            assert one.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
    sharded.close()
