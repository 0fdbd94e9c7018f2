"""A clone named ``ascendscope``, with Python started in the folder above it (which comes first on ``sys.path``):
``import ascendscope`` finds the clone, which must then be the package (``__init__.py`` at the checkout's root),
not an empty namespace package (``module 'ascendscope' has no attribute 'open'``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """\
import ascendscope
import ascendscope.server.cli
from ascendscope.run import Run
print(callable(ascendscope.open), ascendscope.IngestFailed.__name__, Run.__name__)
print(ascendscope.__file__)
"""


def test_a_script_beside_a_clone_named_ascendscope_gets_the_package(tmp_path):
    (tmp_path / "ascendscope").symlink_to(ROOT, target_is_directory=True)
    (tmp_path / "analyze.py").write_text(SCRIPT, encoding="utf-8")
    out = subprocess.run([sys.executable, "analyze.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    first, where = out.stdout.splitlines()
    assert first == "True IngestFailed Run"
    assert Path(where) == tmp_path / "ascendscope" / "__init__.py"  # (the clone was what got imported)
