"""``ascendscope history RUN RUN …``: the headline metrics (``ascendscope.metrics``) of many runs in order — a
nightly series, say — with each run where a metric jumped flagged.

A jump is a change from the run before of more than ``--threshold`` (10% by default) either way: ``▲ +14.2%``
(the metric grew: slower, for times) or ``▼ -12.0%``. Runs are listed in the order given, or by the time they
were profiled (``--order time``). Output as a text table, CSV or JSON (``--format``); exit code 0, or 2 when a
run cannot be opened.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

from ascendscope.commands import EXIT_OK, UsageError, add_data_dir, open_run, run_command
from ascendscope.metrics import METRICS, change, compute, shown

DEFAULT_METRICS = ("step_time", "exposed_comm", "free", "top_kernel")
DEFAULT_THRESHOLD = 0.10


def series(runs: list[dict], metrics: tuple[str, ...], threshold: float) -> list[dict]:
    """Each run's values with, per metric, the change from the run before and whether it is a jump."""
    out = []
    previous: dict | None = None
    for r in runs:
        row = {"name": r["name"], "id": r["id"], "start_ns": r.get("start_ns"),
               "top_kernel_name": r.get("top_kernel_name"), "values": {}, "jumps": {}}
        for m in metrics:
            row["values"][m] = r.get(m)
            _, rel = change(previous.get(m), r.get(m)) if previous is not None else (None, None)
            row["jumps"][m] = rel if rel is not None and abs(rel) > threshold else None
            row.setdefault("changes", {})[m] = rel
        out.append(row)
        previous = r
    return out


def table_text(rows: list[dict], metrics: tuple[str, ...], threshold: float) -> str:
    width = max([len("run")] + [len(r["name"]) for r in rows])
    head = f"{'#':>3}  {'run':<{width}}" + "".join(f"  {m:>24}" for m in metrics)
    lines = [head]
    for i, r in enumerate(rows, 1):
        cells = []
        for m in metrics:
            jump = r["jumps"][m]
            mark = "" if jump is None else f" {'▲' if jump > 0 else '▼'}{100 * jump:+.1f}%"
            cells.append(f"  {shown(m, r['values'][m]) + mark:>24}")
        lines.append(f"{i:>3}  {r['name']:<{width}}" + "".join(cells))
    jumps = [(r["name"], m, r["jumps"][m]) for r in rows for m in metrics if r["jumps"][m] is not None]
    lines.append("")
    if jumps:
        lines.append(f"jumps (more than {100 * threshold:.0f}% from the run before):")
        lines += [f"  {name}: {m} {100 * j:+.1f}%" for name, m, j in jumps]
    else:
        lines.append(f"no metric moved more than {100 * threshold:.0f}% from one run to the next")
    tops = {r["top_kernel_name"] for r in rows if r["top_kernel_name"]}
    if "top_kernel" in metrics and len(tops) > 1:
        lines.append("top kernel per run: " + "; ".join(f"{r['name']}: {r['top_kernel_name']}" for r in rows))
    return "\n".join(lines) + "\n"


def _threshold(text: str) -> float:
    raw = text.strip().rstrip("%")
    try:
        value = float(raw) / (100 if text.strip().endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a threshold: {text!r} (e.g. 10%)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("the threshold must be positive")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="runs (run folders, .duckdb files or profiling data)")
    parser.add_argument("--metric", action="append", default=None, choices=list(METRICS),
                        help="a metric to show (repeatable; default: " + ", ".join(DEFAULT_METRICS) + ")")
    parser.add_argument("--threshold", type=_threshold, default=DEFAULT_THRESHOLD,
                        help="a change from the run before larger than this is a jump (default 10%%)")
    parser.add_argument("--order", choices=("given", "time"), default="given",
                        help="the order given, or by the time each run was profiled")
    parser.add_argument("--format", choices=("text", "csv", "json"), default="text")
    add_data_dir(parser)


def _history(args: argparse.Namespace) -> int:
    metrics = tuple(args.metric or DEFAULT_METRICS)
    found = []
    for path in args.runs:
        with open_run(path, args.data_dir) as run:
            values = compute(run)
            values["start_ns"] = run.info().get("start_ns")
        found.append(values)
    if args.order == "time":
        if any(r["start_ns"] is None for r in found):
            raise UsageError("--order time: a run has no start time (no profiled data with times)")
        found.sort(key=lambda r: int(r["start_ns"]))
    rows = series(found, metrics, args.threshold)
    if args.format == "json":
        json.dump({"metrics": list(metrics), "threshold": args.threshold, "runs": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.format == "csv":
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(["run", "id", *metrics, *[f"{m}_jump" for m in metrics], "top_kernel_name"])
        for r in rows:
            out.writerow([r["name"], r["id"], *[r["values"][m] for m in metrics],
                          *["" if r["jumps"][m] is None else r["jumps"][m] for m in metrics], r["top_kernel_name"]])
    else:
        sys.stdout.write(table_text(rows, metrics, args.threshold))
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return run_command(_history, args)
