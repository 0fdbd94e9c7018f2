"""The README's "From Python / Jupyter / CI" examples run as written: every fenced block after an
``<!-- example -->`` line is extracted and run (Python with this interpreter, bash with ``ascendscope`` on the
PATH) in a folder beside ``sample_data/``, with a data folder of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- example -->\s*\n```(python|bash)\n(.*?)\n```", re.S)


def examples() -> list[tuple[str, str]]:
    return BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_readme_has_its_examples():
    kinds = [k for k, _ in examples()]
    assert kinds.count("python") >= 2 and kinds.count("bash") >= 1


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("readme")
    (work / "sample_data").symlink_to(ROOT / "sample_data")
    env = {**os.environ, "ASCENDSCOPE_DATA_DIR": str(work / "data"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return work, env


@pytest.mark.parametrize("index", range(len(examples())))
def test_each_example_runs(workdir, index):
    work, env = workdir
    kind, code = examples()[index]
    command = [sys.executable, "-c", code] if kind == "python" else ["bash", "-euo", "pipefail", "-c", code]
    out = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"README example {index} ({kind}) failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    if "run.ranks" in code:
        assert "[0, 1]" in out.stdout
        assert (work / "kernels.parquet").is_file() and (work / "rank0.json").is_file()
    if "run.show" in code:
        assert out.stdout.count("IFrame") == 2
    if "ascendscope compare" in code:
        assert "PASS: 2 check(s)" in out.stdout and "FAIL: 1 of 1 check(s) failed" in out.stdout
        assert "the gate failed: exit 1" in out.stdout and "▲" in out.stdout
        for name in ("report.html", "report.md", "kernels.csv", "trace.json"):
            assert (work / name).stat().st_size > 0
