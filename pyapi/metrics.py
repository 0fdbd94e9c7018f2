"""A run's headline numbers, from the views' tables: what ``ascendscope compare`` gates on, ``ascendscope history``
follows across runs and the report leads with.

Times are ns, means per step: ``step_time`` is, per step, the slowest rank's computing + exposed communication +
free (a step lasts as long as its slowest rank), averaged over the steps; ``computing``, ``exposed_comm`` (the
Summary view's Communication(Not Overlapped)), ``free`` and ``preparing`` average the (rank, step) rows. Kernel
times are per rank, of computing kernels (the HCCL tasks are communication, which the step metrics cover):
``kernel_time`` the device time of all of them, ``top_kernel`` that of the kernel (by name) that takes the most in
the run. ``peak_reserved_mb`` is the highest reserved memory of any rank and
component.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascendscope.run import Run


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # "ns", "ratio", "mb" or "count"
    help: str


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("step_time", "ns", "mean step time (per step the slowest rank's computing + exposed comm + free)"),
    Metric("computing", "ns", "mean computing time per rank and step"),
    Metric("exposed_comm", "ns", "mean communication not overlapped with computing, per rank and step"),
    Metric("free", "ns", "mean free time (the device idle) per rank and step"),
    Metric("preparing", "ns", "mean preparing time per rank and step"),
    Metric("exposed_comm_ratio", "ratio", "mean share of the step that is exposed communication"),
    Metric("free_ratio", "ratio", "mean share of the step that is free"),
    Metric("kernel_time", "ns", "device time of all computing kernels, per rank"),
    Metric("top_kernel", "ns", "device time of the run's most expensive computing kernel (by name), per rank"),
    Metric("peak_reserved_mb", "mb", "highest reserved memory of any rank and component"),
    Metric("steps", "count", "steps profiled (distinct step numbers)"),
)}


def _mean(values) -> float | None:
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def compute(run: Run) -> dict:
    """``{metric: value or None}`` plus ``top_kernel_name``, ``ranks`` and the run's ``name``."""
    steps = run.steps()
    rows = steps.astype(object).where(steps.notna(), None).to_dict("records")
    by_step: dict = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(r)
    kernels = run.kernels(group_by="name", kind="computing")
    kernel_ranks = max(1, kernels["rank"].nunique()) if len(kernels) else 1
    per_name = kernels.groupby("name", dropna=False)["total_ns"].sum() if len(kernels) else None
    top_name = None if per_name is None or per_name.empty else per_name.idxmax()
    memory = run.memory()
    peak = memory["peak_reserved_mb"].max() if len(memory) else None
    out = {
        "step_time": _mean(max(r["e2e_ns"] or 0 for r in rs) for rs in by_step.values()) if by_step else None,
        "computing": _mean(r["computing_ns"] for r in rows),
        "exposed_comm": _mean(r["communication_not_overlapped_ns"] for r in rows),
        "free": _mean(r["free_ns"] for r in rows),
        "preparing": _mean(r["preparing_ns"] for r in rows),
        "exposed_comm_ratio": _mean(r["communication_ratio"] for r in rows),
        "free_ratio": _mean(r["free_ratio"] for r in rows),
        "kernel_time": float(kernels["total_ns"].sum()) / kernel_ranks if len(kernels) else None,
        "top_kernel": float(per_name.max()) / kernel_ranks if top_name is not None else None,
        "peak_reserved_mb": None if peak is None or (isinstance(peak, float) and math.isnan(peak)) else float(peak),
        "steps": float(len([s for s in by_step if s is not None])),
    }
    return out | {"top_kernel_name": None if top_name is None else str(top_name), "ranks": run.ranks,
                  "name": run.name, "id": run.id}


def shown(metric: str, value: float | None) -> str:
    """A value in the metric's unit, for people: ``12.345 ms``, ``21.3%``, ``1,024.0 MB``."""
    if value is None:
        return "n/a"
    unit = METRICS[metric].unit if metric in METRICS else "ns"
    if unit == "ns":
        return f"{value / 1e6:,.3f} ms"
    if unit == "ratio":
        return f"{100 * value:.1f}%"
    if unit == "mb":
        return f"{value:,.1f} MB"
    return f"{value:,.0f}"


def change(a: float | None, b: float | None) -> tuple[float | None, float | None]:
    """(B − A, (B − A) / A); None where it cannot be computed."""
    if a is None or b is None:
        return None, None
    return b - a, ((b - a) / a if a else None)
