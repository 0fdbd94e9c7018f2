"""``ascendscope compare A B --fail-if …`` (exit codes, messages, bad expressions) and ``ascendscope history``
(metrics in order, the jump flagged), on generated runs whose steps differ."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import ascendscope
from ascendscope.commands import UsageError
from ascendscope.gate import parse
from ascendscope.metrics import compute
from ascendscope.server.cli import main


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> list:
    """Four nightly runs: three alike, then one with a third more ops per step (a slower step)."""
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.sample_data.generate import generate_run

    root = tmp_path_factory.mktemp("nightly")
    out = []
    for i, ops in enumerate((120, 121, 120, 170)):
        generate_run(root / f"src{i}", ranks=2, steps=3, ops_per_step=ops, seed=11)
        db = root / f"night{i + 1}.duckdb"
        ingest_path(root / f"src{i}", db)
        out.append(db)
    return out


@pytest.fixture(scope="module")
def numbers(series) -> list[dict]:
    result = []
    for db in series:
        with ascendscope.open(db) as run:
            result.append(compute(run))
    return result


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(map(str, args)))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_slower_run_is_slower(numbers):
    a, b = numbers[0], numbers[3]
    assert b["step_time"] > 1.1 * a["step_time"]
    assert a["steps"] == b["steps"] == 3 and a["top_kernel_name"]


def test_a_regression_fails_the_gate_with_a_readable_diff(capsys, series, numbers):
    a, b = numbers[0], numbers[3]
    code, out, _ = cli(capsys, "compare", series[0], series[3], "--fail-if", "step_time>+5%",
                       "--fail-if", "steps>+50%")
    assert code == 1
    rel = (b["step_time"] - a["step_time"]) / a["step_time"]
    assert f"step_time>+5%: FAILED: step_time {a['step_time'] / 1e6:,.3f} ms → {b['step_time'] / 1e6:,.3f} ms " \
           f"({100 * rel:+.1f}%)" in out
    assert "steps>+50%: ok" in out
    assert "FAIL: 1 of 2 check(s) failed" in out
    assert "night1" in out and "night4" in out and "kernels that changed most" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("step_time "))
    assert line.rstrip().endswith("✗")


def test_the_same_run_passes_and_thresholds_work_both_ways(capsys, series, numbers):
    code, out, _ = cli(capsys, "compare", series[0], series[0], "--fail-if", "step_time>+5%",
                       "--fail-if", "exposed_comm>+10%", "--fail-if", "free>+1ms")
    assert code == 0 and "PASS: 3 check(s)" in out
    a, b = numbers[0], numbers[3]
    rel = 100 * (b["step_time"] - a["step_time"]) / a["step_time"]
    above = f"step_time>+{rel + 1:.0f}%"
    assert cli(capsys, "compare", series[0], series[3], "--fail-if", above)[0] == 0
    # B's own value, and a change in ms
    limit_ms = b["step_time"] / 1e6 - 0.5
    assert cli(capsys, "compare", series[0], series[3], "--fail-if", f"step_time>{limit_ms:.3f}ms")[0] == 1
    assert cli(capsys, "compare", series[0], series[3], "--fail-if", "step_time<-1ms")[0] == 0
    assert cli(capsys, "compare", series[3], series[0], "--fail-if", "step_time<-5%")[0] == 1  # B got faster


def test_json_output(capsys, series):
    code, out, _ = cli(capsys, "compare", series[0], series[3], "--fail-if", "step_time>+5%", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["passed"] is False and doc["checks"][0]["failed"] is True
    assert doc["b"]["step_time"] > doc["a"]["step_time"] and doc["kernels"]


@pytest.mark.parametrize("expr, message", [
    ("step_time>>5%", "expected METRIC OP VALUE"),
    ("steptime>+5%", "no metric 'steptime'"),
    ("step_time>5%", "not a ratio"),
    ("step_time>5", "give a unit"),
    ("step_time>+5parsecs", "unknown unit"),
    ("peak_reserved_mb>+5ms", "measured in mb"),
    ("", "expected METRIC OP VALUE"),
])
def test_bad_expressions_exit_2_before_opening_anything(capsys, expr, message):
    code, out, err = cli(capsys, "compare", "/nonexistent/a", "/nonexistent/b", "--fail-if", expr)
    assert code == 2 and out == ""
    assert err.startswith("error: bad --fail-if") and message in err, err


def test_expressions_parse():
    c = parse("exposed_comm >= +2.5ms")
    assert (c.metric, c.op, c.kind, c.threshold) == ("exposed_comm", ">=", "delta", 2.5e6)
    assert parse("free_ratio>20%").threshold == pytest.approx(0.2) and parse("free_ratio>20%").kind == "value"
    assert parse("step_time<-3%").threshold == pytest.approx(-0.03)
    assert parse("peak_reserved_mb>1GB").threshold == 1024.0
    with pytest.raises(UsageError):
        parse("step_time=5%")


def test_a_missing_run_or_metric(capsys, series, tmp_path):
    code, _, err = cli(capsys, "compare", series[0], tmp_path / "gone")
    assert code == 2 and "no such file or folder" in err
    # a run without memory data: a condition on it cannot pass silently
    import duckdb

    bare = tmp_path / "bare.duckdb"
    bare.write_bytes(series[1].read_bytes())
    with duckdb.connect(str(bare)) as con:
        con.execute("DELETE FROM memory_record")
    code, out, _ = cli(capsys, "compare", series[0], bare, "--fail-if", "peak_reserved_mb>+5%")
    assert code == 1 and "cannot be checked: peak_reserved_mb is missing in B" in out


def test_history_flags_the_jump(capsys, series, numbers):
    code, out, _ = cli(capsys, "history", *series)
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[1] for line in lines[1:5]] == ["night1", "night2", "night3", "night4"]
    assert "▲" in lines[4] and "▲" not in "".join(lines[1:4])
    rel = (numbers[3]["step_time"] - numbers[2]["step_time"]) / numbers[2]["step_time"]
    assert f"night4: step_time {100 * rel:+.1f}%" in out
    code, out, _ = cli(capsys, "history", *series, "--format", "json", "--metric", "step_time",
                       "--threshold", "50%")
    doc = json.loads(out)
    assert [r["name"] for r in doc["runs"]] == ["night1", "night2", "night3", "night4"]
    assert all(r["jumps"]["step_time"] is None for r in doc["runs"])  # nothing moved 50%
    code, out, _ = cli(capsys, "history", *series, "--format", "csv")
    assert out.splitlines()[0].startswith("run,id,step_time,exposed_comm,free,top_kernel")
    assert len(out.splitlines()) == 5


def test_the_console_script_exit_codes(series):
    exe = [sys.executable, "-m", "ascendscope.server.cli"]
    slow = subprocess.run([*exe, "compare", str(series[0]), str(series[3]), "--fail-if", "step_time>+5%"],
                          capture_output=True, text=True, timeout=300)
    assert slow.returncode == 1 and "FAIL:" in slow.stdout
    bad = subprocess.run([*exe, "compare", "a", "b", "--fail-if", "nope"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "error: bad --fail-if" in bad.stderr and "Traceback" not in bad.stderr
