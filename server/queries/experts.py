"""MoE expert load: a layer × expert heat map (and layer × rank), the imbalance per layer and the hottest experts.

Contract: :func:`load` answers from what the run holds (``source``):

* ``dumps`` — the expert hotspot dumps (``expert_hotspot``, ingest/experts.py): tokens per (layer, rank, slot). A
  slot's expert is the deployment's (``expert_deployment`` of the same phase, when it gives every rank of the dump
  as many slots per layer), else its position ``rank × slots + slot`` (``expert_from`` says which). An expert's
  load is the sum over its copies (a hot expert may be replicated on several ranks);
* ``deployment`` — the deployment files alone: the copies of each expert per layer (where the load balancer put
  more of them);
* ``kernels`` — without dumps, the GroupedMatmul kernels of each rank (``cluster_moe_kernels``): the k-th call of
  a step is the k-th MoE layer run on that rank's PP stage; its time (and tokens: the kernel's first input
  dimension) per rank, compared among the ranks of the stage (the expert-parallel ranks that hold different
  experts of those layers).

Imbalance is max ÷ mean over the layer's experts (or the call's ranks); a cell is null where there is no data.
Bounded: at most :data:`MAX_CELLS` cells (the last layers / calls are left out beyond, ``truncated``).
"""

from __future__ import annotations

import statistics

from ascendscope.server.queries import QueryError
from ascendscope.server.queries import strategy as sq

SOURCES = ("dumps", "deployment", "kernels")
MAX_CELLS = 300_000
MAX_HOTTEST = 20
TABLES_SQL = ("SELECT DISTINCT table_name FROM information_schema.tables WHERE table_name IN "
              "('expert_hotspot', 'expert_deployment', 'cluster_moe_kernels', 'expert_files')")
HAVE_SQL = {
    "dumps": "SELECT count(*) > 0 FROM expert_hotspot",
    "deployment": "SELECT count(*) > 0 FROM expert_deployment",
    "kernels": "SELECT count(*) > 0 FROM cluster_moe_kernels WHERE family = 'grouped_matmul'",
}
TABLE_OF = {"dumps": "expert_hotspot", "deployment": "expert_deployment", "kernels": "cluster_moe_kernels"}
PHASES_SQL = "SELECT DISTINCT phase FROM {table} ORDER BY phase"
HOTSPOT_SQL = "SELECT layer, rank, slot, sum(tokens) FROM expert_hotspot WHERE phase = ? GROUP BY ALL"
DEPLOYMENT_SQL = "SELECT layer, rank, slot, min(expert) FROM expert_deployment WHERE phase = ? GROUP BY ALL"
FILES_SQL = "SELECT source, file, kind, rows, status FROM expert_files ORDER BY source, file"
KERNELS_SQL = f"""
SELECT rank, call, count(DISTINCT step) AS steps, sum(dur_ns) AS dur_ns, avg(tokens) AS tokens
FROM cluster_moe_kernels WHERE family = 'grouped_matmul' AND {sq.RANGE} GROUP BY rank, call ORDER BY rank, call
"""
KERNEL_STEPS_SQL = ("SELECT count(DISTINCT step) FROM cluster_moe_kernels WHERE family = 'grouped_matmul' AND "
                    + sq.RANGE)


def _tables(db) -> set[str]:
    return {r[0] for r in db.rows(TABLES_SQL)}


def available(db) -> list[str]:
    have = _tables(db)
    return [s for s in SOURCES if TABLE_OF[s] in have and db.rows(HAVE_SQL[s])[0][0]]


def _imbalance(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None]
    mean = statistics.fmean(vals) if vals else 0
    return round(max(vals) / mean, 4) if mean else None


def _matrix(cells: dict[tuple[int, int], float], rows: list[int], cols: list[int]) -> list[list]:
    ci = {c: j for j, c in enumerate(cols)}
    z = [[None] * len(cols) for _ in rows]
    ri = {r: i for i, r in enumerate(rows)}
    for (r, c), v in cells.items():
        if r in ri:
            z[ri[r]][ci[c]] = v
    return z


def _dumps(db, phase: str) -> dict:
    hot = db.rows(HOTSPOT_SQL, [phase])
    dep = {(l_, r, s): e for l_, r, s, e in db.rows(DEPLOYMENT_SQL, [phase])}
    slots: dict[tuple[int, int], int] = {}
    for layer, rank, slot, _ in hot:
        slots[(layer, rank)] = max(slots.get((layer, rank), 0), slot + 1)
    dep_slots: dict[tuple[int, int], int] = {}
    for layer, rank, slot in dep:
        dep_slots[(layer, rank)] = max(dep_slots.get((layer, rank), 0), slot + 1)
    matched = bool(dep) and all(dep_slots.get(k) == n for k, n in slots.items())
    width = max(slots.values(), default=0)
    by_expert: dict[tuple[int, int], int] = {}
    by_rank: dict[tuple[int, int], int] = {}
    holders: dict[tuple[int, int], set[int]] = {}
    for layer, rank, slot, tokens in hot:
        expert = dep[(layer, rank, slot)] if matched else rank * width + slot
        by_expert[(layer, expert)] = by_expert.get((layer, expert), 0) + int(tokens)
        by_rank[(layer, rank)] = by_rank.get((layer, rank), 0) + int(tokens)
        holders.setdefault((layer, expert), set()).add(rank)
    layers = sorted({k[0] for k in by_expert})
    experts = sorted({k[1] for k in by_expert})
    ranks = sorted({k[1] for k in by_rank})
    truncated = len(layers) * max(1, len(experts)) > MAX_CELLS
    if truncated:
        layers = layers[:max(1, MAX_CELLS // max(1, len(experts)))]
    z = _matrix(by_expert, layers, experts)
    totals = {layer: sum(v for v in row if v) for layer, row in zip(layers, z)}
    hottest = sorted(((v, layer, e) for (layer, e), v in by_expert.items() if layer in totals),
                     key=lambda t: (-t[0], t[1], t[2]))[:MAX_HOTTEST]
    per_layer = []
    for layer, row in zip(layers, z):
        vals = [v if v is not None else 0 for v in row]
        top = max(range(len(experts)), key=lambda j: (vals[j], -j))
        per_layer.append({"layer": layer, "tokens": totals[layer], "imbalance": _imbalance(vals),
                          "hottest_expert": experts[top], "hottest_tokens": vals[top]})
    return {
        "phase": phase, "expert_from": "deployment" if matched else "position",
        "note": None if matched or not dep else "the deployment does not give the dump's ranks as many slots: "
                                                "experts numbered by position (rank × slots + slot)",
        "layers": layers, "experts": experts, "z": z, "unit": "tokens", "per_layer": per_layer,
        "hottest": [{"layer": layer, "expert": e, "tokens": v, "share": round(v / totals[layer], 4) if totals[layer]
                     else None, "ranks": sorted(holders[(layer, e)])} for v, layer, e in hottest],
        "ranks": ranks, "rank_z": _matrix(by_rank, layers, ranks),
        "rank_imbalance": [_imbalance([by_rank.get((layer, r), 0) for r in ranks]) for layer in layers],
        "truncated": truncated,
    }


def _deployment(db, phase: str) -> dict:
    copies: dict[tuple[int, int], int] = {}
    for layer, _, _, e in db.rows(DEPLOYMENT_SQL, [phase]):
        copies[(layer, e)] = copies.get((layer, e), 0) + 1
    layers = sorted({k[0] for k in copies})
    experts = sorted({k[1] for k in copies})
    z = _matrix(copies, layers, experts)
    replicated = sorted(((v, layer, e) for (layer, e), v in copies.items() if v > 1), key=lambda t: (-t[0], t[1]))
    return {"phase": phase, "layers": layers, "experts": experts, "z": z, "unit": "copies",
            "per_layer": [{"layer": layer, "copies": sum(v for v in row if v), "imbalance": _imbalance(
                [v or 0 for v in row])} for layer, row in zip(layers, z)],
            "hottest": [{"layer": layer, "expert": e, "copies": v} for v, layer, e in replicated[:MAX_HOTTEST]],
            "truncated": False}


def _kernels(db, step_from: int | None, step_to: int | None) -> dict:
    params = sq._range(step_from, step_to)
    rows = db.dicts(KERNELS_SQL, params)
    n_steps = max(1, int(db.rows(KERNEL_STEPS_SQL, params)[0][0] or 0))
    g = sq.load(db)
    stage = {r: (g.coords[r]["pp"] if g and r in g.coords else 0) for r in {int(x["rank"]) for x in rows}}
    ep = {r: (g.coords[r]["ep"] if g and r in g.coords else None) for r in stage}
    ranks = sorted(stage)
    calls = sorted({int(x["call"]) for x in rows})
    truncated = len(calls) * max(1, len(ranks)) > MAX_CELLS
    if truncated:
        calls = calls[:max(1, MAX_CELLS // max(1, len(ranks)))]
    dur = {(int(x["call"]), int(x["rank"])): float(x["dur_ns"]) / n_steps for x in rows}
    tokens = {(int(x["call"]), int(x["rank"])): x["tokens"] for x in rows}
    per_call, hot_count = [], {}
    for call in calls:
        for s in sorted(set(stage.values())):
            members = [r for r in ranks if stage[r] == s and (call, r) in dur]
            if len(members) < 2:
                continue
            vals = [dur[(call, r)] for r in members]
            top = max(members, key=lambda r: (dur[(call, r)], -r))
            per_call.append({"stage": s, "call": call, "ranks": len(members), "imbalance": _imbalance(vals),
                             "hottest_rank": top, "hottest_ns": round(dur[(call, top)]),
                             "mean_ns": round(statistics.fmean(vals))})
            hot_count[top] = hot_count.get(top, 0) + 1
    hottest = [{"rank": r, "ep": ep[r], "stage": stage[r], "times_hottest": n}
               for r, n in sorted(hot_count.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_HOTTEST]]
    return {"layers": calls, "ranks": ranks, "rank_stage": [stage[r] for r in ranks], "rank_ep": [ep[r] for r in ranks],
            "z": [[None if (v := dur.get((c, r))) is None else round(v) for r in ranks] for c in calls],
            "tokens": [[None if (t := tokens.get((c, r))) is None else round(t) for r in ranks] for c in calls],
            "unit": "ns", "per_call": per_call, "hottest_ranks": hottest, "steps": n_steps, "truncated": truncated}


def load(db, source: str | None = None, phase: str | None = None, step_from: int | None = None,
         step_to: int | None = None) -> dict:
    """The expert load from ``source`` (default: the first the run has, in :data:`SOURCES` order)."""
    have = available(db)
    files = db.dicts(FILES_SQL) if "expert_files" in _tables(db) else []
    if source is not None and source not in SOURCES:
        raise QueryError("bad_source", f"source must be one of: {', '.join(SOURCES)}")
    if not have:
        return {"available": False, "sources": [], "files": files,
                "reason": "no expert load in this run: neither MindIE / vLLM-Ascend expert dumps "
                          "({prefill,decode}_<rank>.csv with model_gen_config.json, *_global_deployment.json) "
                          "nor GroupedMatmul kernels in kernel_details.csv"}
    source = source or have[0]
    if source not in have:
        raise QueryError("no_such_source", f"this run has no {source} expert data (it has: {', '.join(have)})")
    out = {"available": True, "source": source, "sources": have, "files": files}
    if source == "kernels":
        return out | _kernels(db, step_from, step_to)
    phases = [r[0] for r in db.rows(PHASES_SQL.format(table=TABLE_OF[source]))]
    phase = phase or phases[0]
    if phase not in phases:
        raise QueryError("no_such_phase", f"phase must be one of: {', '.join(phases)}")
    return out | {"phases": phases} | (_dumps(db, phase) if source == "dumps" else _deployment(db, phase))
