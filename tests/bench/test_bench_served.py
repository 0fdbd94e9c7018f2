"""The load benchmarks' "before" server imports the older checkout's code, not this working tree's, although this
environment has the package installed in editable mode (whose finder maps ``ascendscope.*`` to the tree)."""
from __future__ import annotations

import os
import subprocess
import sys

from ascendscope.bench.served import PACKAGES, shim_for


def test_a_checkout_behind_the_shim_is_the_one_imported(tmp_path):
    checkout = tmp_path / "old"
    for name in PACKAGES + ("pyapi",):
        (checkout / name).mkdir(parents=True)
        (checkout / name / "__init__.py").write_text(f"WHERE = 'old {name}'\n")
    env = dict(os.environ, PYTHONPATH=str(shim_for(checkout)))
    code = ("import ascendscope, ascendscope.ingest, ascendscope.server; "
            "print(ascendscope.WHERE, '|', ascendscope.ingest.WHERE, '|', ascendscope.server.WHERE)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    assert out.stdout.split() == ["old", "pyapi", "|", "old", "ingest", "|", "old", "server"]
