"""Which dimension is slow: a step metric's spread within and between the groups of each parallel dimension, and
the verdicts in words, for a step or a range of steps.

Contract: :func:`verdicts` reads what ``server.queries.strategy`` reads (the grid and every rank's means per step)
and answers ``spreads`` (per dimension, for the chosen metric: the *between* spread — the mean of each coordinate's
slice of ranks, e.g. each PP stage, each DP replica — and the *within* spread — the groups of ranks that differ only
in that coordinate, e.g. each TP group: their max − min over their median, the worst group and its slowest rank)
and ``verdicts``: a list of findings, each with ``kind``, ``severity``, ``text``, the ``ranks`` to open on the
timeline, and the numbers compared. The rules (docs/analysis.md, "Which dimension is slow"):

* **Work, not step time.** Synchronous ranks end their steps together (the fast ones wait), so the verdicts compare
  *computing* (the work) and read the waiting (exposed communication, wait caused) as the consequence.
* **PP stages** compare computing per microbatch (``pp_info``'s microbatches; without them per step: every stage
  runs every microbatch), each stage by the lower median of its ranks (one slow rank does not make its stage slow),
  against the lower median of the other middle stages (else the other stages). Step time and idle time differ
  between stages by design (warm-up and cool-down bubbles) and are not compared. A middle stage is flagged above
  :data:`STAGE_THRESHOLD`; the first and last stages hold the embedding and the output head and loss, and are
  flagged only above :data:`END_STAGE_ALLOWANCE` (below it, an excess is reported as expected).
* **A slow rank**: computing above its stage's median by :data:`RANK_THRESHOLD` and by 3 robust standard deviations
  (1.4826 × MAD); told through its smallest group that synchronises (TP, else CP, EP, DP): "TP group {4,5} waits on
  rank 5", with the peers' exposed communication and the wait the rank caused.
* **Slices of TP, CP, EP, DP**: each rank's computing over its stage's median (so the stages' design cancels out),
  each coordinate's slice by its lower median, flagged above :data:`SLICE_THRESHOLD` over the slices' median; else
  "DP replicas agree within x %".
"""

from __future__ import annotations

import statistics

from ascendscope.server.queries import strategy as sq

STAGE_THRESHOLD = 0.05
END_STAGE_ALLOWANCE = 0.25
RANK_THRESHOLD = 0.05
SLICE_THRESHOLD = 0.03
MAD_K, MAD_SCALE = 3.0, 1.4826
MAX_RANK_VERDICTS = 20
MAX_LINK_RANKS = 64
NAMES = {"pp": "PP stage", "tp": "TP", "cp": "CP", "ep": "EP", "dp": "DP replica"}
GROUP_NAMES = {"tp": "TP group", "cp": "CP group", "ep": "EP group", "dp": "DP group", "pp": "PP group"}
SYNC_ORDER = ("tp", "cp", "ep", "dp", "pp")


def _low_median(values: list[float]) -> float:
    return statistics.median_low(values)


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %" if abs(x) < 0.1 else f"{x * 100:.0f} %"


def _ms(ns: float | None) -> str:
    return "—" if ns is None else f"{ns / 1e6:.3f} ms"


def _ranks_text(ranks: list[int]) -> str:
    return "{" + ",".join(map(str, ranks[:8])) + (",…" if len(ranks) > 8 else "") + "}"


def _group_of(g: sq.Grid, rank: int, dim: str) -> list[int]:
    """The ranks of ``rank``'s group of ``dim`` (ep: its expert-parallel group: same tp, cp, pp, dp ÷ ep)."""
    keys = g.keys(dim)
    return [r for r in g.ranks if keys[r] == keys[rank]]


def spreads(g: sq.Grid, values: dict[int, float]) -> dict[str, dict]:
    """Per dimension: the slices' means (between) and the groups' spreads (within) of ``values``."""
    out = {}
    for dim in g.dims():
        slices: dict[int, list[float]] = {}
        groups: dict[tuple, list[int]] = {}
        keys = g.keys(dim)
        for r, v in values.items():
            slices.setdefault(g.coords[r][dim], []).append(v)
            groups.setdefault(keys[r], []).append(r)
        means = {k: statistics.fmean(v) for k, v in sorted(slices.items())}
        med = statistics.median(means.values()) if means else 0
        worst_slice = max(means, key=means.get) if means else None
        within = []
        for members in groups.values():
            vals = [values[r] for r in members]
            if len(vals) < 2:
                continue
            m = statistics.median(vals)
            within.append(((max(vals) - min(vals)) / m if m else 0.0, sorted(members),
                           max(members, key=lambda r: values[r])))
        within.sort(key=lambda w: -w[0])
        out[dim] = {
            "size": g.sizes[dim], "slices": list(means), "slice_mean_ns": [round(v) for v in means.values()],
            "between_pct": round((max(means.values()) - min(means.values())) / med * 100, 2) if med else None,
            "worst_slice": worst_slice, "groups": len(within),
            "within_median_pct": round(statistics.median(w[0] for w in within) * 100, 2) if within else None,
            "within_max_pct": round(within[0][0] * 100, 2) if within else None,
            "worst_group": within[0][1][:MAX_LINK_RANKS] if within else [],
            "worst_group_slowest": within[0][2] if within else None,
        }
    return out


def _stage_verdicts(g: sq.Grid, comp: dict[int, float]) -> tuple[list[dict], dict[int, float]]:
    """Stage verdicts and each stage's median computing."""
    pp = g.sizes["pp"]
    by_stage: dict[int, list[int]] = {}
    for r in comp:
        by_stage.setdefault(g.coords[r]["pp"], []).append(r)
    stage_median = {s: statistics.median(comp[r] for r in rs) for s, rs in by_stage.items()}
    if pp < 2 or len(by_stage) < 2:
        return [], stage_median
    mb = g.microbatches or 1
    per = "per microbatch" if g.microbatches else "per step (every stage runs every microbatch)"
    work = {s: _low_median([comp[r] for r in rs]) / mb for s, rs in by_stage.items()}
    middle = [s for s in work if 0 < s < pp - 1]
    out, flagged, spread = [], False, 0.0
    for s in sorted(work):
        end = s in (0, pp - 1)
        # the others: the other middle stages (the end ones hold more by design), else the other stages, by their
        # lower median, so one slow stage does not raise the bar for the rest
        others = ([work[o] for o in middle if o != s] or [work[o] for o in work if o != s]) or [work[s]]
        ref = _low_median(others)
        excess = work[s] / ref - 1 if ref else 0.0
        what = "embedding" if s == 0 else "output head and loss"
        numbers = {"stage": s, "work_ns": round(work[s]), "reference_ns": round(ref), "excess": round(excess, 4),
                   "per": "microbatch" if g.microbatches else "step"}
        ranks = sorted(by_stage[s])[:MAX_LINK_RANKS]
        if excess > (END_STAGE_ALLOWANCE if end else STAGE_THRESHOLD):
            flagged = True
            text = (f"PP stage {s} is {_pct(excess)} slower than the others: computing {_ms(work[s])} {per} "
                    f"against {_ms(ref)}" + (f" (more than its {what} explains)" if end else ""))
            out.append({"kind": "pp_stage", "severity": "warning", "text": text, "ranks": ranks, **numbers})
        elif end and excess > STAGE_THRESHOLD:
            out.append({"kind": "pp_stage_design", "severity": "info", "ranks": ranks, **numbers,
                        "text": f"PP stage {s} computes {_pct(excess)} more {per} than the middle stages: the "
                                f"{what} run there (expected, not flagged)"})
        if not end or not middle:
            spread = max(spread, abs(excess))
    if not flagged:
        out.append({"kind": "pp_agree", "severity": "ok", "ranks": [], "excess": round(spread, 4),
                    "text": f"PP stages agree on computing {per} within {_pct(spread)}"
                            + (" (the end stages compared with their allowance)" if middle else "")})
    return out, stage_median


def _rank_verdicts(g: sq.Grid, m: dict[int, dict], comp: dict[int, float],
                   stage_median: dict[int, float]) -> list[dict]:
    by_stage: dict[int, list[float]] = {}
    for r, v in comp.items():
        by_stage.setdefault(g.coords[r]["pp"], []).append(v)
    mads = {s: statistics.median(abs(v - stage_median[s]) for v in vs) for s, vs in by_stage.items()}
    found = []
    for r, v in comp.items():
        s = g.coords[r]["pp"]
        med = stage_median[s]
        if not med or v <= med * (1 + RANK_THRESHOLD) or v <= med + MAD_K * MAD_SCALE * mads[s]:
            continue
        found.append((v / med - 1, r))
    out = []
    for excess, r in sorted(found, reverse=True)[:MAX_RANK_VERDICTS]:
        dim = next((d for d in SYNC_ORDER if g.sizes.get(d, 1) > 1), None)
        group = _group_of(g, r, dim) if dim else [r]
        peers = [p for p in group if p != r and p in m]
        peer_wait = statistics.fmean(m[p].get("exposed_comm_ns") or 0 for p in peers) if peers else None
        own_wait = m[r].get("exposed_comm_ns")
        caused = m[r].get("wait_caused_ns")
        label = f"{GROUP_NAMES[dim]} {_ranks_text(group)}" if dim else f"rank {r}"
        text = (f"{label} waits on rank {r}: it computes {_pct(excess)} more than its stage's median "
                f"({_ms(comp[r])} against {_ms(stage_median[g.coords[r]['pp']])} per step)")
        if peer_wait is not None and own_wait is not None and peer_wait > own_wait:
            text += f"; its peers' exposed communication is {_ms(peer_wait - own_wait)} longer"
        if caused:
            text += f"; it caused {_ms(caused)} of waiting per step in collectives"
        out.append({"kind": "slow_rank", "severity": "warning", "text": text, "rank": r, "dim": dim,
                    "group": group[:MAX_LINK_RANKS], "ranks": sorted(set(group[:MAX_LINK_RANKS - 1]) | {r}),
                    "excess": round(excess, 4), "computing_ns": round(comp[r]),
                    "stage_median_ns": round(stage_median[g.coords[r]["pp"]]),
                    "wait_caused_ns": None if caused is None else round(caused)})
    return out


def _slice_verdicts(g: sq.Grid, comp: dict[int, float], stage_median: dict[int, float],
                    slow: set[int]) -> list[dict]:
    """TP, CP, EP and DP slices on computing over the stage's median; the slow ranks found above left out."""
    norm = {r: v / stage_median[g.coords[r]["pp"]] for r, v in comp.items()
            if stage_median[g.coords[r]["pp"]] and r not in slow}
    out = []
    for dim in ("tp", "cp", "ep", "dp"):
        if g.sizes.get(dim, 1) < 2:
            continue
        slices: dict[int, list[int]] = {}
        for r in norm:
            slices.setdefault(g.coords[r][dim], []).append(r)
        if len(slices) < 2:
            continue
        level = {k: _low_median([norm[r] for r in rs]) for k, rs in slices.items()}
        ref = statistics.median(level.values())
        worst = max(level, key=level.get)
        excess = level[worst] / ref - 1 if ref else 0.0
        name = NAMES[dim]
        if excess > SLICE_THRESHOLD:
            who = (f"DP replica {worst}" if dim == "dp" else f"{name} rank {worst} of every group")
            out.append({"kind": f"{dim}_slice", "severity": "warning", "dim": dim, "slice": worst,
                        "excess": round(excess, 4), "ranks": sorted(slices[worst])[:MAX_LINK_RANKS],
                        "text": f"{who} computes {_pct(excess)} more than the others (each rank against its "
                                "stage's median)" + (": uneven data across replicas?" if dim == "dp" else
                                                     ": an uneven split?")})
        else:
            spread = max(abs(v / ref - 1) for v in level.values()) if ref else 0.0
            plural = {"dp": "DP replicas", "tp": "TP ranks", "cp": "CP ranks", "ep": "EP ranks"}[dim]
            out.append({"kind": f"{dim}_agree", "severity": "ok", "dim": dim, "excess": round(spread, 4),
                        "ranks": [], "text": f"{plural} agree within {_pct(spread)} (computing)"})
    return out


def verdicts(db, metric: str = "step", step_from: int | None = None, step_to: int | None = None,
             order: str | None = None, sizes: dict | None = None) -> dict:
    """The spreads of ``metric`` per dimension and the verdicts (module note), for the steps in the range."""
    if metric not in sq.METRICS:
        raise sq.QueryError("bad_metric", f"metric must be one of: {', '.join(sq.METRICS)}")
    g = sq.load(db, order, sizes)
    if g is None:
        return sq.unavailable(sq.NO_TABLES)
    m = {r: v for r, v in sq.rank_metrics(db, step_from, step_to).items() if r in g.coords}
    col = sq.METRICS[metric]
    values = {r: v[col] for r, v in m.items() if v.get(col) is not None}
    comp = {r: v["computing_ns"] for r, v in m.items() if v.get("computing_ns") is not None}
    out = {"available": True, "metric": metric, "from_step": step_from, "to_step": step_to, "order": g.order,
           "sizes": g.sizes, "ranks_with_data": len(comp), "spreads": spreads(g, values)}
    if len(comp) < 2:
        out["verdicts"] = [{"kind": "no_data", "severity": "info", "ranks": [],
                            "text": "Fewer than two ranks have a step breakdown: nothing to compare."}]
        out["summary"] = out["verdicts"][0]["text"]
        return out
    stage, stage_median = _stage_verdicts(g, comp)
    ranks = _rank_verdicts(g, m, comp, stage_median)
    found = stage + ranks + _slice_verdicts(g, comp, stage_median, {v["rank"] for v in ranks})
    order_of = {"warning": 0, "info": 1, "ok": 2}
    found.sort(key=lambda v: (order_of[v["severity"]], -abs(v.get("excess") or 0)))
    out["verdicts"] = found
    warn = [v for v in found if v["severity"] == "warning"]
    out["summary"] = warn[0]["text"] if warn else "No dimension stands out: " + "; ".join(
        v["text"] for v in found if v["severity"] == "ok")
    return out
