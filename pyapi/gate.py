"""``ascendscope compare A B --fail-if "step_time>+5%"``: a regression gate for CI.

Prints the two runs' headline metrics (``ascendscope.metrics``) side by side with B − A, and the kernels whose
time changed most; each ``--fail-if`` condition is checked on B against A, and the exit code is 1 when one holds
(0 when none does, 2 for a bad expression or a run that cannot be opened).

A condition is ``METRIC OP VALUE``, OP one of ``> >= < <=``:

* ``step_time>+5%``: B is more than 5% above A (a signed percentage: the relative change);
* ``exposed_comm>+2ms``: B is more than 2 ms above A (a signed amount: the change; ns, us, ms, s, or MB, GB);
* ``free_ratio>20%``, ``step_time>150ms``, ``peak_reserved_mb>30000``: B's own value (no sign; a percentage is a
  ratio's own value).

A condition on a metric one of the runs does not have (no kernels, no memory data) cannot be checked: it counts as
failed, saying so, since a gate that silently passes on missing data protects nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass

from ascendscope.commands import EXIT_FAILED, EXIT_OK, UsageError, add_data_dir, open_run, run_command
from ascendscope.metrics import METRICS, change, compute, shown

OPS = {">": lambda x, y: x > y, ">=": lambda x, y: x >= y, "<": lambda x, y: x < y, "<=": lambda x, y: x <= y}
UNITS = {"ns": ("ns", 1.0), "us": ("ns", 1e3), "ms": ("ns", 1e6), "s": ("ns", 1e9), "mb": ("mb", 1.0),
         "gb": ("mb", 1024.0), "": (None, 1.0)}
EXPRESSION = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|>|<)\s*([+-]?)\s*(\d+(?:\.\d+)?|\.\d+)\s*(%|[a-zA-Z]*)\s*$")
TOP_KERNEL_CHANGES = 10
GRAMMAR = ("METRIC OP VALUE, e.g. step_time>+5% (relative change), exposed_comm>+2ms (change), free_ratio>20% or "
           "step_time>150ms (B's own value); OP: > >= < <=")


@dataclass(frozen=True)
class Condition:
    text: str
    metric: str
    op: str
    kind: str  # "relative" (signed %), "delta" (signed amount) or "value"
    threshold: float  # a fraction for relative, else in the metric's unit

    def describe(self) -> str:
        return self.text.replace(" ", "")


def parse(text: str) -> Condition:
    """A ``--fail-if`` expression, or :class:`UsageError` saying what is wrong with it."""
    m = EXPRESSION.match(text or "")
    if not m:
        raise UsageError(f"bad --fail-if {text!r}: expected {GRAMMAR}")
    metric, op, sign, number, unit = m.groups()
    if metric not in METRICS:
        raise UsageError(f"bad --fail-if {text!r}: no metric {metric!r}; metrics: {', '.join(METRICS)}")
    value = float(number) * (-1 if sign == "-" else 1)
    kind_of = METRICS[metric].unit
    if unit == "%":
        if sign:
            return Condition(text, metric, op, "relative", value / 100)
        if kind_of != "ratio":
            raise UsageError(f"bad --fail-if {text!r}: a percentage without a sign is a ratio's own value, and "
                             f"{metric} is not a ratio (write +{number}% for a relative change)")
        return Condition(text, metric, op, "value", value / 100)
    base, scale = UNITS.get(unit.lower(), (False, 0))
    if base is False:
        raise UsageError(f"bad --fail-if {text!r}: unknown unit {unit!r} (ns, us, ms, s, MB, GB or %)")
    if base is None and kind_of == "ns":
        raise UsageError(f"bad --fail-if {text!r}: {metric} is a time: give a unit (ns, us, ms, s) or a %")
    if base is not None and base != kind_of:
        raise UsageError(f"bad --fail-if {text!r}: {metric} is measured in {kind_of}, not {unit}")
    return Condition(text, metric, op, "delta" if sign else "value", value * scale)


@dataclass
class Verdict:
    condition: Condition
    failed: bool
    message: str


def check(cond: Condition, a: dict, b: dict) -> Verdict:
    va, vb = a.get(cond.metric), b.get(cond.metric)
    delta, rel = change(va, vb)
    if cond.kind == "value":
        observed = vb
    elif cond.kind == "delta":
        observed = delta
    else:
        observed = rel
    if observed is None:
        sides = (("B", vb),) if cond.kind == "value" else (("A", va), ("B", vb))
        missing = " and ".join(side for side, v in sides if v is None)
        why = f"{cond.metric} is missing in {missing}" if missing else f"A's {cond.metric} is 0 (no relative change)"
        return Verdict(cond, True, f"{cond.describe()}: FAILED: cannot be checked: {why}")
    held = OPS[cond.op](observed, cond.threshold)
    seen = (f"{100 * rel:+.1f}%" if cond.kind == "relative" else
            (_signed(cond.metric, delta) if cond.kind == "delta" else shown(cond.metric, vb)))
    what = f"{cond.metric} {shown(cond.metric, va)} → {shown(cond.metric, vb)} ({seen})"
    return Verdict(cond, held, f"{cond.describe()}: {'FAILED' if held else 'ok'}: {what}")


def _signed(metric: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return ("+" if value >= 0 else "-") + shown(metric, abs(value))


def kernel_changes(run_a, run_b, limit: int = TOP_KERNEL_CHANGES) -> list[dict]:
    """The computing kernels (by name, device time per rank) whose time changed most between the runs."""
    def per_rank(run) -> dict:
        k = run.kernels(group_by="name", kind="computing")
        if not len(k):
            return {}
        ranks = max(1, k["rank"].nunique())
        return {str(n): float(v) / ranks for n, v in k.groupby("name", dropna=False)["total_ns"].sum().items()}

    ka, kb = per_rank(run_a), per_rank(run_b)
    rows = []
    for name in set(ka) | set(kb):
        a, b = ka.get(name), kb.get(name)
        d = (b or 0.0) - (a or 0.0)
        rows.append({"name": name, "a_ns": a, "b_ns": b, "delta_ns": d, "delta_pct": (d / a) if a else None})
    rows.sort(key=lambda r: (-abs(r["delta_ns"]), r["name"]))
    return rows[:limit]


def diff_text(a: dict, b: dict, verdicts: list[Verdict], kernels: list[dict]) -> str:
    lines = [f"A: {a['name']} ({a['id']}, {len(a['ranks'])} rank(s))",
             f"B: {b['name']} ({b['id']}, {len(b['ranks'])} rank(s))", ""]
    failing = {v.condition.metric for v in verdicts if v.failed}
    lines.append(f"  {'metric':<20} {'A':>16} {'B':>16} {'B − A':>16} {'%':>8}")
    for name in METRICS:
        d, rel = change(a.get(name), b.get(name))
        flag = "  ✗" if name in failing else ""
        lines.append(f"  {name:<20} {shown(name, a.get(name)):>16} {shown(name, b.get(name)):>16} "
                     f"{_signed(name, d):>16} {'' if rel is None else f'{100 * rel:+.1f}%':>8}{flag}")
    lines.append(f"  top kernel: A {a.get('top_kernel_name') or 'n/a'} · B {b.get('top_kernel_name') or 'n/a'}")
    if kernels:
        lines += ["", "kernels that changed most (device time per rank):"]
        for k in kernels:
            pct = "" if k["delta_pct"] is None else f" ({100 * k['delta_pct']:+.1f}%)"
            lines.append(f"  {_signed('kernel_time', k['delta_ns']):>14}{pct:<10} {k['name']}")
    if verdicts:
        lines += ["", "checks:"] + [f"  {v.message}" for v in verdicts]
        failed = [v for v in verdicts if v.failed]
        lines.append("")
        lines.append(f"FAIL: {len(failed)} of {len(verdicts)} check(s) failed" if failed else
                     f"PASS: {len(verdicts)} check(s)")
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the baseline run (a run folder or .duckdb, or profiling data)")
    parser.add_argument("b", metavar="B", help="the run to check against it")
    parser.add_argument("--fail-if", action="append", default=[], metavar="EXPR",
                        help=(f"exit 1 if this holds for B against A; {GRAMMAR}; repeatable. Metrics: "
                              + ", ".join(METRICS)).replace("%", "%%"))  # argparse %-formats its help
    parser.add_argument("--format", choices=("text", "json"), default="text", help="the diff as text or JSON")
    add_data_dir(parser)


def _compare(args: argparse.Namespace) -> int:
    conditions = [parse(text) for text in args.fail_if]  # bad expressions fail before any run is opened
    with open_run(args.a, args.data_dir) as run_a, open_run(args.b, args.data_dir) as run_b:
        a, b = compute(run_a), compute(run_b)
        kernels = kernel_changes(run_a, run_b)
    verdicts = [check(c, a, b) for c in conditions]
    failed = any(v.failed for v in verdicts)
    if args.format == "json":
        json.dump({"a": a, "b": b, "kernels": kernels, "passed": not failed,
                   "checks": [{"condition": v.condition.text, "failed": v.failed, "message": v.message}
                              for v in verdicts]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(diff_text(a, b, verdicts, kernels))
    return EXIT_FAILED if failed else EXIT_OK


def run(args: argparse.Namespace) -> int:
    return run_command(_compare, args)
