"""``ascendscope ingest PATH --out …``: a folder gets the sharded run, a ``.duckdb`` path one file; contradictory
arguments and a run of which no rank loads exit 2 with one line, no traceback.

The command runs in this process (``cli.main``, what the ``ascendscope`` entry point calls, its exit code
returned), its output captured: the same code as in a process of its own without the ~1.5 CPU-s of a fresh
interpreter and pool start each time; tests/ingest/test_ingest_cli.py runs it as a process."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendscope.ingest.shards import read_manifest
from tests.samples import SAMPLE_RUNS
from tests.shard_helpers import need, small_run


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return small_run(tmp_path_factory.mktemp("gen"))


@pytest.fixture
def cli(capsys):
    """``cli(*args)`` runs ``ascendscope ingest ARGS``: ``(exit code, stdout, stderr)``."""
    from ascendscope.server import cli as server_cli

    def run(*args):
        capsys.readouterr()
        try:
            code = server_cli.main(["ingest", *map(str, args)])
        except SystemExit as exc:  # (argparse's own refusals)
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_writes_a_run_folder_or_one_file(cli, generated, tmp_path):
    code, out, err = cli(generated, "--out", tmp_path / "run", "--workers", "2")
    assert code == 0, err
    assert "shards: 1 ready, 0 failed" in out and "ranks: 0, 1, 2" in out
    assert [e["status"] for e in read_manifest(tmp_path / "run")["shards"]] == ["ready"]
    code, out, err = cli(generated, "--out", tmp_path / "one.duckdb", "--quiet")
    assert code == 0, err
    assert (tmp_path / "one.duckdb").is_file() and "shards:" not in out


def test_cli_writes_a_run_folder_of_a_db_export_without_text_files(cli, tmp_path):
    """A run of db exports only (no CSV beside them, so the small files' pass writes nothing before its tables):
    the folder the server writes, through the CLI (exited 2 with a missing scratch file before)."""
    code, out, err = cli(need(SAMPLE_RUNS["db_level1"]), "--out", tmp_path / "run")
    assert code == 0, err
    assert " ready, 0 failed" in out and "ranks: 0, 1\n" in out


@pytest.mark.parametrize("args", [("--ray-address", "head:6379"), ("--executor", "ray", "--out", "x.duckdb"),
                                  ("--workers", "0")])
def test_cli_refuses_contradictory_arguments(cli, generated, tmp_path, args):
    out = () if "--out" in args else ("--out", tmp_path / "run")
    code, _, err = cli(generated, *out, *args)
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err


def test_cli_exits_2_when_no_rank_loads(cli, generated, tmp_path):
    (tmp_path / "run" / "shards" / "ranks_00000-00002.duckdb" / "x").mkdir(parents=True)
    code, out, err = cli(generated, "--out", tmp_path / "run", "--workers", "2")
    assert code == 2 and "no rank could be loaded" in err
    assert "shards: 0 ready, 1 failed" in out and "[ranks 0–2] not loaded: " in out
