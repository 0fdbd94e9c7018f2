"""The MoE part of ``sample_data.strategy`` runs: GroupedMatmul kernels per rank and MindIE-style expert dumps, with
a known hot expert.

``write_moe(out, grid, sizes, steps, layers, per_rank, hot_expert, hot_factor, dumps, t0_us, step_us) -> dict``:

* kernels: every rank holds ``per_rank`` experts of its EP group (expert ids ``ep × per_rank + j``, ``ep`` its
  expert-parallel coordinate). Each MoE layer of each step runs on it a ``MoeDistributeDispatch``, one
  ``GroupedMatmul`` over the tokens routed to its experts (the kernel's first input is ``[tokens, hidden]``) and a
  ``MoeDistributeCombine``, written to ``kernel_details.csv``. An expert gets :func:`expert_tokens` tokens; the
  ``hot_expert`` ``hot_factor`` times as many, so the ranks holding it run the longest GroupedMatmul;
* dumps (``dumps=True``), in ``expert_dumps/``: ``model_gen_config.json``, ``decode_{device}.csv`` for each of the
  ``ep`` devices (headerless, a row per MoE layer, a column per slot; two collections, the last one the truth) and
  ``decode_global_deployment.json``. A device has ``per_rank + 1`` slots: its experts (rotated by the layer:
  slot j of device d holds expert ``(d·per_rank + j + layer) mod E``) and one replica of the layer's hot expert
  (``(hot_expert + layer) mod E``), whose tokens are split evenly over its copies.

The truth: the tokens per (layer, expert), the hottest expert and the imbalance (max ÷ mean) per layer of the
dumps, and per rank the GroupedMatmul tokens and time per step.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

HIDDEN, FFN = 4096, 1408
KERNEL_HEADER = ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)",
                 "Block Dim", "Input Shapes"]
GMM_NAME = "aclnnGroupedMatmulV4_GroupedMatmul_GroupedMatmul"
LAYER_US = 800
DISPATCH_US, COMBINE_US = 40.0, 30.0


def expert_tokens(expert: int, layer: int) -> int:
    return 400 + 37 * ((expert * 3 + layer) % 7)


def gmm_us(tokens: int) -> float:
    return round(5 + tokens * 0.01, 3)


def _ts(us: int) -> str:
    return f"{us}.000\t"


def _kernels(out: Path, grid: dict, steps: int, layers: int, per_rank: int, hot: int | None, hot_factor: float,
             t0_us: int, step_us: int) -> dict:
    per: dict = {}
    for r, c in grid.items():
        mine = [c["ep"] * per_rank + j for j in range(per_rank)]
        rows = []
        for s in range(steps):
            for layer in range(layers):
                tokens = sum(int(expert_tokens(e, 0) * (hot_factor if e == hot else 1)) for e in mine)
                start = t0_us + s * step_us + 4000 + layer * LAYER_US
                shapes = f"{tokens},{HIDDEN};{per_rank},{HIDDEN},{FFN};{per_rank}"
                rows.append([s + 1, "aclnnMoeDistributeDispatch_MoeDistributeDispatch", "MoeDistributeDispatch",
                             "AI_VECTOR_CORE", _ts(start), DISPATCH_US, 0, 24, f"{tokens},{HIDDEN}"])
                rows.append([s + 1, GMM_NAME, "GroupedMatmul", "AI_CORE", _ts(start + 100), gmm_us(tokens), 0, 24,
                             shapes])
                rows.append([s + 1, "aclnnMoeDistributeCombine_MoeDistributeCombine", "MoeDistributeCombine",
                             "AI_VECTOR_CORE", _ts(start + 600), COMBINE_US, 0, 24, f"{tokens},{HIDDEN}"])
                per[(r, s + 1, layer)] = (tokens, gmm_us(tokens))
        path = out / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(KERNEL_HEADER)
            w.writerows(rows)
    holders = sorted(r for r, c in grid.items() if hot is not None and hot // per_rank == c["ep"])
    return {"per_rank_call": per, "hot_holders": holders}


def _dumps(out: Path, devices: int, layers: int, per_rank: int, hot: int | None, hot_factor: float) -> dict:
    experts = devices * per_rank
    folder = out / "expert_dumps"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_gen_config.json").write_text(json.dumps(
        {"num_moe_layers": layers, "collection_Interval": 8, "num_of_experts": experts,
         "num_of_selected_experts": 2, "num_dangling_shared_experts": 0}, indent=4), encoding="utf-8")
    placement: dict[int, list[list[int]]] = {}  # layer -> device -> slots' experts
    tokens: dict[tuple[int, int], int] = {}
    for layer in range(layers):
        hot_l = (hot + layer) % experts if hot is not None else None
        placement[layer] = [[(d * per_rank + j + layer) % experts for j in range(per_rank)]
                            + [hot_l if hot_l is not None else (d + layer) % experts] for d in range(devices)]
        for e in range(experts):
            tokens[(layer, e)] = int(expert_tokens(e, layer) * (hot_factor if e == hot_l else 1))
    copies: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for layer, devs in placement.items():
        for d, slots in enumerate(devs):
            for j, e in enumerate(slots):
                copies.setdefault((layer, e), []).append((d, j))
    visits: dict[tuple[int, int, int], int] = {}  # (device, layer, slot)
    for (layer, e), where in copies.items():
        share, rest = divmod(tokens[(layer, e)], len(where))
        for k, (d, j) in enumerate(where):
            visits[(d, layer, j)] = share + (1 if k < rest else 0)
    for d in range(devices):
        with open(folder / f"decode_{d}.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            for layer in range(layers):  # an earlier collection: not the latest
                w.writerow([visits[(d, layer, j)] // 2 for j in range(per_rank + 1)])
            for layer in range(layers):
                w.writerow([visits[(d, layer, j)] for j in range(per_rank + 1)])
    deployment = {"moe_layer_count": layers, "layer_list": [
        {"layer_id": layer, "device_count": devices,
         "device_list": [{"device_id": d, "device_expert": placement[layer][d]} for d in range(devices)]}
        for layer in range(layers)]}
    (folder / "decode_global_deployment.json").write_text(json.dumps(deployment, indent=4), encoding="utf-8")
    hottest, imbalance = {}, {}
    for layer in range(layers):
        row = [tokens[(layer, e)] for e in range(experts)]
        hottest[layer] = max(range(experts), key=lambda e: (row[e], -e))
        imbalance[layer] = max(row) / (sum(row) / experts)
    return {"experts": experts, "devices": devices, "tokens": tokens, "hottest": hottest, "imbalance": imbalance,
            "visits": visits, "placement": placement}


def write_moe(out: Path, grid: dict, sizes: dict, *, steps: int, layers: int, per_rank: int, hot_expert: int | None,
              hot_factor: float, dumps: bool, t0_us: int, step_us: int) -> dict:
    """The kernels and dumps (module note) of a run laid out as ``grid``, whose steps start at ``t0_us`` every
    ``step_us``."""
    truth = {"layers": layers, "per_rank": per_rank, "hot_expert": hot_expert, "hot_factor": hot_factor,
             "kernels": _kernels(Path(out), grid, steps, layers, per_rank, hot_expert, hot_factor, t0_us, step_us)}
    if dumps:
        truth["dumps"] = _dumps(Path(out), sizes["ep"], layers, per_rank, hot_expert, hot_factor)
    return truth
