"""Generated twins of the real samples: a folder laid out like ``../shared/real_samples`` whose every sample is
written by ``sample_data`` (so a checkout without ``../shared`` runs the same tests on data of the same formats).

:func:`build_tree` writes, under ``root``:

* ``msinsight_pytorch_2025/{text,db}/level{0,1,2}/rank{0,1}_ascend_pt``: 2-rank runs of one step of one model at
  each profiler level, as a text export and as a db export (each another collection of the same script, as the
  real ones are);
  the Level1 db's rank 0 carries an ``OVERLAP_ANALYSIS`` table, the others derive the lane;
* ``msinsight_st_4rank_2025q4/level2/rank_{0..3}_ascend_pt``: 4 ranks, text export with analysis.db beside it,
  no trace and no operator_details.csv; ranks 1 and 3 keep only the communication files, step_trace_time.csv
  and analysis.db; profiler_metadata.json with ``distributed_args`` and ``parallel_group_info``;
* ``msinsight_server_fixtures``: ``test_rank_{0,1}`` in the older (2023) CSV layouts (fewer columns, a
  spreadsheet-saved memory_record, no trace, a ``static_op_mem.csv`` nothing reads), a p2p send/receive in
  communication.json and the older per-op matrix keys; ``cluster_analysis_output`` of a 16-rank job;
  ``full_db/msprof_0.db`` (an msprof db export: the device tables only, plus a table renamed by a tool) and
  ``full_db/cluster_analysis.db``; ``metadata/profiler_metadata.json``; ``test_kernel_parse/op_summary_1.csv``;
* ``mindinsight_msprof_2dev_2023``: msprof's older per-iteration layout, 2 devices, 10 iterations;
* ``hta_gpu_kineto_nonascend``: Kineto GPU traces (``trace_filter/sampled_rank-{0,1}.json.gz`` in the 2023 form,
  ``nccl_parser_config/nccl_data.json.gz`` with baseTimeNanoseconds).

:func:`ensure_tree` builds it once per version of the generator (a folder in the temp dir named by a hash of
``sample_data`` and this file) and returns it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "TWINS.md"
OPS_PER_STEP = 200
SEED = 2  # the model (and seed) of tests/advice_sample.py: it has every kind of advice finding


def _version() -> str:
    h = hashlib.sha256()
    for path in sorted((ROOT / "sample_data").glob("*.py")) + [Path(__file__)]:
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def ensure_tree(base: Path | None = None) -> Path:
    """The twin tree for this version of the generator, built on first use (atomically: built aside, renamed)."""
    base = Path(base or os.environ.get("ASCENDSCOPE_TWINS_DIR") or tempfile.gettempdir())
    root = base / f"ascendscope-twins-{_version()}"
    if (root / MARKER).is_file():
        return root
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="twins-", dir=base))
    try:
        build_tree(work)
        try:
            work.rename(root)
        except OSError:  # another session built it first
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return root


def build_tree(root: Path) -> None:
    from ascendscope.sample_data.generate import generate_kineto, generate_msprof, generate_run

    pt = root / "msinsight_pytorch_2025"
    for i, level in enumerate(("level0", "level1", "level2")):
        name = f"Level{level[-1]}"
        # one script profiled at each level and in each format: the same model, another collection each
        # (profiled with_stack, as the real ones: the torch ops sit in deep python_function stacks; memory sampled
        # every 0.5 ms: about as many APP samples in this short step as the real run has at 20 ms)
        generate_run(pt / "text" / level, ranks=2, steps=1, ops_per_step=OPS_PER_STEP, seed=SEED, level=name,
                     collection=1 + i, python_stack=True, memory_every_ms=0.5)
        generate_run(pt / "db" / level, ranks=2, steps=1, ops_per_step=OPS_PER_STEP, seed=SEED, level=name,
                     export="db", db_overlap_ranks=(0,) if level == "level1" else (), collection=4 + i,
                     python_stack=True, memory_every_ms=0.5)
    _st4(root / "msinsight_st_4rank_2025q4" / "level2")
    _fixtures(root / "msinsight_server_fixtures")
    generate_msprof(root / "mindinsight_msprof_2dev_2023", devices=2, iterations=10, ops_per_step=30, seed=70)
    hta = root / "hta_gpu_kineto_nonascend"
    generate_kineto(hta / "trace_filter", ranks=2, steps=2, ops_per_step=80, seed=71, style="old",
                    name="sampled_rank-{rank}.json.gz")
    generate_kineto(hta / "nccl_parser_config", ranks=1, steps=2, ops_per_step=80, seed=72, style="new",
                    name="nccl_data.json.gz")
    (root / MARKER).write_text("Generated twins of ../shared/real_samples (tests/twins.py); not real data.\n")


# ------------------------------------------------------------------------------------------------------- st4
ST4_GROUPS = {"dp_cp": [[0, 2], [1, 3]], "mp": [[0], [1], [2], [3]], "tp": [[0], [1], [2], [3]],
              "pp": [[0, 1], [2, 3]], "embd": [[0, 1], [2, 3]], "default_group": [[0, 1, 2, 3]]}


def _st4(out: Path) -> None:
    from ascendscope.sample_data import _dbexport
    from ascendscope.sample_data.generate import generate_run

    # memory sampled every 0.2 ms: enough points in a short run for the curves to be down-sampled
    generate_run(out, ranks=4, steps=1, ops_per_step=OPS_PER_STEP, seed=80, level="Level2", memory_every_ms=0.2)
    for r in range(4):
        src = out / f"rank{r}_ascend_pt"
        rank_dir = out / f"rank_{r}_ascend_pt"
        src.rename(rank_dir)
        od = rank_dir / "ASCEND_PROFILER_OUTPUT"
        _dbexport._write_analysis(str(od), "Level2")  # newer CANN writes analysis.db beside the text export
        keep = {"analysis.db", "communication.json", "communication_matrix.json", "step_trace_time.csv"}
        for f in od.iterdir():
            if f.name in ("trace_view.json", "operator_details.csv", "l2_cache.csv") or \
                    (r % 2 and f.name not in keep):
                f.unlink()
        groups = {}
        for name, sets in ST4_GROUPS.items():
            for i, members in enumerate(sets):
                if r in members:
                    groups[str(10_000_000_000_000_000_000 + 1000 * len(groups) + i)] = {
                        "group_name": name, "group_rank": members.index(r), "global_ranks": members}
        meta = json.loads((rank_dir / "profiler_metadata.json").read_text())
        meta["parallel_group_info"] = groups
        meta["distributed_args"] = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2,
                                    "data_parallel_size": 2, "context_parallel_size": 1,
                                    "expert_model_parallel_size": 1, "sequence_parallel": False, "world_size": 4,
                                    "rank": r}
        meta["ENV_VARIABLES"]["PYTORCH_NPU_ALLOC_CONF"] = "expandable_segments:True"
        (rank_dir / "profiler_metadata.json").write_text(json.dumps(meta))
        info_path = rank_dir / f"profiler_info_{r}.json"  # the newer torch_npu names its versions
        info = json.loads(info_path.read_text())
        info.update(torch_npu_version="2.7.1", cann_version="8.3.RC1")
        info_path.write_text(json.dumps(info, indent=4))


# -------------------------------------------------------------------------------------------------- fixtures
def _rewrite_csv(path: Path, columns: list[str] | None = None, rows: int | None = None, cell=None) -> None:
    """Keep ``columns`` (all when None) and the first ``rows`` rows; ``cell(column, value)`` rewrites values."""
    with path.open(newline="", encoding="utf-8") as fh:
        data = list(csv.DictReader(fh))
    header = columns or (list(data[0]) if data else [])
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(header)
    for r in data[:rows]:
        w.writerow([cell(c, r.get(c, "")) if cell else r.get(c, "") for c in header])
    path.write_text(buf.getvalue(), encoding="utf-8", newline="")


def _spreadsheet(column, value):
    """What a spreadsheet program does to an epoch-µs time when it saves a CSV: 6 significant digits."""
    if column == "Timestamp(us)" and value.strip():
        return f"{float(value.strip()):.5E}".replace("E+0", "E+").replace(".00000E", "E")
    return value


def _fixtures(out: Path) -> None:
    from ascendscope.sample_data.generate import generate_run

    work = out / "_work"
    truth = generate_run(work, ranks=2, steps=1, ops_per_step=OPS_PER_STEP, seed=90)
    group = truth["group"]
    for r in range(2):
        rank_dir = out / f"test_rank_{r}"
        (work / f"rank{r}_ascend_pt").rename(rank_dir)
        od = rank_dir / "ASCEND_PROFILER_OUTPUT"
        for name in ("trace_view.json", "op_statistic.csv", "api_statistic.csv", "l2_cache.csv"):
            (od / name).unlink(missing_ok=True)
        (rank_dir / "profiler_metadata.json").unlink()
        kernel_cols = [c for c in csv.DictReader((od / "kernel_details.csv").open()).fieldnames if c != "OP State"]
        _rewrite_csv(od / "kernel_details.csv", kernel_cols, rows=22)
        _rewrite_csv(od / "operator_details.csv", rows=3)
        steps = [c for c in csv.DictReader((od / "step_trace_time.csv").open()).fieldnames if c != "Preparing"]
        _rewrite_csv(od / "step_trace_time.csv", steps)
        if r == 0:  # 2023 layouts: no active memory, no stream
            _rewrite_csv(od / "memory_record.csv", ["Component", "Timestamp(us)", "Total Allocated(MB)",
                                                    "Total Reserved(MB)", "Device Type"], rows=11)
            _rewrite_csv(od / "operator_memory.csv", [
                "Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)", "Duration(us)",
                "Allocation Total Allocated(MB)", "Allocation Total Reserved(MB)", "Release Total Allocated(MB)",
                "Release Total Reserved(MB)", "Device Type"], rows=28)
        else:
            _rewrite_csv(od / "memory_record.csv", rows=30, cell=_spreadsheet)
            _rewrite_csv(od / "operator_memory.csv", rows=21)
            (od / "npu_module_mem.csv").unlink()
            (od / "static_op_mem.csv").write_text(
                "Device_id,Op Name,Model Name,Graph ID,Node Index Start,Node Index End,Size(KB)\r\n"
                "host,sqrt_01,0,0,31,32,2343.78125\r\n", encoding="utf-8")
        _older_communication(od, r, group)
    shutil.rmtree(work)
    _cluster_output(out / "cluster_analysis_output", out, group)
    full = out / "full_db"
    full.mkdir()
    msprof_src = out / "_msprof"
    generate_run(msprof_src, ranks=1, steps=1, ops_per_step=60, seed=91, export="db")
    db = msprof_src / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    _msprof_db(db, full / "msprof_0.db")
    shutil.rmtree(msprof_src)
    con = sqlite3.connect(full / "cluster_analysis.db")
    con.execute("CREATE TABLE ClusterStepTraceTime (step TEXT, type TEXT, \"index\" TEXT, computing NUMERIC)")
    con.executemany("INSERT INTO ClusterStepTraceTime VALUES (?, ?, ?, ?)",
                    [("2", "rank", str(r), 75000.0 + r) for r in range(9)])
    con.commit()
    con.close()
    meta = out / "metadata"
    meta.mkdir()
    info = {}
    for name, size in (("tp", 2), ("pp", 2), ("dp", 2)):
        for start in range(0, 8, size):
            info[str(12_000_000_000_000_000_000 + len(info))] = {
                "group_name": name, "group_rank": 0, "global_ranks": list(range(start, start + size))}
    (meta / "profiler_metadata.json").write_text(json.dumps({
        "distributed_args": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
                             "data_parallel_size": 2, "context_parallel_size": 1, "expert_model_parallel_size": 1,
                             "sequence_parallel": True, "rank": 0, "world_size": 8},
        "ENV_VARIABLES": {}, "parallel_group_info": info}))
    kp = out / "test_kernel_parse"
    kp.mkdir()
    kp.joinpath("op_summary_1.csv").write_text(
        "Step Id,Model ID,Task ID,Stream ID,Op Name,OP Type,Task Type,Start Time(us),Task Duration(us),"
        "Task Wait Time(us),Block Dim\r\n"
        "2,4294967295,2451,16,ZerosLike,ZerosLike,AI_CORE,1695115378713661,496.8508,0,48\r\n"
        "2,4294967295,2452,16,Add,Add,AI_VECTOR_CORE,1695115378714201.5,12.25,43.6492,40\r\n", encoding="utf-8")


def _older_communication(od: Path, rank: int, group: str) -> None:
    """communication.json with a p2p send/receive over RDMA, and the matrix in the older per-op layout."""
    comm = json.loads((od / "communication.json").read_text())
    matrix = {}
    for step, kinds in comm.items():
        first = next(v for k, v in kinds["collective"].items() if k != "Total Op Info")
        start = first["Communication Time Info"]["Start Timestamp(us)"] - 500.0
        name = "hcom_send__822_0" if rank == 0 else "hcom_receive__822_0"
        p2p_group = "13337953553061386822"
        bw = {t: {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0, "Large Packet Ratio": 0,
                  "Size Distribution": {}} for t in ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")}
        bw["RDMA"] = {"Transit Size(MB)": 20.97152, "Transit Time(ms)": 0.86381540625, "Bandwidth(GB/s)": 24.2778,
                      "Large Packet Ratio": 1.0, "Size Distribution": {"20.97152": [1, 0.86381540625]}}
        info = {"Start Timestamp(us)": start, "Elapse Time(ms)": 0.89648691015625, "Transit Time(ms)": 0.86381540625,
                "Wait Time(ms)": 0.0, "Synchronization Time(ms)": 0.0, "Idle Time(ms)": 0.032671503906250066,
                "Wait Time Ratio": 0.0, "Synchronization Time Ratio": 0.0}
        op = {"Communication Time Info": info, "Communication Bandwidth Info": bw}
        kinds["p2p"] = {f"{name}@{p2p_group}": op, "Total Op Info": op}
        links = {}
        for key, v in kinds["collective"].items():
            if key == "Total Op Info":
                continue
            peer = 1 - rank
            size = sum(b["Transit Size(MB)"] for b in v["Communication Bandwidth Info"].values()) / 2
            t = v["Communication Time Info"]["Transit Time(ms)"] or 0.001
            local = {"Transport Type": "LOCAL", "Transit Size(MB)": size / 4, "Transit Time(ms)": t / 50,
                     "Bandwidth(GB/s)": round(size / 4 / (t / 50), 4)}
            links[key] = {f"{rank}-{rank}": local,
                          f"{rank}-{peer}": {"Transport Type": "HCCS", "Transit Size(MB)": size,
                                             "Transit Time(ms)": t, "Bandwidth(GB/s)": round(size / t, 4)}}
        peer = 8 if rank == 0 else 9
        p2p_links = {f"{name}@{p2p_group}": {f"{rank}-{rank}": {
            "Transport Type": "LOCAL", "Transit Time(ms)": 0.0275528359375, "Transit Size(MB)": 20.97152,
            "Bandwidth(GB/s)": 761.1383}, f"{rank}-{peer}": {
            "Transport Type": "RDMA", "Transit Time(ms)": 0.86381540625, "Transit Size(MB)": 20.97152,
            "Bandwidth(GB/s)": 24.2778}}}
        matrix[step] = {"p2p": _with_total(p2p_links), "collective": _with_total(links)}
    (od / "communication.json").write_text(json.dumps(comm))
    (od / "communication_matrix.json").write_text(json.dumps(matrix))


def _with_total(links: dict) -> dict:
    """The older matrix's ``Total Op Info`` entry: per link, the ops' transit time and size summed."""
    total: dict = {}
    for op in links.values():
        for pair, link in op.items():
            t = total.setdefault(pair, {"Transport Type": link["Transport Type"], "Transit Time(ms)": 0.0,
                                        "Transit Size(MB)": 0.0})
            t["Transit Time(ms)"] += link["Transit Time(ms)"]
            t["Transit Size(MB)"] += link["Transit Size(MB)"]
    for t in total.values():
        t["Bandwidth(GB/s)"] = round(t["Transit Size(MB)"] / t["Transit Time(ms)"], 4) if t["Transit Time(ms)"] else 0
    return {**links, "Total Op Info": total}


def _cluster_output(out: Path, fixtures: Path, group: str) -> None:
    """msprof-analyze's cluster_analysis_output of a 16-rank job (ranks 0 and 1 from the fixtures' own files)."""
    out.mkdir(parents=True)
    rows = []
    base = {}
    for r in range(2):
        with (fixtures / f"test_rank_{r}" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").open() as fh:
            base[r] = next(csv.DictReader(fh))
    cols = ["Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage", "Bubble",
            "Communication(Not Overlapped and Exclude Receive)"]
    step = base[0]["Step"]
    for r in range(16):
        src = base[r % 2]
        rows.append([step, "rank", str(r)] + [repr(float(src[c]) * (1 + 0.01 * r)) for c in cols])
    for stage in ("(0, 1, 2, 3, 4, 5, 6, 7)", "(8, 9, 10, 11, 12, 13, 14, 15)"):
        rows.append([step, "stage", stage] + [repr(float(base[0][c])) for c in cols])
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["Step", "Type", "Index"] + cols)
    w.writerows(rows)
    (out / "cluster_step_trace_time.csv").write_text(buf.getvalue(), encoding="utf-8", newline="")
    comm0 = json.loads((fixtures / "test_rank_0" / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    world = "(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)"
    cluster_comm = {"p2p": {}, world: {}}
    cluster_matrix = {"p2p": {}, world: {}}
    for st, kinds in comm0.items():
        cluster_comm[world][st] = {}
        cluster_matrix[world][st] = {}
        for key, v in kinds["collective"].items():
            if key == "Total Op Info":
                continue
            cluster_comm[world][st][key] = {str(r): v for r in range(16)}
            size = 10.0
            cluster_matrix[world][st][key] = {f"{r}-{(r + 1) % 16}": {
                "Transport Type": "HCCS", "Transit Size(MB)": size, "Transit Time(ms)": 0.5 + 0.01 * r,
                "Bandwidth(GB/s)": round(size / (0.5 + 0.01 * r), 4)} for r in range(2)}
        cluster_comm["p2p"][st] = {k: {"0": v} for k, v in kinds["p2p"].items() if k != "Total Op Info"}
    (out / "cluster_communication.json").write_text(json.dumps(cluster_comm))
    (out / "cluster_communication_matrix.json").write_text(json.dumps(cluster_matrix))
    (out / "communication_group.json").write_text(json.dumps({
        "collective": [list(range(16)), list(range(8)), list(range(8, 16))] + [[r] for r in range(16)],
        "p2p": [list(range(8)), list(range(8, 16))]}))


def _msprof_db(src: Path, dst: Path) -> None:
    """An msprof db export (msprof_0.db): the CANN tables of a profiler db, none of torch_npu's, and a table that a
    tool renamed (as in the real fixture)."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    for table in ("PYTORCH_API", "CONNECTION_IDS", "PYTORCH_CALLCHAINS", "MEMORY_RECORD", "OP_MEMORY", "STEP_TIME",
                  "RANK_DEVICE_MAP", "COMMUNICATION_OP"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute("CREATE TABLE _COMPUTE_TASK_INFO_old_20251014 AS SELECT * FROM COMPUTE_TASK_INFO LIMIT 3")
    con.execute("CREATE TABLE DDR (deviceId INTEGER, timestampNs INTEGER, read NUMERIC, write NUMERIC)")
    con.execute("INSERT INTO DDR SELECT 0, timestampNs, 1000.0, 500.0 FROM NPU_MEM LIMIT 5")
    con.execute("CREATE TABLE MSTX_EVENTS (startNs INTEGER, endNs INTEGER, eventType INTEGER, rangeId INTEGER, "
                "category INTEGER, message INTEGER, globalTid INTEGER, endGlobalTid INTEGER, domainId INTEGER, "
                "connectionId INTEGER)")
    con.execute("INSERT INTO STRING_IDS SELECT max(id) + 1, 'twin marker' FROM STRING_IDS WHERE id < 268435456")
    con.execute("INSERT INTO MSTX_EVENTS SELECT startNs, endNs, 2, row_number() OVER (), NULL, "
                "(SELECT id FROM STRING_IDS WHERE value = 'twin marker'), globalTid, globalTid, NULL, NULL "
                "FROM CANN_API LIMIT 3")
    con.commit()
    con.execute("VACUUM")
    con.close()
