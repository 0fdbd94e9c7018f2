"""``ascendscope ingest``: progress, summary, exit codes, atomic output."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

from ascendscope.ingest import SCHEMA_VERSION
from tests.ingest_helpers import PYTORCH_TEXT, REAL

pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/real_samples is not beside the checkout")


def _run(*args):
    return subprocess.run([sys.executable, "-m", "ascendscope.server.cli", *args], capture_output=True, text=True)


def test_ingest_prints_progress_and_summary(tmp_path):
    out = tmp_path / "run.duckdb"
    proc = _run("ingest", str(PYTORCH_TEXT / "level1"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "trace_view.json" in proc.stderr and "MB/s" in proc.stderr  # per-file progress (not a tty)
    assert "ranks: 0, 1" in proc.stdout
    assert "slices per kind: cann" in proc.stdout and "hardware" in proc.stdout and "python" in proc.stdout
    for cat in ("HostToDevice", "async_npu", "async_task_queue", "fwdbwd"):
        assert cat in proc.stdout
    assert "warnings: 0" in proc.stdout
    assert not list(tmp_path.glob("*.tmp-*"))
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    con.close()


@pytest.mark.parametrize("out", ["run.duckdb", "run"])
def test_ingest_quiet_says_one_line(tmp_path, out):
    proc = _run("ingest", str(PYTORCH_TEXT / "level0"), "--out", str(tmp_path / out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    (line,) = proc.stdout.splitlines()
    assert line.startswith(f"wrote {tmp_path / out} in ") and ": 2 rank(s), " in line and " slices, " in line


def test_ingest_bad_path_exits_2_without_traceback(tmp_path):
    proc = _run("ingest", str(tmp_path / "nope"), "--out", str(tmp_path / "x.duckdb"))
    assert proc.returncode == 2
    assert "no such file or folder" in proc.stderr and "Traceback" not in proc.stderr


def test_ingest_replaces_an_existing_file_atomically(tmp_path):
    out = tmp_path / "run.duckdb"
    out.write_bytes(b"old")
    proc = _run("ingest", str(PYTORCH_TEXT / "level0" / "rank1_ascend_pt"), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT list(rank) FROM ranks").fetchone()[0] == [1]
    con.close()
