"""``ascendscope export RUN``: a view's table as CSV or Parquet, or the timeline as a Chrome/Perfetto trace.

    ascendscope export RUN --table kernels --rank 0 --filter group_by=type -o kernels.parquet
    ascendscope export RUN --timeline --ranks 0,1 --start-ns T0 --end-ns T1 -o window.json

Tables are those of ``ascendscope.tables`` (the views' own, whole); the format follows the file's suffix (or
``--format``). The trace is ``ascendscope.chrometrace``'s.
"""

from __future__ import annotations

import argparse
import sys

from ascendscope import tables
from ascendscope.commands import EXIT_OK, UsageError, add_data_dir, open_run, run_command
from ascendscope.server.queries import QueryError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run folder or .duckdb, or profiling data (ingested first)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--table", choices=list(tables.TABLES), help="a view's table")
    what.add_argument("--timeline", action="store_true", help="the timeline as Chrome trace JSON (Perfetto)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write")
    parser.add_argument("--format", choices=("csv", "parquet"), default=None, help="csv or parquet (default: FILE's)")
    parser.add_argument("--rank", type=int, default=None, help="one rank (default: every rank)")
    parser.add_argument("--filter", action="append", default=[], metavar="NAME=VALUE",
                        help="a view filter of the table (e.g. group_by=type, kind=computing, step=12); repeatable")
    parser.add_argument("--ranks", default=None, help="--timeline: comma-separated ranks (default: all)")
    parser.add_argument("--start-ns", type=int, default=None, help="--timeline: window start, epoch ns")
    parser.add_argument("--end-ns", type=int, default=None, help="--timeline: window end, epoch ns")
    add_data_dir(parser)


def _filters(name: str, pairs: list[str], rank: int | None) -> dict:
    accepted = tables.TABLES[name][1]
    out: dict = {} if rank is None else {"rank": rank}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in accepted:
            raise UsageError(f"--filter {pair!r}: table {name} takes NAME=VALUE with NAME one of "
                             f"{', '.join(accepted)}")
        try:
            out[key] = accepted[key](value)
        except ValueError:
            raise UsageError(f"--filter {pair!r}: {key} must be a {accepted[key].__name__}") from None
    return out


def _ranks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise UsageError(f"--ranks {text!r}: comma-separated rank numbers") from None


def _export(args: argparse.Namespace) -> int:
    with open_run(args.run, args.data_dir) as run:
        if args.timeline:
            try:
                counts = run.export_trace(args.output, ranks=_ranks(args.ranks), start_ns=args.start_ns,
                                          end_ns=args.end_ns)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            print(f"wrote {counts['path']}: {counts['slices']:,} slices, {counts['flows']:,} flows, "
                  f"{counts['counters']:,} counter values of rank(s) {', '.join(map(str, counts['ranks']))}",
                  file=sys.stderr)
            return EXIT_OK
        from ascendscope import frames  # pandas: only once a table is exported

        try:
            frame = run.table(args.table, **_filters(args.table, args.filter, args.rank))
            target = frames.write(frame, args.output, args.format)
        except (QueryError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        print(f"wrote {target}: {len(frame):,} rows of {args.table}", file=sys.stderr)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return run_command(_export, args)
