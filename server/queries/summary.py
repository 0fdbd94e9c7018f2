"""Summary view: the per-rank, per-step time breakdown, findings, top operators and run metadata.

The breakdown and its SQL live in :mod:`ascendscope.ingest.breakdown` (ingest builds ``cluster_steps`` from the same
definition): step_trace where a rank has it, else derived from the Overlap Analysis slices as torch_npu does.

A rank's ``profiler_info`` / ``profiler_metadata`` are the profiler's JSON files as ingest stored them: text nested
deeper than :data:`MAX_JSON_DEPTH` is not parsed (it would exhaust the parser's recursion, or the response
encoder's) and the rank's ``extra_metadata`` says it was unreadable.
"""

from __future__ import annotations

import json

from ascendscope.ingest import jsonfile
from ascendscope.ingest.breakdown import CATEGORIES, breakdown, derived_rows, step_trace_rows  # noqa: F401
from ascendscope.server.queries import ns_str, ratio, sources

FREE_FINDING_RATIO = 0.10
EXPOSED_COMM_FINDING_RATIO = 0.20
SLOW_RANK_FINDING_RATIO = 0.05
TOP_OPERATORS = 10
MAX_BREAKDOWN_ROWS = 20_000  # ranks × steps; the findings are computed over all of them
MAX_JSON_DEPTH = 64  # real profiler metadata nests a few levels; the response encoder stops at 255

RANKS_SQL = """
SELECT rank, device_id, folder, rank_source, profiler_level, torch_npu_version, cann_version, has_trace,
       overlap_source, start_ns, end_ns, profiler_info, profiler_metadata
FROM ranks ORDER BY rank
"""
META_SQL = "SELECT key, value FROM meta"
FILES_SQL = "SELECT count(*), sum(size_bytes), count(*) FILTER (WHERE status <> 'loaded') FROM files"
TOP_OPERATORS_SQL = """
SELECT coalesce(type, 'N/A') AS type, coalesce(accelerator_core, 'N/A') AS accelerator_core, count(*) AS count,
       sum(duration_ns) AS total_ns, sum(duration_ns) / sum(sum(duration_ns)) OVER () AS share
FROM kernels WHERE rank = ? GROUP BY ALL ORDER BY total_ns DESC NULLS LAST LIMIT ?
"""
CORE_SPLIT_SQL = """
SELECT rank, coalesce(accelerator_core, 'N/A') AS accelerator_core, sum(duration_ns) AS total_ns, count(*) AS count
FROM kernels GROUP BY ALL ORDER BY rank, total_ns DESC
"""


def _ms(ns) -> str:
    return f"{(ns or 0) / 1e6:,.2f} ms"


def _pct(x) -> str:
    return f"{100 * (x or 0):.1f}%"


def _where(rank: int, step) -> str:
    return f"Rank {rank}" + ("" if step is None else f", step {step}")


def _ranks_text(rs: list[dict], key: str, total: int) -> str:
    if len(rs) == 1 and total == 1:
        return _where(rs[0]["rank"], rs[0]["step"])
    lo, hi = min(r[key] for r in rs), max(r[key] for r in rs)
    span = _pct(lo) if abs(hi - lo) < 5e-4 else f"{_pct(lo)}–{_pct(hi)}"
    ranks = ", ".join(str(r["rank"]) for r in sorted(rs, key=lambda r: r["rank"]))
    return f"{len(rs)} of {total} ranks ({ranks}; {span})"


def findings(rows: list[dict]) -> list[dict]:
    """Plain-words observations per step: host-bound ranks, exposed communication, the slowest rank. A row
    missing a part of its step time (``incomplete``) says nothing: its ratios would be wrong."""
    out = []
    by_step: dict = {}
    for r in rows:
        if not r.get("incomplete"):
            by_step.setdefault(r["step"], []).append(r)
    for step, rs in by_step.items():
        label = "" if step is None else f"Step {step}: "
        free = [r for r in rs if (r["free_ratio"] or 0) > FREE_FINDING_RATIO]
        if free:
            worst = max(free, key=lambda r: r["free_ratio"])
            who = _ranks_text(free, "free_ratio", len(rs))
            out.append({"kind": "host_bound", "severity": "warning", "step": step,
                        "ranks": [r["rank"] for r in free], "value": worst["free_ratio"],
                        "text": f"{label}Free is over 10% of the step on {who}; at most {_ms(worst['free_ns'])} on "
                                f"rank {worst['rank']}. Host-bound: the NPU waits for dispatch. Look at the host "
                                "side (operator dispatch, task queue, CPU binding)."
                        if len(rs) > 1 else
                        f"{_where(worst['rank'], step)}: Free is {_pct(worst['free_ratio'])} of the step "
                        f"({_ms(worst['free_ns'])}), over 10%. Host-bound: the NPU waits for dispatch. Look at the "
                        "host side (operator dispatch, task queue, CPU binding)."})
        comm = [r for r in rs if (r["communication_ratio"] or 0) > EXPOSED_COMM_FINDING_RATIO]
        if comm:
            worst = max(comm, key=lambda r: r["communication_ratio"])
            who = _ranks_text(comm, "communication_ratio", len(rs))
            head = (f"{label}Communication not hidden behind computation takes over 20% of the step on {who}; "
                    f"at most {_ms(worst['communication_not_overlapped_ns'])} on rank {worst['rank']}."
                    if len(rs) > 1 else
                    f"{_where(worst['rank'], step)}: {_pct(worst['communication_ratio'])} of the step "
                    f"({_ms(worst['communication_not_overlapped_ns'])}) is communication not hidden behind "
                    "computation.")
            out.append({"kind": "exposed_communication", "severity": "warning", "step": step,
                        "ranks": [r["rank"] for r in comm], "value": worst["communication_ratio"],
                        "text": head + " Overlap it with compute, or look for slow ranks and links in the "
                                       "Communication view."})
        if len(rs) < 2:
            continue
        slow = max(rs, key=lambda r: r["e2e_ns"])
        fast = min(rs, key=lambda r: r["e2e_ns"])
        gap = slow["e2e_ns"] - fast["e2e_ns"]
        rel = ratio(gap, fast["e2e_ns"]) or 0
        spread = {k: max(x[k] or 0 for x in rs) - min(x[k] or 0 for x in rs)
                  for k in ("computing_ns", "communication_not_overlapped_ns", "free_ns")}
        worst_cat = max(spread, key=spread.get)
        names = {"computing_ns": "Computing", "communication_not_overlapped_ns": "Communication(Not Overlapped)",
                 "free_ns": "Free"}
        out.append({"kind": "slowest_rank", "severity": "warning" if rel > SLOW_RANK_FINDING_RATIO else "info",
                    "step": step, "ranks": [slow["rank"]], "value": gap,
                    "text": f"{label}rank {slow['rank']} is the slowest (step time {_ms(slow['e2e_ns'])} by the "
                            f"step trace, "
                            f"{_ms(gap)} or {_pct(rel)} more than rank {fast['rank']}). "
                            f"The largest difference between ranks is in {names[worst_cat]} "
                            f"({_ms(spread[worst_cat])})."})
    return out


def _loads(text) -> tuple[dict, str | None]:
    """The JSON object in ``text`` (``{}`` if it is none), and why it could not be read, if it could not."""
    if not text:
        return {}, None
    if isinstance(text, str):
        if _too_deep(text):
            return {}, f"unreadable: nested deeper than {MAX_JSON_DEPTH} levels"
        try:
            text = json.loads(text)
        except ValueError as exc:
            return {}, f"unreadable: not JSON ({exc})"
    return (text, None) if isinstance(text, dict) else ({}, None)


def _too_deep(text: str) -> bool:
    """Whether brackets in JSON text nest deeper than MAX_JSON_DEPTH (those inside strings not counted)."""
    return text.count("[") + text.count("{") > MAX_JSON_DEPTH and jsonfile.max_depth(text) > MAX_JSON_DEPTH


def rank_metadata(db) -> list[dict]:
    """Each rank's device, versions, profiler config, environment variables and parallel groups."""
    out = []
    for r in db.dicts(RANKS_SQL):
        (info, info_problem), (meta, meta_problem) = _loads(r.pop("profiler_info")), _loads(r.pop("profiler_metadata"))
        config = info.get("config") if isinstance(info.get("config"), dict) else {}
        groups = []
        for hccl_name, g in (meta.get("parallel_group_info") or {}).items():
            if isinstance(g, dict):
                groups.append({"hccl_name": hccl_name, "group_name": g.get("group_name"),
                               "group_rank": g.get("group_rank"), "global_ranks": g.get("global_ranks")})
        r.update({
            "start_ns": ns_str(r["start_ns"]), "end_ns": ns_str(r["end_ns"]),
            "common_config": config.get("common_config") or {},
            "experimental_config": config.get("experimental_config") or {},
            "env": meta.get("ENV_VARIABLES") or {},
            "distributed_args": meta.get("distributed_args") or {},
            "parallel_groups": groups,
            "extra_metadata": {k: v for k, v in meta.items()
                               if k not in ("ENV_VARIABLES", "parallel_group_info", "distributed_args")},
        })
        for column, problem in (("profiler_info", info_problem), ("profiler_metadata", meta_problem)):
            if problem:
                r["extra_metadata"][column] = problem
        out.append(r)
    return out


def parallel_groups(ranks: list[dict]) -> list[dict]:
    """The distinct parallel groups named in any rank's metadata."""
    seen: dict = {}
    for r in ranks:
        for g in r["parallel_groups"]:
            key = (g["group_name"], json.dumps(g["global_ranks"]))
            seen.setdefault(key, {"group_name": g["group_name"], "global_ranks": g["global_ranks"],
                                  "hccl_names": set()})["hccl_names"].add(g["hccl_name"])
    return [{**v, "hccl_names": sorted(v["hccl_names"])} for v in seen.values()]


def base_info(db, ranks: list[dict], rows: list[dict]) -> dict:
    meta = dict(db.rows(META_SQL))
    files, size, bad = db.rows(FILES_SQL)[0]
    starts = [int(r["start_ns"]) for r in ranks if r["start_ns"]]
    ends = [int(r["end_ns"]) for r in ranks if r["end_ns"]]
    return {
        "source_path": meta.get("source_path"), "created_at": meta.get("created_at"),
        "schema_version": meta.get("schema_version"),
        "rank_count": len(ranks), "ranks_with_trace": sum(1 for r in ranks if r["has_trace"]),
        "steps": sorted({r["step"] for r in rows if r["step"] is not None}),
        "start_ns": ns_str(min(starts)) if starts else None, "end_ns": ns_str(max(ends)) if ends else None,
        "duration_ns": (max(ends) - min(starts)) if starts and ends else None,
        "files": int(files or 0), "bytes": int(size or 0), "files_not_loaded": int(bad or 0),
        "profiler_levels": sorted({r["profiler_level"] for r in ranks if r["profiler_level"]}),
        "torch_npu_versions": sorted({r["torch_npu_version"] for r in ranks if r["torch_npu_version"]}),
        "cann_versions": sorted({r["cann_version"] for r in ranks if r["cann_version"]}),
    }


def top_operators(db, rank: int, limit: int = TOP_OPERATORS) -> list[dict]:
    rows = db.dicts(TOP_OPERATORS_SQL, [rank, limit])
    for r in rows:
        r["total_ns"] = int(r["total_ns"] or 0)
    return rows


def core_split(db) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in db.dicts(CORE_SPLIT_SQL):
        out.setdefault(int(r.pop("rank")), []).append({**r, "total_ns": int(r["total_ns"] or 0)})
    return out


def name_sources(db, rows: list[dict]) -> list[dict]:
    """Each row's ``source_name``: the file or table its numbers came from, in its rank's format."""
    names = sources.source_names(db, "step_trace") if any(r["source"] == "step_trace" for r in rows) else {}
    for r in rows:
        r["source_name"] = names.get(r["rank"], "step_trace_time.csv") if r["source"] == "step_trace" \
            else "the Overlap Analysis lane"
    return rows


def summary(db, source: str = "auto", top_rank: int | None = None) -> dict:
    ranks = rank_metadata(db)
    rows = name_sources(db, breakdown(db, source))
    kernel_ranks = sorted(core_split(db))
    if top_rank is None and kernel_ranks:
        top_rank = kernel_ranks[0]
    return {
        "base": base_info(db, ranks, rows),
        "breakdown": rows[:MAX_BREAKDOWN_ROWS],
        "breakdown_truncated": len(rows) > MAX_BREAKDOWN_ROWS,
        "sources": sorted({r["source"] for r in rows}),
        "source_names": sorted({r["source_name"] for r in rows}),
        # what the step table is called in this run's format(s), for the source picker
        "step_trace_names": sorted(set(sources.source_names(db, "step_trace").values())),
        "findings": findings(rows),
        "ranks": ranks,
        "parallel_groups": parallel_groups(ranks),
        "top_operators": {"rank": top_rank, "kernel_ranks": kernel_ranks,
                          "rows": top_operators(db, top_rank) if top_rank is not None else []},
        "core_split": {str(k): v for k, v in core_split(db).items()},
    }
