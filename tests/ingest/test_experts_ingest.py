"""Expert dumps at ingest (ingest/experts.py): MindIE's hotspot CSVs (the latest collection only) and deployment
files, what a bad file says, and the MoE kernels of a rank (cluster_moe_kernels)."""

from __future__ import annotations

import json

import duckdb

from ascendscope.ingest import experts
from ascendscope.ingest.layout import connect
from ascendscope.ingest.shards import ingest_sharded


def _load(folder) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    con = duckdb.connect(":memory:")
    return con, experts.load_experts(con, folder)


def test_hotspot_keeps_the_latest_collection(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    (d / "model_gen_config.json").write_text(json.dumps({"num_moe_layers": 2, "num_of_experts": 6}))
    # two collections of two layers: only the last two rows are the latest
    (d / "decode_1.csv").write_text("1,1,1\n2,2,2\n10,20,30\n40,50,60\n")
    con, warnings = _load(tmp_path)
    assert warnings == []
    rows = con.execute("SELECT source, phase, rank, layer, slot, tokens FROM expert_hotspot ORDER BY ALL").fetchall()
    assert rows == [("dump", "decode", 1, 0, 0, 10), ("dump", "decode", 1, 0, 1, 20), ("dump", "decode", 1, 0, 2, 30),
                    ("dump", "decode", 1, 1, 0, 40), ("dump", "decode", 1, 1, 1, 50), ("dump", "decode", 1, 1, 2, 60)]
    files = con.execute("SELECT file, kind, rows, status, num_moe_layers, num_experts FROM expert_files "
                        "ORDER BY file").fetchall()
    assert files == [("decode_1.csv", "hotspot", 6, "loaded", None, None),
                     ("model_gen_config.json", "config", 1, "loaded", 2, 6)]


def test_bad_dumps_say_what_is_wrong(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "prefill_0.csv").write_text("1,2\n")  # no config beside it
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "model_gen_config.json").write_text(json.dumps({"num_moe_layers": 2}))
    (tmp_path / "b" / "decode_0.csv").write_text("1,x,3\n4,5\n")
    (tmp_path / "b" / "decode_global_deployment.json").write_text(json.dumps({"moe_layer_count": 2}))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "model_gen_config.json").write_text("{not json")
    (tmp_path / "c" / "decode_0.csv").write_text("1\n")
    con, warnings = _load(tmp_path)
    text = "\n".join(warnings)
    assert "a/prefill_0.csv: no readable model_gen_config.json beside it" in text
    assert "b/decode_0.csv: layer 0 slot 1: 'x' is not a count, skipped" in text
    assert "b/decode_0.csv: layer 1: 2 values, the first layer has 3; kept as they are" in text
    assert "b/decode_global_deployment.json: no layer_list: not read" in text
    assert "c/model_gen_config.json: not read" in text and "c/decode_0.csv: no readable" in text
    status = dict(con.execute("SELECT source || '/' || file, status FROM expert_files").fetchall())
    assert status == {"a/prefill_0.csv": "failed", "b/model_gen_config.json": "loaded", "b/decode_0.csv": "partial",
                      "b/decode_global_deployment.json": "failed", "c/model_gen_config.json": "failed",
                      "c/decode_0.csv": "failed"}
    assert con.execute("SELECT count(*) FROM expert_hotspot").fetchone()[0] == 4


def test_deployment_rows(tmp_path):
    dep = {"moe_layer_count": 1, "layer_list": [{"layer_id": 0, "device_count": 2, "device_list": [
        {"device_id": 0, "device_expert": [3, 0]}, {"device_id": 1, "device_expert": [1, 2, 3]}]}]}
    (tmp_path / "prefill_global_deployment.json").write_text(json.dumps(dep))
    con, warnings = _load(tmp_path)
    assert warnings == []
    assert con.execute("SELECT phase, layer, rank, slot, expert FROM expert_deployment ORDER BY ALL").fetchall() == [
        ("prefill", 0, 0, 0, 3), ("prefill", 0, 0, 1, 0), ("prefill", 0, 1, 0, 1), ("prefill", 0, 1, 1, 2),
        ("prefill", 0, 1, 2, 3)]


def test_dumps_alone_are_a_run_and_rank_folders_are_not_searched(tmp_path):
    src = tmp_path / "src"
    (src / "dumps").mkdir(parents=True)
    (src / "dumps" / "model_gen_config.json").write_text(json.dumps({"num_moe_layers": 1}))
    (src / "dumps" / "decode_0.csv").write_text("5,6\n")
    summary = ingest_sharded(src, tmp_path / "run", workers=1)
    assert summary["ranks"] == [] and summary["expert_rows"] == 2
    con, _ = connect(tmp_path / "run")
    assert con.execute("SELECT sum(tokens) FROM expert_hotspot").fetchone()[0] == 11
    assert con.execute("SELECT count(*) FROM rank_grid").fetchone()[0] == 0
    con.close()
    inside = tmp_path / "x" / "rank0_ascend_pt"
    inside.mkdir(parents=True)
    (inside / "decode_0.csv").write_text("1\n")
    assert experts.find(tmp_path / "x") == []


def test_moe_kernels_of_a_rank():
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE kernels (rank INTEGER, src_row INTEGER, step_id BIGINT, name VARCHAR, type VARCHAR, "
                "start_ns BIGINT, duration_ns BIGINT, input_shapes VARCHAR)")
    con.executemany("INSERT INTO kernels VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
        (0, 1, 1, "aclnnGroupedMatmulV4_GroupedMatmul_GroupedMatmul", "GroupedMatmul", 100, 50,
         '"96,4096;4,4096,1408"'),
        (0, 2, 1, "MatMulV2", "MatMulV2", 160, 10, "8,8"),
        (0, 3, 1, "aclnnMoeDistributeDispatch_MoeDistributeDispatch", "MoeDistributeDispatch", 20, 5, "96,4096"),
        (0, 4, 1, "aclnnGroupedMatmulSwiglu_GroupedMatmulSwiglu", "GroupedMatmulSwiglu", 300, 70, "128,4096"),
        (0, 5, 2, "aclnnGroupedMatmulV4_GroupedMatmul_GroupedMatmul", "GroupedMatmul", 900, 40, ""),
    ])
    experts.build_moe_kernels(con)
    got = con.execute("SELECT step, family, call, dur_ns, tokens FROM cluster_moe_kernels ORDER BY ALL").fetchall()
    assert got == [
        (1, "dispatch", 0, 5, 96), (1, "grouped_matmul", 0, 50, 96), (1, "grouped_matmul", 1, 70, 128),
        (2, "grouped_matmul", 0, 40, None)]
    # a Level0 header without Type or Input Shapes (the kernels table takes the file's columns): by name alone
    con.execute("CREATE OR REPLACE TABLE kernels AS SELECT rank, src_row, step_id, name, start_ns, duration_ns "
                "FROM kernels")
    experts.build_moe_kernels(con)
    assert con.execute("SELECT count(*), count(tokens) FROM cluster_moe_kernels").fetchone() == (4, 0)
