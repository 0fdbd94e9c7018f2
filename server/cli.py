"""``ascendscope``: ``serve`` the dashboard (ingesting the given paths first) or ``ingest`` one path to a file.

    ascendscope serve [PATH ...] [--host 127.0.0.1] [--port 8000] [--data-dir DIR] [--no-browser]
    ascendscope ingest PATH --out FILE.duckdb

``serve`` turns each PATH into a run (an unchanged source that was already ingested is reused) and ingests it
in a worker process while the server is already up; with no PATH and an empty data dir it loads the bundled
sample. The data dir is ``--data-dir``, else ``$ASCENDSCOPE_DATA_DIR``, else ``~/.ascendscope``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
import webbrowser
from pathlib import Path

from server.settings import Settings, settings_help


def bundled_sample_path() -> Path | None:
    """``sample_data/bundled`` inside the installed ``sample_data`` package, if it is there."""
    try:
        import sample_data  # noqa: PLC0415
    except ImportError:
        return None
    path = Path(sample_data.__file__).resolve().parent / "bundled"
    return path if path.exists() and any(path.iterdir()) else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascendscope", description="Ascend NPU profiling dashboard.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{serve,ingest}")

    serve = sub.add_parser("serve", help="serve the dashboard (ingesting PATHs first)",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="environment variables:\n" + settings_help())
    serve.add_argument("paths", nargs="*", metavar="PATH",
                       help="profiling folders (*_ascend_pt, a folder of ranks, an archive) to open as runs")
    serve.add_argument("--host", default=None, help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="TCP port (default 8000; 0 picks a free one)")
    serve.add_argument("--data-dir", default=None, help="where runs are stored (default ~/.ascendscope)")
    serve.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    ingest = sub.add_parser("ingest", help="ingest one path into a DuckDB file")
    from ingest import cli as ingest_cli  # noqa: PLC0415 - the ingest CLI owns its arguments

    ingest_cli.add_arguments(ingest)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "ingest":
        from ingest import cli as ingest_cli  # noqa: PLC0415

        return ingest_cli.run_ingest(args)
    return serve(args)


def serve(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415 - keeps `ascendscope ingest` light

    from server.app import create_app  # noqa: PLC0415
    from server.runs import IngestQueue, RunStore  # noqa: PLC0415

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env(data_dir=args.data_dir, host=args.host, port=args.port)
    store = RunStore(settings.data_dir)
    queue = IngestQueue(store)
    queue.start(resume=True)

    paths = list(args.paths)
    if not paths and not store.list():
        sample = bundled_sample_path()
        if sample is not None:
            print(f"no runs yet: opening the bundled sample ({sample})", file=sys.stderr)
            paths = [str(sample)]
    opened = []
    for path in paths:
        try:
            run = store.create_run_from_path(path)
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if run.status in ("queued", "failed"):
            queue.enqueue(run.id)
        print(f"run {run.id}: {run.source} ({run.status})", file=sys.stderr)
        opened.append(run.id)

    app = create_app(settings, store=store, ingest_queue=queue)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=args.log_level,
                            access_log=args.log_level == "debug")
    server = uvicorn.Server(config)
    target = f"/runs/{opened[0]}/timeline" if len(opened) == 1 else "/"

    def announce() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if not server.started:
            return
        port = _bound_port(server) or settings.port
        url = f"http://{_display_host(settings.host)}:{port}{target}"
        print(f"ascendscope is serving {settings.data_dir} at {url}", file=sys.stderr, flush=True)
        if not args.no_browser:
            webbrowser.open(url)

    threading.Thread(target=announce, name="ascendscope-announce", daemon=True).start()
    try:
        server.run()
    finally:
        queue.stop()
    return 0 if server.started else 1


def _bound_port(server) -> int | None:
    for srv in getattr(server, "servers", []) or []:
        for sock in getattr(srv, "sockets", []) or []:
            return sock.getsockname()[1]
    return None


def _display_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)


if __name__ == "__main__":
    sys.exit(main())
