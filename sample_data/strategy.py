"""N-rank runs with a known parallel strategy and a known slow part, whose grid, verdicts and expert load are known by
construction (issue #48).

``write_strategy_run(out, tp=2, pp=4, dp=2, cp=1, ep=1, steps=2, …) -> dict`` writes ``rank{r}_ascend_pt/`` for
every rank of the world (``profiler_info_{r}.json``, ``profiler_metadata.json`` as ``metadata`` says,
``ASCEND_PROFILER_OUTPUT/step_trace_time.csv`` and ``communication.json``; with ``moe_layers``, ``kernel_details.csv``
and the expert dumps of ``sample_data.strategy_moe``). No trace: the Cluster view reads these small files.

Layout: ranks are laid out in ``order`` (``tp-cp-ep-dp-pp`` by default: tp varies fastest, then cp, dp, pp — written
here as nested loops, independently of ascendscope's own reading); ep splits dp (ep = dp mod ep, as Megatron-Core's
expert layout does when ep sits right before dp). Groups are those Megatron-Core creates (``tp``, ``pp``, ``dp``,
``cp``, ``dp_cp``, ``mp``, ``exp``, ``dp_modulo_exp``, ``embd``, ``default_group``), keyed ``group_name_<n>``; the text
export names each group in communication.json by the key's ``double_hash``.

Per step every rank computes ``BASE_COMPUTING_US`` × its stage's factor (the first stage ``FIRST_STAGE_FACTOR``: the
embedding; the last ``LAST_STAGE_FACTOR``: the head and loss — by design, not slow) × (1 + ``slow_stage_extra``) on
stage ``slow_stage`` × (1 + ``slow_rank_extra``) on rank ``slow_rank``, times a wobble below ``WOBBLE`` (so DP
replicas agree within 1 %). Every rank's step lasts as long (the slowest rank's computing + ``TAIL_US``): the rest
is exposed communication and ``FREE_US`` of free time. In the slow rank's TP group (ep group when tp is 1) the slow
rank arrives ``LATE_US`` later at each collective than its peers: the wait it causes is known. Communication per
kind (size and time per op, so bandwidth) is :data:`TRAFFIC`.

``metadata``: ``all`` (every rank's file has ``distributed_args`` and ``parallel_group_info``), ``rank0`` (only rank
0 has a file), ``sizes`` (``distributed_args`` only, every rank), ``none``. The returned truth holds every rank's
coordinates, the slow parts, the expected waits and traffic, and the expert truth.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

T0_US = 1_736_408_883_000_000
STEP_US = 20_000
BASE_COMPUTING_US = 10_000
FIRST_STAGE_FACTOR, LAST_STAGE_FACTOR = 1.03, 1.06
WOBBLE = 0.004
TAIL_US = 2_000
FREE_US = 300
OVERLAPPED_US = 700
LATE_US = 250
MICROBATCHES = 8
# per op of a kind: (op name, transport, MB moved, ms of transit, ms elapsed)
TRAFFIC = {
    "tp": ("hcom_allReduce_", "HCCS", 64.0, 0.5, 0.6),
    "dp": ("hcom_allReduce_", "RDMA", 256.0, 10.0, 11.0),
    "ep": ("hcom_allToAllV_", "RDMA", 32.0, 2.0, 2.2),
    "pp": ("hcom_send_", "RDMA", 16.0, 1.0, 1.1),
}
TP_OPS_PER_STEP = 2
STEP_HEADER = ["Device_id", "Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication",
               "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
DIMS = ("tp", "cp", "dp", "pp")


def double_hash(text: str) -> int:
    """The text export's id of a group (two 32-bit polynomial hashes of its key, bases 29 and 131)."""
    hi = lo = 0
    for ch in text:
        hi = (hi * 29 + ord(ch)) % 2 ** 32
        lo = (lo * 131 + ord(ch)) % 2 ** 32
    return hi * 2 ** 32 + lo


def layout(sizes: dict[str, int], order: str) -> dict[int, dict[str, int]]:
    """rank -> {tp, cp, dp, pp, ep}: nested loops, the last name of ``order`` outermost."""
    names = [n for n in order.split("-") if n != "ep"]
    out: dict[int, dict[str, int]] = {}

    def walk(level: int, fixed: dict[str, int]) -> None:
        if level < 0:
            out[len(out)] = {**fixed, "ep": fixed["dp"] % sizes["ep"]}
            return
        for i in range(sizes[names[level]]):
            walk(level - 1, {**fixed, names[level]: i})

    walk(len(names) - 1, {})
    return out


def groups_of(grid: dict[int, dict[str, int]], sizes: dict[str, int]) -> list[tuple[str, list[int]]]:
    """Megatron-Core's groups: (name, ranks), each rank in one group of every name."""
    def by(name: str, same) -> list[tuple[str, list[int]]]:
        keyed: dict = {}
        for r in sorted(grid):
            keyed.setdefault(same(grid[r]), []).append(r)
        return [(name, ranks) for _, ranks in sorted(keyed.items())]

    ep = sizes["ep"]
    out = [("default_group", sorted(grid))]
    out += by("tp", lambda c: (c["pp"], c["dp"], c["cp"]))
    out += by("cp", lambda c: (c["pp"], c["dp"], c["tp"]))
    out += by("dp", lambda c: (c["pp"], c["cp"], c["tp"]))
    out += by("dp_cp", lambda c: (c["pp"], c["tp"]))
    out += by("mp", lambda c: (c["dp"], c["cp"]))
    out += by("pp", lambda c: (c["dp"], c["cp"], c["tp"]))
    out += by("exp", lambda c: (c["pp"], c["cp"], c["tp"], c["dp"] // ep))
    out += by("dp_modulo_exp", lambda c: (c["pp"], c["cp"], c["tp"], c["dp"] % ep))
    last = sizes["pp"] - 1
    out += [(n, [r for r in g if grid[r]["pp"] in (0, last)]) for n, g in by("embd", lambda c: (c["dp"], c["cp"],
                                                                                              c["tp"]))]
    return out


def _computing_us(rank: int, c: dict[str, int], sizes: dict[str, int], slow_stage, slow_stage_extra, slow_rank,
                  slow_rank_extra, step: int) -> float:
    factor = FIRST_STAGE_FACTOR if c["pp"] == 0 and sizes["pp"] > 1 else 1.0
    if c["pp"] == sizes["pp"] - 1 and sizes["pp"] > 1:
        factor = LAST_STAGE_FACTOR
    if slow_stage is not None and c["pp"] == slow_stage:
        factor *= 1 + slow_stage_extra
    if slow_rank is not None and rank == slow_rank:
        factor *= 1 + slow_rank_extra
    wobble = ((rank * 7919 + step * 104_729) % 1000) / 1000 * WOBBLE
    return round(BASE_COMPUTING_US * factor * (1 + wobble), 3)


def _op(start_us: float, kind: str, late_ms: float = 0.0) -> dict:
    _, transport, mb, transit_ms, elapse_ms = TRAFFIC[kind]
    wait_ms = round(elapse_ms - transit_ms + late_ms, 4)
    return {"Communication Time Info": {
                "Start Timestamp(us)": start_us, "Elapse Time(ms)": round(elapse_ms + late_ms, 4),
                "Transit Time(ms)": transit_ms, "Wait Time(ms)": wait_ms, "Synchronization Time(ms)": 0.0,
                "Idle Time(ms)": 0.0, "Wait Time Ratio": round(wait_ms / (wait_ms + transit_ms), 4),
                "Synchronization Time Ratio": 0.0},
            "Communication Bandwidth Info": {transport: {
                "Transit Size(MB)": mb, "Transit Time(ms)": transit_ms, "Bandwidth(GB/s)": round(mb / transit_ms, 4),
                "Large Packet Ratio": 1.0, "Size Distribution": {str(mb): [1, transit_ms]}}}}


def _total(ops: dict) -> dict:
    keys = ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)")
    time = {k: round(sum(o["Communication Time Info"][k] for o in ops.values()), 4) for k in keys}
    w, t = time["Wait Time(ms)"], time["Transit Time(ms)"]
    time["Wait Time Ratio"] = round(w / (w + t), 4) if w + t else 0.0
    time["Synchronization Time Ratio"] = 0.0
    bw: dict = {}
    for o in ops.values():
        for tr, v in o["Communication Bandwidth Info"].items():
            b = bw.setdefault(tr, {"Transit Time(ms)": 0.0, "Transit Size(MB)": 0.0, "Size Distribution": {}})
            b["Transit Time(ms)"] = round(b["Transit Time(ms)"] + v["Transit Time(ms)"], 4)
            b["Transit Size(MB)"] = round(b["Transit Size(MB)"] + v["Transit Size(MB)"], 4)
    return {"Communication Time Info": time, "Communication Bandwidth Info": bw}


def _communication(rank: int, c: dict, sizes: dict, gid: dict, steps: int, late_group: set[int],
                   late_rank) -> dict:
    """communication.json of one rank: per step, TP (or EP) collectives where the late rank arrives late, a DP
    gradient all-reduce, EP all-to-alls, PP sends (p2p)."""
    out = {}
    for s in range(steps):
        base = T0_US + s * STEP_US
        coll, p2p = {}, {}
        late = LATE_US if rank == late_rank else 0
        sync_kind = "tp" if sizes["tp"] > 1 else "ep" if sizes["ep"] > 1 else None
        if sync_kind == "tp":
            for k in range(TP_OPS_PER_STEP):
                name = f"hcom_allReduce__{gid['tp'][-3:]}_{s * TP_OPS_PER_STEP + k}_1@{gid['tp']}"
                late_wait = LATE_US / 1000 if rank in late_group and rank != late_rank else 0.0
                coll[name] = _op(base + 1000 + 3000 * k + late, "tp", late_wait)
        if sizes["ep"] > 1:
            for k in range(TP_OPS_PER_STEP):
                name = f"hcom_allToAllV__{gid['exp'][-3:]}_{s * TP_OPS_PER_STEP + k}_1@{gid['exp']}"
                own_late = late if sync_kind == "ep" else 0
                late_wait = (LATE_US / 1000 if sync_kind == "ep" and rank in late_group and rank != late_rank
                             else 0.0)
                coll[name] = _op(base + 2000 + 3000 * k + own_late, "ep", late_wait)
        if sizes["dp"] > 1:
            coll[f"hcom_allReduce__{gid['dp'][-3:]}_{s}_1@{gid['dp']}"] = _op(base + STEP_US - 12_000, "dp")
        if sizes["pp"] > 1:
            name = "hcom_send_" if c["pp"] < sizes["pp"] - 1 else "hcom_receive_"
            p2p[f"{name}_{gid['pp'][-3:]}_{s}_1@{gid['pp']}"] = _op(base + 500, "pp")
        step = {"p2p": p2p, "collective": coll}
        for part in (p2p, coll):
            if part:
                part["Total Op Info"] = _total(part)
        out[f"step{s + 1}"] = step
    return out


def write_strategy_run(out, *, tp: int = 2, pp: int = 4, dp: int = 2, cp: int = 1, ep: int = 1, steps: int = 2,
                       order: str = "tp-cp-ep-dp-pp", metadata: str = "all", slow_stage: int | None = None,
                       slow_stage_extra: float = 0.2, slow_rank: int | None = None, slow_rank_extra: float = 0.2,
                       moe_layers: int = 0, experts_per_rank: int = 4, hot_expert: int | None = None,
                       hot_factor: float = 3.0, dumps: bool = True) -> dict:
    sizes = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep}
    if dp % ep:
        raise ValueError("ep must divide dp")
    out = Path(out)
    grid = layout(sizes, order)
    groups = groups_of(grid, sizes)
    keys = {}  # (name, tuple(ranks)) -> key
    for n, (name, ranks) in enumerate(groups):
        keys.setdefault((name, tuple(ranks)), f"group_name_{n}")
    mine = {r: {} for r in grid}  # rank -> name -> (key, ranks)
    for (name, ranks), key in keys.items():
        for r in ranks:
            mine[r].setdefault(name, (key, list(ranks)))
    late_group: set[int] = set()
    if slow_rank is not None:
        sync = "tp" if tp > 1 else "exp" if ep > 1 else None
        late_group = set(mine[slow_rank][sync][1]) if sync else set()
    comp = {(r, s): _computing_us(r, grid[r], sizes, slow_stage, slow_stage_extra, slow_rank, slow_rank_extra, s)
            for r in grid for s in range(steps)}
    step_us = {s: max(comp[(r, s)] for r in grid) + TAIL_US for s in range(steps)}
    for r, c in grid.items():
        folder = out / f"rank{r}_ascend_pt"
        (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True, exist_ok=True)
        info = {"config": {"common_config": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"]},
                           "experimental_config": {"_profiler_level": "Level1", "_export_type": "text"}},
                "end_info": {"collectionTimeEnd": (T0_US + steps * STEP_US) * 1000}, "rank_id": r}
        (folder / f"profiler_info_{r}.json").write_text(json.dumps(info), encoding="utf-8")
        meta = _metadata(r, sizes, mine[r], metadata, len(grid))
        if meta is not None:
            (folder / "profiler_metadata.json").write_text(json.dumps(meta), encoding="utf-8")
        with open(folder / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(STEP_HEADER)
            for s in range(steps):
                exposed = round(step_us[s] - comp[(r, s)] - FREE_US, 3)
                w.writerow([r % 16, s + 1, comp[(r, s)], exposed, OVERLAPPED_US, round(exposed + OVERLAPPED_US, 3),
                            FREE_US, 0, 0, exposed, 0])
        gid = {name: str(double_hash(key)) for name, (key, _) in mine[r].items()}
        comm = _communication(r, c, sizes, gid, steps, late_group, slow_rank)
        (folder / "ASCEND_PROFILER_OUTPUT" / "communication.json").write_text(json.dumps(comm), encoding="utf-8")
    truth = {"sizes": sizes, "world": len(grid), "order": order, "steps": steps, "grid": grid,
             "groups": {key: (name, list(ranks)) for (name, ranks), key in keys.items()},
             "slow_stage": slow_stage, "slow_stage_extra": slow_stage_extra, "slow_rank": slow_rank,
             "slow_rank_extra": slow_rank_extra, "late_group": sorted(late_group),
             "wait_caused_us": LATE_US * (len(late_group) - 1) * TP_OPS_PER_STEP * steps if late_group else 0,
             "computing_us": comp, "step_us": step_us, "microbatches": MICROBATCHES}
    if moe_layers:
        from .strategy_moe import write_moe

        truth["moe"] = write_moe(out, grid, sizes, steps=steps, layers=moe_layers, per_rank=experts_per_rank,
                                 hot_expert=hot_expert, hot_factor=hot_factor, dumps=dumps, t0_us=T0_US,
                                 step_us=STEP_US)
    return truth


def _metadata(rank: int, sizes: dict, groups: dict, mode: str, world: int) -> dict | None:
    if mode == "none" or (mode == "rank0" and rank != 0):
        return None
    meta: dict = {"ENV_VARIABLES": {"HCCL_ALGO": ""}}
    meta["distributed_args"] = {"tensor_model_parallel_size": sizes["tp"], "pipeline_model_parallel_size": sizes["pp"],
                                "data_parallel_size": sizes["dp"], "context_parallel_size": sizes["cp"],
                                "expert_model_parallel_size": sizes["ep"], "sequence_parallel": False,
                                "rank": rank, "world_size": world}
    if mode != "sizes":
        meta["parallel_group_info"] = {key: {"group_name": name, "group_rank": ranks.index(rank),
                                             "global_ranks": ranks} for name, (key, ranks) in groups.items()}
        meta["pp_info"] = json.dumps({"pp_type": "1f1b", "microbatch_num": MICROBATCHES})
    return meta


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ascendscope.sample_data.strategy",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    for name, default in (("tp", 2), ("pp", 4), ("dp", 2), ("cp", 1), ("ep", 1), ("steps", 2), ("moe-layers", 0)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--slow-stage", type=int)
    ap.add_argument("--slow-rank", type=int)
    ap.add_argument("--hot-expert", type=int)
    ap.add_argument("--metadata", default="all", choices=["all", "rank0", "sizes", "none"])
    a = ap.parse_args(argv)
    truth = write_strategy_run(a.out, tp=a.tp, pp=a.pp, dp=a.dp, cp=a.cp, ep=a.ep, steps=a.steps,
                               slow_stage=a.slow_stage, slow_rank=a.slow_rank, moe_layers=a.moe_layers,
                               hot_expert=a.hot_expert, metadata=a.metadata)
    print(json.dumps({"world": truth["world"], "out": os.fspath(a.out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
