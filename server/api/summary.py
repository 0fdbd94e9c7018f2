"""``/api/runs/{id}/summary``: the per-rank, per-step time breakdown (from step_trace_time.csv, or derived from
the Overlap Analysis lane), findings in plain words, the top operators, and the run's metadata."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request

from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import RankQ, csv_response
from ascendscope.server.queries import Csv, csv_text, sources
from ascendscope.server.queries import summary as sq
from ascendscope.server.redact import source_label

router = APIRouter(prefix="/api/runs/{run_id}/summary", tags=["summary"])

SourceQ = Annotated[Literal["auto", "step_trace", "overlap"],
                    Query(description="step_trace_time.csv, the Overlap Analysis lane, or auto (the CSV where a "
                                      "rank has it)")]
CSV_COLUMNS = ("rank", "step", "source") + sq.CATEGORIES + ("e2e_ns", "computing_ratio", "communication_ratio",
                                                            "free_ratio")


@router.get("")
def run_summary(db: RunDbDep, request: Request, source: SourceQ = "auto", rank: RankQ = None) -> dict:
    """Base info, breakdown rows per (rank, step) with ratios, findings, top operators of ``rank`` (default: the
    first rank with kernels), per-rank accelerator-core split, rank metadata and parallel groups; ``empty_sources``
    names, per rank without a breakdown or kernels, the file or table that would have fed them."""
    result = sq.summary(db, source, rank)
    result["empty_sources"] = _sources(db, source, result["top_operators"]["rank"])
    # an upload's database names the server folder it was extracted to (since removed): show the file name
    result["base"]["source_path"] = source_label(request, db.run, result["base"]["source_path"])
    return result


@router.get("/breakdown.csv")
def run_summary_csv(db: RunDbDep, source: SourceQ = "auto"):
    """The breakdown rows as CSV (times in ns)."""
    rows = sq.breakdown(db, source)
    result: Csv = csv_text(CSV_COLUMNS, ([r.get(c) for c in CSV_COLUMNS] for r in rows))
    return csv_response(result, f"{db.run.id}_step_breakdown.csv")


BREAKDOWN_SECTIONS = {"auto": "breakdown", "step_trace": "breakdown_step_trace", "overlap": "breakdown_overlap"}


def _sources(db, source: str, top_rank: int | None) -> dict:
    section = BREAKDOWN_SECTIONS[source]
    breakdown = sources.explain(db, "summary", sections=(section,))[section]
    top = sources.explain(db, "summary", top_rank, sections=("top_operators",))["top_operators"]
    return {"breakdown": breakdown, "top_operators": top}
