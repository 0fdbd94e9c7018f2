"""What the ``report``, ``compare``, ``history`` and ``export`` subcommands share: opening the runs they are given
(any path ``ascendscope.open`` takes) with one clear line when that fails, and the exit codes.

Exit codes: 0 done (a gate passed), 1 a ``--fail-if`` condition held (``compare``), 2 bad arguments or a run that
cannot be opened; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import sys

import duckdb

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad argument or an unopenable run: printed as ``error: …`` and exit code 2."""


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None,
                        help="where profiling data given as RUN is ingested (default $ASCENDSCOPE_DATA_DIR or "
                             "~/.ascendscope, as serve)")


def open_run(path: str, data_dir: str | None):
    """``ascendscope.open(path)``, or :class:`UsageError` saying why not."""
    import ascendscope
    from ascendscope.server.schema_check import OutdatedDatabase

    try:
        return ascendscope.open(path, data_dir=data_dir)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except (ascendscope.IngestFailed, OutdatedDatabase, TimeoutError, duckdb.Error, OSError) as exc:
        raise UsageError(f"{path}: {exc}") from None


def run_command(body, args: argparse.Namespace) -> int:
    """Run a subcommand body, turning a :class:`UsageError` into ``error: …`` and exit code 2."""
    try:
        return body(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
