"""``ascendscope``: ``serve`` the dashboard (ingesting the given paths first) or ``ingest`` one path to a file.

    ascendscope serve [PATH ...] [--host 127.0.0.1] [--port 8000] [--workers N] [--data-dir DIR] [--no-browser]
                      [--read-only] [--token TOKEN] [--allowed-hosts NAMES]
                      [--tls-cert PEM [--tls-key PEM] [--tls-client-ca PEM]]
    ascendscope ingest PATH --out FILE.duckdb
    ascendscope report RUN --format html|md|json -o FILE
    ascendscope compare A B [--fail-if "step_time>+5%" ...]
    ascendscope history RUN RUN ...
    ascendscope export RUN (--table NAME | --timeline) -o FILE

``serve`` turns each PATH into a run (an unchanged source that was already ingested is reused) and ingests it
in a worker process while the server is already up (``server.webworkers``: ``--workers`` processes answer requests,
one of them runs the ingest queue); with no PATH and an empty data dir it loads the bundled
sample. A PATH that is a folder of several runs (subfolders that each hold rank folders, or archives) opens as
one run per subfolder. A PATH is only read: the database goes into the data dir.

Every option defaults to its ``ASCENDSCOPE_*`` environment variable (see ``server.settings``), then to the
built-in default; a flag on the command line wins. The data dir is ``--data-dir``, else
``$ASCENDSCOPE_DATA_DIR``, else ``~/.ascendscope``.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
import webbrowser
from pathlib import Path
from urllib.parse import quote

from ascendscope.server import tls
from ascendscope.server.settings import Settings, query_process_count, settings_help, worker_count

SOURCE_SCAN_DEPTH = 5  # how deep a subfolder of a multi-run folder is searched for rank folders
# subcommands whose module (ascendscope.<module>) owns its arguments (add_arguments) and its work (run)
TOOLS = {
    "report": ("report", "a self-contained report of a run (html with charts, md or json) for a CI job to attach"),
    "compare": ("gate", "compare two runs' headline metrics; --fail-if makes it a regression gate (exit 1)"),
    "history": ("history", "headline metrics across many runs in order, flagging the run where one jumped"),
    "export": ("export", "a view's table as CSV/Parquet, or the timeline as Chrome/Perfetto trace JSON"),
}


def bundled_sample_path() -> Path | None:
    """``sample_data/bundled`` inside the installed ``sample_data`` package, if it is there."""
    try:
        from ascendscope import sample_data
    except ImportError:
        return None
    path = Path(sample_data.__file__).resolve().parent / "bundled"
    return path if path.exists() and any(path.iterdir()) else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascendscope", description="Ascend NPU profiling dashboard.")
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{serve,ingest,bench," + ",".join(TOOLS) + "}")

    serve = sub.add_parser("serve", help="serve the dashboard (ingesting PATHs first)",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="environment variables:\n" + settings_help())
    serve.add_argument("paths", nargs="*", metavar="PATH",
                       help="profiling folders (*_ascend_pt, a folder of ranks, an archive) to open as runs")
    serve.add_argument("--host", default=None, help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="TCP port (default 8000; 0 picks a free one)")
    serve.add_argument("--workers", type=int, default=None, metavar="N",
                       help="server processes (default: one, or one per core with --query-processes 0); they "
                            "share the port, one ingests")
    serve.add_argument("--query-processes", type=int, default=None, metavar="N",
                       help="processes per server process that answer the timeline's viewport requests (default: "
                            "one per core; 0: threads of the server process answer them)")
    serve.add_argument("--data-dir", default=None, help="where runs are stored (default ~/.ascendscope)")
    serve.add_argument("--no-browser", action="store_true", default=None, help="do not open a browser tab")
    serve.add_argument("--read-only", action="store_true", default=None,
                       help="share the runs as they are: no upload, rename or delete")
    serve.add_argument("--token", default=None,
                       help="require this access token on every request (default $ASCENDSCOPE_TOKEN)")
    serve.add_argument("--allowed-hosts", default=None, metavar="NAMES",
                       help="without a token, the dashboard answers only to localhost, its own address and these "
                            "host names (comma-separated; * for any), against DNS rebinding; listening on 0.0.0.0 "
                            "or :: it also answers to any IP address (default $ASCENDSCOPE_ALLOWED_HOSTS)")
    serve.add_argument("--tls-cert", default=None, metavar="PEM",
                       help="serve HTTPS with this certificate (and chain); its key in --tls-key or the same file "
                            "(default $ASCENDSCOPE_TLS_CERT)")
    serve.add_argument("--tls-key", default=None, metavar="PEM", help="the private key of --tls-cert")
    serve.add_argument("--tls-client-ca", default=None, metavar="PEM",
                       help="require a client certificate signed by one of these CAs (mutual TLS)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    ingest = sub.add_parser("ingest", help="ingest one path into a DuckDB file")
    from ascendscope.ingest import cli as ingest_cli  # the ingest CLI owns its arguments

    ingest_cli.add_arguments(ingest)

    bench = sub.add_parser("bench", help="run a benchmark: suite (the default: everything, beside the peers), "
                                         "ingest (MB/s, peak RSS), query (timeline request latency), concurrency "
                                         "(N users at once, before/after), heavy (System View, Range Stats, search, "
                                         "Advice, Compare on 10 M slices), render (frame times in chromium), "
                                         "insights (late arrivals, critical path and SQL console answer times), "
                                         "scaling (a sharded ingest projected onto N nodes), bigtrace (one big "
                                         "trace: whole-file and byte-range reads, first window, beside the floor), "
                                         "phases (the Phases view's answers), firstview (a fresh browser's first "
                                         "Operator view, loopback and a throttled link), archives (hostile and "
                                         "honest uploads: the web process's time and RSS), strategy (the rank grid "
                                         "and verdicts of 1,024 ranks as they ingest), console-abuse (hostile SQL "
                                         "console load beside a prober), ready (how long a run takes to be ready "
                                         "in the server, its export formats side by side), memsnap (memory "
                                         "snapshot pickles of 100 MB to 5 GB, beside pickle.load) or csvcost (a "
                                         "rank's CSVs loaded, CPU per file and per MB)",
                           description="Run one benchmark; `ascendscope bench NAME --help` lists its options. "
                                       "Results are kept in docs/benchmarks.md.")
    bench.add_argument("name", nargs="?", default="suite",
                       choices=["suite", "ingest", "query", "concurrency", "heavy", "render", "insights", "scaling",
                                "bigtrace", "phases", "firstview", "archives", "strategy", "console-abuse",
                                "ready", "memsnap", "csvcost"])
    bench.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own options")
    import importlib

    for name, (module, text) in TOOLS.items():
        tool = sub.add_parser(name, help=text, description=text)
        importlib.import_module(f"ascendscope.{module}").add_arguments(tool)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _command(build_parser().parse_args(argv))
    except KeyboardInterrupt:  # Ctrl+C (uvicorn re-raises it once it has shut down): one line, no traceback
        print("stopped", file=sys.stderr)
        return 130


def _command(args: argparse.Namespace) -> int:
    if args.command == "ingest":
        from ascendscope.ingest import cli as ingest_cli

        return ingest_cli.run_ingest(args)
    if args.command == "bench":
        import importlib

        return importlib.import_module(f"ascendscope.bench.{args.name.replace('-', '_')}").main(args.options)
    if args.command in TOOLS:
        import importlib

        return importlib.import_module(f"ascendscope.{TOOLS[args.command][0]}").run(args)
    return serve(args)


def serve(args: argparse.Namespace) -> int:
    from ascendscope.server.runs import RunStore  # keeps `ascendscope ingest` light

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env(data_dir=args.data_dir, host=args.host, port=args.port, workers=args.workers,
                                     query_processes=args.query_processes, no_browser=args.no_browser,
                                     read_only=args.read_only, token=args.token, allowed_hosts=args.allowed_hosts,
                                     tls_cert=args.tls_cert, tls_key=args.tls_key, tls_client_ca=args.tls_client_ca)
        tls.check(settings)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    paths = [Path(p).expanduser() for p in args.paths]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"error: no such file or folder: {missing[0].resolve()}", file=sys.stderr)
        return 2
    store = RunStore(settings.data_dir)
    store.sweep()
    return _serve_runs(args, settings, store, paths)


def _serve_runs(args: argparse.Namespace, settings, store, paths: list[Path]) -> int:
    from ascendscope.server import webworkers

    if not paths and not store.list():
        sample = bundled_sample_path()
        if sample is not None:
            print(f"no runs yet: opening the bundled sample ({sample})", file=sys.stderr)
            paths = [sample]
    opened, empty = [], []
    for source in (s for path in paths for s in split_sources(path.resolve())):
        problem = _no_profiling_data(source)
        if problem:  # no run for it (a run that can only fail, and a URL that only shows the failure)
            print(f"error: {problem}", file=sys.stderr)
            empty.append(source)
            continue
        run = store.create_run_from_path(source)
        if run.status == "failed":  # opened again: ingested again, not a second run of the same source
            run = store.reset_for_retry(run.id)  # queued: the server process that leads the ingest queue takes it
        print(f"run {run.id}: {run.source} ({run.status})", file=sys.stderr)
        opened.append(run.id)
    if empty and not opened:
        return 2
    if not settings.token and not settings.read_only and not _is_loopback(settings.host):
        print(f"warning: serving on {settings.host} without --token: anyone who can reach this port can upload and "
              f"delete runs (add --token TOKEN or --read-only)", file=sys.stderr)
    if not settings.tls_cert and not _is_loopback(settings.host):
        print(f"warning: serving on {settings.host} over plain HTTP: the token, the session cookie and the data cross "
              f"the network in clear (add --tls-cert and --tls-key, or serve behind a TLS proxy)", file=sys.stderr)
    target = f"/runs/{opened[0]}/timeline" if len(opened) == 1 else "/"

    def announce(port: int) -> None:
        url = f"{tls.scheme(settings)}://{_display_host(settings.host)}:{port}{target}"
        if settings.token:
            url += f"?token={quote(settings.token, safe='')}"
        mode = " (read-only)" if settings.read_only else ""
        workers, queries = worker_count(settings), query_process_count(settings)
        helpers = f", {queries} query process{'es' if queries > 1 else ''} each" if queries else ""
        print(f"ascendscope is serving {settings.data_dir}{mode} at {url} ({workers} "
              f"process{'es' if workers > 1 else ''}{helpers})", file=sys.stderr, flush=True)
        if not settings.no_browser:
            webbrowser.open(url)

    return 0 if webworkers.run(settings, args.log_level, announce) else 1


def _no_profiling_data(source: Path) -> str | None:
    """Why a folder given to ``serve`` cannot make a run (``ingest.runsource``: the answer of the ingest, uploads
    and ``ascendscope.open``), or None. Archives and files are left to the ingest, which says what is wrong with
    them."""
    from ascendscope.ingest.runsource import NoProfilingData, find_run

    if not source.is_dir():
        return None
    try:
        find_run(source)
    except NoProfilingData as exc:
        return str(exc)
    return None


def split_sources(path: Path) -> list[Path]:
    """The runs a PATH opens: a folder of several runs (no rank folder at its top, and two or more subfolders or
    archives that hold profiling data) is one run per subfolder; anything else is one run. A multi-node cluster
    laid out as ``cluster/node*/rank*_ascend_pt`` is therefore opened per node: point at a flat folder of ranks
    to open it as one run."""
    from ascendscope.ingest.archive import is_archive
    from ascendscope.ingest.discover import is_rank_dir

    if not path.is_dir() or is_rank_dir(path):
        return [path]
    children = sorted(c for c in path.iterdir() if not c.name.startswith("."))
    if any(c.is_dir() and is_rank_dir(c) for c in children):
        return [path]
    runs = [c for c in children if is_archive(c) or (c.is_dir() and _holds_rank(c, SOURCE_SCAN_DEPTH))]
    return runs if len(runs) >= 2 else [path]


def _holds_rank(folder: Path, depth: int) -> bool:
    from ascendscope.ingest.discover import is_rank_dir

    if is_rank_dir(folder):
        return True
    if depth <= 0:
        return False
    try:
        subdirs = [c for c in folder.iterdir() if c.is_dir() and not c.is_symlink()]
    except OSError:
        return False
    return any(_holds_rank(c, depth - 1) for c in subdirs)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _display_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)


if __name__ == "__main__":
    sys.exit(main())
