"""Generator of realistic synthetic torch_npu profiling runs (Ascend PyTorch Profiler: Level0/1/2, text or db export).

Contract
--------
``generate_run(out_dir, *, ranks=2, steps=3, ops_per_step=200, seed=0, overlap_lane=True, cann_lane=True,
streams=2, hccl=True, trace_format="array", level="Level1", export="text", db_overlap_ranks=(), collection=0,
memory_every_ms=20.0, python_stack=False) -> dict`` writes (the APP memory rows and npu_module_mem samples every
``memory_every_ms``; with ``python_stack`` the main thread's ops sit inside with_stack's ``python_function`` frames,
the spawn chain around each step and each op's call stack around it, as in the real samples),
for every rank ``r`` (at Level1, as a text export)::

    out_dir/rank{r}_ascend_pt/
        profiler_info_{r}.json          (indent=4, Level1 config, start_info/end_info, rank_id)
        profiler_metadata.json          (ENV_VARIABLES + parallel_group_info with one default group of all ranks)
        ASCEND_PROFILER_OUTPUT/
            trace_view.json | trace_view.json.gz
            kernel_details.csv  operator_details.csv  op_statistic.csv  api_statistic.csv (needs cann_lane)
            step_trace_time.csv (needs overlap_lane)  memory_record.csv  operator_memory.csv  npu_module_mem.csv
            l2_cache.csv  communication.json  communication_matrix.json (both need hccl)

``level`` Level0 or Level2 rewrites each rank as torch_npu writes that level (``_level.py``: the Level0 trace
pruning, kernel_details' Level0 columns, no op/api statistics or communication files). ``export="db"`` writes the
db export of the same run instead (``_dbexport.py``: ``ascend_pytorch_profiler_{r}.db`` + ``analysis.db`` beside
profiler_info, with an ``OVERLAP_ANALYSIS`` table in the ranks of ``db_overlap_ranks``). The other formats of the
same simulation: :func:`generate_msprof` (CANN msprof ``PROF_*`` folders), :func:`generate_mindspore` (MindSpore's
profiler output, 2.3+ ``*_ascend_ms`` or 2.0-2.2 ``profiler``) and :func:`generate_kineto` (PyTorch Kineto / Chrome
traces of a GPU run).

``generate_run`` returns ground truth: ``{"params", "ranks": [per-rank dict], "total_bytes"}`` (counted before the
level or export is applied). A per-rank dict holds
``x_events`` / ``c_events`` / ``m_events`` / ``total_events`` / ``cpu_op_events`` counts of the trace, ``min_x_ts_ns``
and ``max_x_end_ns`` (integer epoch ns), ``flows`` (``{cat: {"s": n, "f": n}}`` for async_task_queue, async_npu,
HostToDevice, fwdbwd; each s has one f except HostToDevice, where a launch with two kernels has two f),
``steps`` (id, device start, end and host start in ns, as torch_npu's step range), ``hccl_ops``, ``csv_rows``
(data rows per CSV, header excluded, multi-line cells count once) and ``files`` (bytes per file, relative path).

The output is deterministic for a given set of arguments. The model structure (op sequence, kernels, collective op
names) comes from ``random.Random(f"{seed}-structure")`` and is the same for every rank and step; timings come from
one ``random.Random(f"{seed}-timing-{rank}")`` per rank (``collection`` n > 0 adds ``-{n}``: another collection of
the same model, as profiling one script twice gives; what is the script's own, which ops allocate and how much and
each kernel's duration before a 2 % jitter, then comes from ``random.Random(f"{seed}-script-{rank}")``, so numbered
collections agree on it as the real text and db exports of one job do). The trace is streamed to disk in chunks:
memory use does not grow with the number of steps or ops.

Trace content follows FORMATS.md (sections 1-6) and the 2025 Level1 sample:

* Events are ``ph`` X / C / M / s / f, ``ts`` is an epoch-us string with exactly 3 decimals built from integer ns,
  ``dur`` is ns/1000 as a JSON number. Order is torch_npu's, not sorted: cpu_op slices (in end-time order), Enqueue+s
  pairs, Dequeue+f pairs, Python metadata, fwdbwd pairs, then ``,`` and the CANN part: metadata of the CANN lanes,
  timeline events (sorted by ts within chunks), async_npu s/f pairs.
* Python process (pid 3000000+rank): main thread (ProfilerStep#N from N=10, nested torch ops, Enqueue), autograd
  thread (backward nodes, fwdbwd flow targets, collective launches) and the task-queue thread (Dequeue@<op>).
* CANN process (``(pid << 10) | (7 << 5) | device``): AscendCL@ slices enclosing Runtime@ slices inside every Dequeue;
  the HostToDevice ``s`` sits at the Runtime@ start, its id is that slice's connection_id (a string).
* Ascend Hardware (sort index 13): tid = stream id. Compute streams 2..1+streams, HCCL stream 2+streams.
* HCCL (sort 15): ``Group <id> Communication`` (tid 0, op slices ``hcom_allReduce__<tag>_<n>_1``) and Plane 0..3.
* Overlap Analysis (sort 23), exactly FORMATS.md 6.1: compute = union of hardware tasks with Task Type in AI_CORE,
  AI_VECTOR_CORE, MIX_AIC, MIX_AIV, AI_CPU; communication = union of the HCCL op slices; not overlapped =
  communication - compute; free = [first busy start, last busy end] - (compute U communication), as in the real
  samples (the bounds are those of compute U communication, not of place-holder tasks).
* Counters: AI Core Freq ``{"MHz"}`` and NPU MEM ``APP/HBM`` ``{"KB"}`` every 100 us; the very last AI Core Freq
  sample has an integer ts string without decimals (a quirk seen in real data).

CSV consistency rules: kernel_details rows = the Ascend Hardware tasks except EVENT_WAIT_SQE and PCIE_DMA_SQE (memcpy),
plus one ``HCCL`` row per collective op (op slice start/duration), same start and duration as the trace, with
``Step Id`` = the step whose device range contains the start. op_statistic aggregates the non-HCCL kernel_details
rows by (Type, Accelerator Core). step_trace_time is computed from the Overlap lane like torch_npu (each lane event
goes to the step whose [device start, end) holds its start, whole duration added). operator_details has one row per
torch op (ProfilerStep excluded, pre-order per tree); device durations sum the tasks linked by async_npu flows
(``With AICore`` = Task Type AI_CORE only). memory_record has APP rows first, then PTA/GE rows each followed by a
PTA+GE row, increasing in time.
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

from . import _catalog, _dbexport, _kineto, _level, _mindspore, _msprof
from ._sim import RankSim

T0_NS = 1_736_408_883_600_000_000
ENV_VARIABLES = {k: "" for k in ("ASCEND_GLOBAL_LOG_LEVEL", "HCCL_RDMA_TC", "HCCL_RDMA_SL", "ACLNN_CACHE_LIMIT",
                                 "HOST_CACHE_CAPACITY", "ASCEND_ENHANCE_ENABLE", "PYTORCH_NPU_ALLOC_CONF",
                                 "ASCEND_LAUNCH_BLOCKING")}
TRACE_FORMATS = ("array", "object", "gz")
EXPORTS = ("text", "db")


def generate_run(out_dir, *, ranks=2, steps=3, ops_per_step=200, seed=0, overlap_lane=True,
                 cann_lane=True, streams=2, hccl=True, trace_format="array", level="Level1", export="text",
                 db_overlap_ranks=(), collection=0, memory_every_ms=20.0, python_stack=False) -> dict:
    if trace_format not in TRACE_FORMATS:
        raise ValueError(f"trace_format must be one of {TRACE_FORMATS}")
    if level not in _level.LEVELS or export not in EXPORTS:
        raise ValueError(f"level must be one of {_level.LEVELS} and export one of {EXPORTS}")
    if (level != "Level1" or export != "text") and trace_format != "array":
        raise ValueError("another level or the db export needs trace_format='array'")
    if ranks < 1 or steps < 1 or ops_per_step < 1 or streams < 1:
        raise ValueError("ranks, steps, ops_per_step and streams must be >= 1")
    params = {"ranks": ranks, "steps": steps, "ops_per_step": ops_per_step, "seed": seed,
              "overlap_lane": overlap_lane, "cann_lane": cann_lane, "streams": streams, "hccl": hccl,
              "trace_format": trace_format}
    srng = random.Random(f"{seed}-structure")
    plan = _catalog.build_plan(srng, ops_per_step, hccl)
    group = str(10_000_000_000_000_000_000 + srng.getrandbits(63))
    cfg = dict(params, t0=T0_NS + (seed % 1000) * 3_600_000_000_000 + collection * 600_000_000_000,
               collection=collection, memory_every_ms=memory_every_ms, python_stack=python_stack)
    os.makedirs(out_dir, exist_ok=True)
    result = {"params": params, "group": group, "ranks": [], "total_bytes": 0}
    for r in range(ranks):
        rank_dir = os.path.join(out_dir, f"rank{r}_ascend_pt")
        os.makedirs(rank_dir, exist_ok=True)
        sim = RankSim(r, cfg, plan, rank_dir, group)
        for i in range(steps):
            sim.step(i)
        truth = sim.finish()
        _write_info(rank_dir, r, ranks, group, truth)
        files = {}
        for base, _, names in os.walk(rank_dir):
            for name in names:
                path = os.path.join(base, name)
                files[os.path.relpath(path, rank_dir).replace(os.sep, "/")] = os.path.getsize(path)
        truth["files"] = dict(sorted(files.items()))
        truth["bytes"] = sum(files.values())
        result["total_bytes"] += truth["bytes"]
        result["ranks"].append(truth)
        if export == "db":
            _dbexport.write_db_export(rank_dir, r, level, group, truth["steps"], overlap_table=r in db_overlap_ranks)
        else:
            _level.to_level(rank_dir, level)
    return result


def generate_msprof(out_dir, *, devices=2, iterations=10, ops_per_step=40, seed=0) -> dict:
    """CANN msprof output of a run of ``devices`` ranks and ``iterations`` steps, in the older per-iteration
    layout (``_msprof.py``): one ``PROF_*/device_<d>`` folder per device; model ids 2 and 0 alternate, as in
    MindSpore runs. Returns the ground truth of the run it was made from, with ``msprof_iterations``: device ->
    iteration -> (start, end) ns as written (msprof's Iteration Time of it is end − start)."""
    tmp = tempfile.mkdtemp(prefix="gen_msprof_")
    try:
        truth = generate_run(tmp, ranks=devices, steps=iterations, ops_per_step=ops_per_step, seed=seed)
        os.makedirs(out_dir, exist_ok=True)
        truth["msprof_iterations"] = {}
        for r in range(devices):
            stamp = 20230818142704322 + 245 * r
            tag = "".join(chr(65 + (seed * 7 + r * 3 + i * 5) % 26) for i in range(16))
            truth["msprof_iterations"][r] = _msprof.write_msprof(
                os.path.join(tmp, f"rank{r}_ascend_pt"), out_dir, device=r, model=2 if r % 2 == 0 else 0,
                prof_name=f"PROF_000001_{stamp}_{tag}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return truth


def generate_mindspore(out_dir, *, ranks=2, steps=2, ops_per_step=40, seed=0, layout="ascend_ms", mode="pynative",
                       level="Level1", export="text", exported=True) -> list[str]:
    """MindSpore profiler output of a generated run (``_mindspore.py``): ``layout`` "ascend_ms" (2.3+, one
    ``*_ascend_ms`` folder per rank, ``mode`` "pynative" with steps or "graph" without, at ``level``, as a text
    or a db ``export``) or "profiler" (2.0-2.2, one ``profiler`` folder with MindSpore's summaries and a ``PROF_*``
    folder per rank, msprof-``exported`` or raw only). Returns the folders written (one per rank, or the
    ``profiler`` folder)."""
    if layout not in ("ascend_ms", "profiler") or export not in EXPORTS:
        raise ValueError(f"layout must be ascend_ms or profiler and export one of {EXPORTS}")
    tmp = tempfile.mkdtemp(prefix="gen_mindspore_")
    try:
        generate_run(tmp, ranks=ranks, steps=steps, ops_per_step=ops_per_step, seed=seed,
                     level=level if layout == "ascend_ms" else "Level1",
                     export=export if layout == "ascend_ms" else "text")
        os.makedirs(out_dir, exist_ok=True)
        if layout == "profiler":
            root = os.path.join(out_dir, "profiler")
            for r in range(ranks):
                _mindspore.to_profiler_dir(os.path.join(tmp, f"rank{r}_ascend_pt"), root, rank=r, device=r,
                                           prof_name=f"PROF_000001_2023091114{r:02d}0321_ABCDEFGHIJKLMN{r:02d}",
                                           exported=exported)
            return [root]
        return [_mindspore.to_ascend_ms(os.path.join(tmp, f"rank{r}_ascend_pt"), out_dir, rank=r, mode=mode,
                                        level=level) for r in range(ranks)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def generate_kineto(out_dir, *, ranks=2, steps=2, ops_per_step=100, seed=0, style="old",
                    name="rank{rank}.pt.trace.json.gz") -> list[str]:
    """PyTorch Kineto traces of the GPU twin of a generated run (``_kineto.py``), one file per rank named by
    ``name``; ``style`` "old" (integer µs) or "new" (``baseTimeNanoseconds``). Returns the paths written."""
    tmp = tempfile.mkdtemp(prefix="gen_kineto_")
    paths = []
    try:
        generate_run(tmp, ranks=ranks, steps=steps, ops_per_step=ops_per_step, seed=seed)
        os.makedirs(out_dir, exist_ok=True)
        for r in range(ranks):
            path = os.path.join(out_dir, name.format(rank=r))
            _kineto.write_kineto(os.path.join(tmp, f"rank{r}_ascend_pt", "ASCEND_PROFILER_OUTPUT",
                                              "trace_view.json"), path, r, ranks, style)
            paths.append(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return paths


def _write_info(rank_dir, rank, ranks, group, truth):
    end_ns = truth["max_x_end_ns"] + 180_000_000
    mono_end = 172_164_265_133_640 + rank * 1_000_000
    info = {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "schedule": {"wait": 0, "active": len(truth["steps"]), "warmup": 1, "repeat": 1, "skip_first": 8},
                "record_shapes": True, "profile_memory": True, "with_stack": True,
                "with_flops": False, "with_modules": False},
            "experimental_config": {
                "_profiler_level": "Level1", "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION", "_l2_cache": True,
                "_msprof_tx": False, "_data_simplification": True, "record_op_args": False,
                "_export_type": "text", "_op_attr": False, "_gc_detect_threshold": None}},
        "start_info": {"syscnt_enable": True, "freq": 100,
                       "start_cnt": 17_238_197_612_056 + rank * 1000,
                       "start_monotonic": mono_end - (end_ns - truth["min_x_ts_ns"]) - 120_000_000},
        "end_info": {"collectionTimeEnd": end_ns, "MonotonicTimeEnd": mono_end},
        "rank_id": rank,
    }
    with open(os.path.join(rank_dir, f"profiler_info_{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=4)
    meta = {"ENV_VARIABLES": ENV_VARIABLES,
            "parallel_group_info": {group: {"group_name": "default_group", "group_rank": rank,
                                            "global_ranks": list(range(ranks))}}}
    with open(os.path.join(rank_dir, "profiler_metadata.json"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh)


def ops_for_target_mb(target_mb, *, steps=3, seed=0, **kw):
    """ops_per_step that makes one rank's trace about ``target_mb`` MB (1 MB = 2**20 bytes), from two small
    calibration runs (the trace size is close to linear in ops_per_step)."""
    kw = {k: v for k, v in kw.items() if k in ("overlap_lane", "cann_lane", "streams", "hccl")}
    sizes = []
    probe = (400, 1600)
    tmp = tempfile.mkdtemp(prefix="gen_calib_")
    try:
        for i, ops in enumerate(probe):
            res = generate_run(os.path.join(tmp, str(i)), ranks=1, steps=1, ops_per_step=ops, seed=seed, **kw)
            r0 = res["ranks"][0]
            sizes.append(r0["files"]["ASCEND_PROFILER_OUTPUT/" + r0["trace_file"]])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    slope = (sizes[1] - sizes[0]) / (probe[1] - probe[0])
    fixed = sizes[0] - slope * probe[0]
    per_step = target_mb * 1048576 / steps - fixed
    return max(1, int(per_step / slope))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ascendscope.sample_data.generate",
                                 description="Generate a synthetic multi-rank torch_npu profiling run.")
    ap.add_argument("out", help="output directory (rank{r}_ascend_pt folders are created inside)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ops-per-step", type=int, default=200, help="approximate torch-op slices per step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--streams", type=int, default=2, help="compute streams per device")
    ap.add_argument("--no-overlap", action="store_true", help="omit the Overlap Analysis lane")
    ap.add_argument("--no-cann", action="store_true", help="omit the CANN lane (and HostToDevice flows)")
    ap.add_argument("--no-hccl", action="store_true", help="no collectives (no HCCL lane, no communication*.json)")
    ap.add_argument("--format", choices=TRACE_FORMATS, default="array", dest="trace_format")
    ap.add_argument("--level", choices=_level.LEVELS, default="Level1", help="profiler level of the output")
    ap.add_argument("--export", choices=EXPORTS, default="text", help="text export (CSV/JSON) or db export (SQLite)")
    ap.add_argument("--target-mb", type=float, default=None,
                    help="choose ops-per-step so that each rank's trace is about this many MB")
    a = ap.parse_args(argv)
    kw = dict(overlap_lane=not a.no_overlap, cann_lane=not a.no_cann, streams=a.streams, hccl=not a.no_hccl)
    ops = a.ops_per_step
    if a.target_mb:
        ops = ops_for_target_mb(a.target_mb, steps=a.steps, seed=a.seed, **kw)
    t0, c0 = time.perf_counter(), time.process_time()
    res = generate_run(a.out, ranks=a.ranks, steps=a.steps, ops_per_step=ops, seed=a.seed,
                       trace_format=a.trace_format, level=a.level, export=a.export, **kw)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    events = sum(r["total_events"] for r in res["ranks"])
    mb = res["total_bytes"] / 1048576
    res["timing"] = {"seconds": round(secs, 3), "cpu_seconds": round(cpu, 3),
                     "events_per_s": round(events / secs), "events_per_cpu_s": round(events / max(cpu, 1e-9)),
                     "mb_per_s": round(mb / secs, 2), "mb_per_cpu_s": round(mb / max(cpu, 1e-9), 2)}
    json.dump(res, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
