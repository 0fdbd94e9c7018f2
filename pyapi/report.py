"""``ascendscope report RUN --format html|md|json -o FILE``: one file a CI job attaches, with no server behind it.

It holds the run's configuration (source, ranks, versions, profiler config), the headline metrics
(``ascendscope.metrics``), the step breakdown per rank (mean per step) and per step, the top kernels and torch ops
(summed over the ranks), the communication summary (per rank, slow ranks and links), the memory peaks and the
advice findings with the numbers they rest on — every number from the views' own queries (``Run``).

The HTML file is self-contained: plotly.js is inlined from the installed ``plotly`` package (no CDN, no server),
the styles are inline, and every name from the profile is escaped (in tables as HTML, in the charts' data as JSON
that cannot close its ``<script>``). It opens offline, from disk.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ascendscope.commands import EXIT_OK, UsageError, add_data_dir, open_run, run_command
from ascendscope.metrics import METRICS, compute, shown

if TYPE_CHECKING:
    from ascendscope.run import Run

FORMATS = ("html", "md", "json")
DEFAULT_TOP = 15
MAX_STEP_ROWS = 500  # (rank, step) rows listed; the per-rank means cover all of them
MAX_ADVICE = 100
STEP_PARTS = (("computing_ns", "Computing"), ("communication_not_overlapped_ns", "Exposed communication"),
              ("free_ns", "Free"))


def _records(frame) -> list[dict]:
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def _ns(v) -> int | None:
    return None if v is None else int(round(float(v)))


def collect(run: Run, top: int = DEFAULT_TOP) -> dict:
    """Everything the report shows, as JSON-ready values (times in ns)."""
    info = run.info()
    steps = run.steps()
    per_rank = []
    if len(steps):
        cols = ["computing_ns", "communication_not_overlapped_ns", "overlapped_ns", "free_ns", "e2e_ns"]
        means = steps.groupby("rank")[cols].mean()
        counts = steps.groupby("rank")["step"].count()
        for rank, row in means.iterrows():
            per_rank.append({"rank": int(rank), "steps": int(counts.get(rank, 0)),
                             **{c: _ns(row[c]) for c in cols}})
    kernels = run.kernels(group_by="name")
    top_kernels = []
    if len(kernels):
        ranks = max(1, kernels["rank"].nunique())
        g = kernels.groupby(["name", "type", "accelerator_core"], dropna=False).agg(
            count=("count", "sum"), total_ns=("total_ns", "sum"))
        total = float(kernels["total_ns"].sum()) or 1.0
        for (name, ktype, core), row in g.sort_values("total_ns", ascending=False).head(top).iterrows():
            top_kernels.append({"name": _text(name), "type": _text(ktype), "accelerator_core": _text(core),
                                "count": int(row["count"]), "total_ns": int(row["total_ns"]),
                                "per_rank_ns": int(row["total_ns"] / ranks), "avg_ns": int(row["total_ns"] /
                                                                                           max(1, row["count"])),
                                "share": float(row["total_ns"]) / total})
    ops = run.operators(group_by="name")
    top_ops = []
    if len(ops):
        sums = {c: "sum" for c in ("count", "host_self_duration_ns", "host_total_duration_ns",
                                   "device_self_duration_ns", "device_total_duration_ns")}
        g = ops.groupby("name", dropna=False).agg(sums).sort_values("device_self_duration_ns", ascending=False)
        for name, row in g.head(top).iterrows():
            top_ops.append({"name": _text(name), **{c: _ns(row[c]) for c in sums}})
    memory = _records(run.memory())
    advice = _records(run.advice())
    order = {"critical": 0, "warning": 1, "info": 2}
    advice.sort(key=lambda f: (order.get(f["severity"], 3), -1 if f["rank"] is None else f["rank"]))
    return {
        "run": {"id": run.id, "name": run.name, "database": str(run.database)},
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "configuration": _configuration(info),
        "metrics": {k: v for k, v in compute(run).items() if k in METRICS or k == "top_kernel_name"},
        "steps_per_rank": per_rank,
        "steps": _records(steps.head(MAX_STEP_ROWS)),
        "steps_total": len(steps),
        "top_kernels": top_kernels,
        "top_torch_ops": top_ops,
        "communication": {"ranks": _records(run.communication()), **run.communication_findings()},
        "memory": {"components": memory,
                   "peak": max(memory, key=lambda c: c["peak_reserved_mb"] or 0, default=None)},
        "advice": advice[:MAX_ADVICE],
        "advice_total": len(advice),
    }


def _text(v) -> str | None:
    return None if v is None else str(v)


def _configuration(info: dict) -> dict:
    keep = ("source_path", "created_at", "rank_count", "ranks_with_trace", "steps", "start_ns", "end_ns",
            "duration_ns", "files", "bytes", "files_not_loaded", "profiler_levels", "torch_npu_versions",
            "cann_versions")
    ranks = [{k: r.get(k) for k in ("rank", "device_id", "profiler_level", "torch_npu_version", "cann_version",
                                    "has_trace", "common_config", "experimental_config")} for r in info["ranks"]]
    return {**{k: info.get(k) for k in keep}, "ranks": ranks, "parallel_groups": info.get("parallel_groups")}


# ---- Markdown -------------------------------------------------------------------------------------------------
def _md_cell(v) -> str:
    return ("" if v is None else str(v)).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out + [""]


def _clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _ms(ns) -> str:
    return "" if ns is None else f"{ns / 1e6:,.3f}"


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def sections(data: dict) -> list[tuple[str, list[str], list[list]]]:
    """(title, headers, rows) of every table, shared by the Markdown and HTML renderings."""
    cfg = data["configuration"]
    m = data["metrics"]
    out = [
        ("Configuration", ["item", "value"], [
            ["source", cfg["source_path"]], ["ranks", f"{cfg['rank_count']} ({cfg['ranks_with_trace']} with a trace)"],
            ["steps", ", ".join(map(str, cfg["steps"] or [])) or "none"],
            ["duration", f"{_ms(cfg['duration_ns'])} ms"], ["profiler level", ", ".join(cfg["profiler_levels"])],
            ["torch_npu", ", ".join(cfg["torch_npu_versions"])], ["CANN", ", ".join(cfg["cann_versions"])],
            ["files read", f"{cfg['files']} ({cfg['files_not_loaded']} not loaded as they are)"],
            ["ingested", cfg["created_at"]]]),
        ("Ranks", ["rank", "device", "level", "torch_npu", "CANN", "trace", "profiler config"], [
            [r["rank"], r["device_id"], r["profiler_level"], r["torch_npu_version"], r["cann_version"],
             "yes" if r["has_trace"] else "no",
             _clip(json.dumps({**(r["common_config"] or {}), **(r["experimental_config"] or {})}, sort_keys=True))]
            for r in cfg["ranks"]]),
        ("Headline metrics", ["metric", "value", "what"], [
            [name, shown(name, m.get(name)) + (f" ({m['top_kernel_name']})" if name == "top_kernel" and
                                                m.get("top_kernel_name") else ""), METRICS[name].help]
            for name in METRICS]),
        ("Step breakdown per rank (mean per step, ms)",
         ["rank", "steps", "computing", "exposed comm", "overlapped", "free", "step (e2e)"], [
            [r["rank"], r["steps"], _ms(r["computing_ns"]), _ms(r["communication_not_overlapped_ns"]),
             _ms(r["overlapped_ns"]), _ms(r["free_ns"]), _ms(r["e2e_ns"])] for r in data["steps_per_rank"]]),
        (f"Step breakdown per step (ms; {min(data['steps_total'], MAX_STEP_ROWS)} of {data['steps_total']} rows)",
         ["rank", "step", "source", "computing", "exposed comm", "free", "e2e", "free %"], [
            [r["rank"], r["step"], r["source"], _ms(r["computing_ns"]), _ms(r["communication_not_overlapped_ns"]),
             _ms(r["free_ns"]), _ms(r["e2e_ns"]), _pct(r["free_ratio"])] for r in data["steps"]]),
        ("Top kernels (all ranks)", ["kernel", "type", "core", "count", "total ms", "ms per rank", "avg µs", "share"], [
            [k["name"], k["type"], k["accelerator_core"], k["count"], _ms(k["total_ns"]), _ms(k["per_rank_ns"]),
             f"{k['avg_ns'] / 1e3:,.2f}", _pct(k["share"])] for k in data["top_kernels"]]),
        ("Top torch ops (all ranks, by device self time)",
         ["op", "count", "host self ms", "host total ms", "device self ms", "device total ms"], [
            [o["name"], o["count"], _ms(o["host_self_duration_ns"]), _ms(o["host_total_duration_ns"]),
             _ms(o["device_self_duration_ns"]), _ms(o["device_total_duration_ns"])] for o in data["top_torch_ops"]]),
        ("Communication per rank (ms)",
         ["rank", "ops", "elapse", "transit", "wait", "synchronization", "idle", "wait ratio"], [
            [r["rank"], r["ops"], _ms(r["elapse_time_ns"]), _ms(r["transit_time_ns"]), _ms(r["wait_time_ns"]),
             _ms(r["synchronization_time_ns"]), _ms(r["idle_time_ns"]), _pct(r["wait_time_ratio"])]
            for r in data["communication"]["ranks"]]),
        ("Slowest links", ["transport", "src → dst", "GB/s", "median GB/s", "MB"], [
            [link["transport_type"], f"{link['src_rank']} → {link['dst_rank']}",
             f"{link['bandwidth_gbps'] or 0:.2f}", f"{link['median_gbps'] or 0:.2f}",
             f"{link['transit_size_mb'] or 0:,.1f}"] for link in data["communication"]["slow_links"]]),
        ("Memory peaks (MB)", ["rank", "component", "peak allocated", "peak reserved", "peak active"], [
            [c["rank"], c["component"], c["peak_allocated_mb"], c["peak_reserved_mb"], c["peak_active_mb"]]
            for c in data["memory"]["components"]]),
        (f"Advice ({min(data['advice_total'], MAX_ADVICE)} of {data['advice_total']} findings)",
         ["severity", "rank", "finding", "numbers"], [
            [f["severity"], "all" if f["rank"] is None else f["rank"], f"{f['title']}: {f['text']}",
             _clip(json.dumps(f["metrics"], sort_keys=True, default=str))] for f in data["advice"]]),
    ]
    return out


def render_md(data: dict) -> str:
    lines = [f"# ascendscope report: {data['run']['name']}", "",
             f"Run `{data['run']['id']}`, generated {data['generated_at']}.", ""]
    for note in data["communication"]["advice"]:
        lines.append(f"> {note}")
    for title, headers, rows in sections(data):
        lines += [f"## {title}", ""] + (_md_table(headers, rows) if rows else ["(none)", ""])
    return "\n".join(lines)


# ---- HTML -----------------------------------------------------------------------------------------------------
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#1d2330;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d8dce6;padding-bottom:4px}
table{border-collapse:collapse;width:100%;margin:8px 0}th,td{border:1px solid #e1e4ec;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#f3f5f9}td{font-variant-numeric:tabular-nums}
.note{background:#fff7e6;border-left:3px solid #f0a020;padding:6px 10px;margin:6px 0}.muted{color:#667}
"""


def _html_table(headers: list[str], rows: list[list]) -> str:
    if not rows:
        return '<p class="muted">(none)</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('' if c is None else str(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _charts(data: dict) -> list[tuple[str, object]]:
    """(section title the chart goes after, plotly figure)."""
    import plotly.graph_objects as go

    out = []
    ranks = [str(r["rank"]) for r in data["steps_per_rank"]]
    if ranks:
        fig = go.Figure([go.Bar(name=label, x=ranks, y=[(r[key] or 0) / 1e6 for r in data["steps_per_rank"]])
                         for key, label in STEP_PARTS])
        fig.update_layout(barmode="stack", title="Mean step per rank (ms)", xaxis_title="rank", yaxis_title="ms",
                          height=360, margin={"l": 60, "r": 20, "t": 50, "b": 50}, xaxis_type="category")
        out.append(("Step breakdown per rank (mean per step, ms)", fig))
    if data["top_kernels"]:
        ks = list(reversed(data["top_kernels"]))
        fig = go.Figure([go.Bar(orientation="h", x=[k["per_rank_ns"] / 1e6 for k in ks],
                                y=[(k["name"] or "?")[:60] for k in ks], hovertext=[k["name"] for k in ks])])
        fig.update_layout(title="Top kernels (ms per rank)", height=120 + 22 * len(ks),
                          margin={"l": 320, "r": 20, "t": 50, "b": 40})
        out.append(("Top kernels (all ranks)", fig))
    return out


def render_html(data: dict) -> str:
    import plotly.io as pio

    charts: dict[str, list[str]] = {}
    first = True
    for title, fig in _charts(data):
        # the first chart carries plotly.js itself, read from the installed plotly package: no CDN
        charts.setdefault(title, []).append(pio.to_html(fig, include_plotlyjs=first, full_html=False,
                                                        config={"displaylogo": False, "responsive": True}))
        first = False
    name = html.escape(data["run"]["name"])
    parts = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ascendscope report: {name}"
             f"</title><style>{STYLE}</style></head><body>",
             f"<h1>ascendscope report: {name}</h1>",
             f"<p class=\"muted\">Run <code>{html.escape(data['run']['id'])}</code>, generated "
             f"{html.escape(data['generated_at'])}.</p>"]
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in data["communication"]["advice"]]
    for title, headers, rows in sections(data):
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts += charts.get(title, [])
        parts.append(_html_table(headers, rows))
    parts.append("</body></html>")
    return "\n".join(parts)


def render(data: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n"
    return render_md(data) if fmt == "md" else render_html(data)


def write(run: Run, path: str | os.PathLike, fmt: str | None = None, top: int = DEFAULT_TOP) -> Path:
    """The report of ``run`` as ``path`` (format from ``fmt`` or the file's suffix: .html, .md, .json)."""
    target = Path(path)
    fmt = fmt or {".htm": "html", ".markdown": "md"}.get(target.suffix.lower(), target.suffix.lower().lstrip("."))
    if fmt not in FORMATS:
        raise ValueError(f"cannot tell the report format from {target.name}: use html, md or json")
    text = render(collect(run, top), fmt)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run folder or .duckdb, or profiling data (ingested first)")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="html (self-contained, charts inlined), md or json (default: from -o, else html)")
    parser.add_argument("-o", "--output", default=None, metavar="FILE", help="where to write it (default: stdout)")
    parser.add_argument("--top", type=int, default=DEFAULT_TOP, help="kernels and torch ops listed (default 15)")
    add_data_dir(parser)


def _report(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    with open_run(args.run, args.data_dir) as run:
        if args.output:
            try:
                target = write(run, args.output, args.format, args.top)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            print(f"wrote {target} ({target.stat().st_size:,} bytes)", file=sys.stderr)
        else:
            sys.stdout.write(render(collect(run, args.top), args.format or "html"))
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return run_command(_report, args)
