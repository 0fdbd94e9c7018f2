"""The code imports itself as ``ascendscope.*`` only, and the wheel's package list covers every folder it ships.

The folders ``server/``, ``ingest/``, ``frontend/``, ``sample_data/`` and ``bench/`` sit at the top of the checkout but
install as ``ascendscope.server`` and so on, and ``pyapi/`` is the ``ascendscope`` package itself (setuptools
``package-dir``). A bare ``import server`` would work from the checkout by accident and break (or pick up someone
else's ``server``) once installed.
"""
from __future__ import annotations

import ast
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("server", "ingest", "frontend", "sample_data", "bench")
PACKAGE_ROOT = "pyapi"  # the folder of `ascendscope` itself
SCANNED = (PACKAGE_ROOT, *TOP, "tests")


def package_of(folder: Path) -> str:
    """``server/api`` -> ``ascendscope.server.api``; ``pyapi`` -> ``ascendscope``."""
    parts = folder.parts[1:] if folder.parts[0] == PACKAGE_ROOT else folder.parts
    return ".".join(("ascendscope", *parts))


def folder_of(package: str) -> Path:
    parts = package.split(".")[1:]
    return Path(*parts) if parts else Path(PACKAGE_ROOT)


def python_files():
    for top in SCANNED:
        yield from sorted(p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def bare_imports(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in (*TOP, PACKAGE_ROOT)]
    return found


@pytest.mark.parametrize("source, expected", [
    ("import server\n", [(1, "server")]),
    ("from ingest.pipeline import run\n", [(1, "ingest.pipeline")]),
    ("def f():\n    import bench.synth\n", [(2, "bench.synth")]),
    ("from pyapi import run\n", [(1, "pyapi")]),
    ("from ascendscope.server import app\nimport ascendscope.ingest\nfrom . import x\nimport serverless\n", []),
])
def test_the_check_finds_bare_imports(source, expected):
    assert bare_imports(source) == expected


def test_no_module_imports_a_bare_top_level_package():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {name}"
                 for path in python_files() for line, name in bare_imports(path.read_text())]
    assert not offenders, "import these as ascendscope.<package>:\n" + "\n".join(offenders)


def test_every_shipped_folder_is_in_the_package_list():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = config["package-dir"]
    assert mapping == {"ascendscope": PACKAGE_ROOT, **{f"ascendscope.{top}": top for top in TOP}}
    listed = set(config["packages"])
    tracked = subprocess.run(["git", "ls-files", PACKAGE_ROOT, *TOP], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    needed = {package_of(Path(name).parent) for name in tracked.stdout.splitlines()}
    assert listed >= needed, "folders the wheel would leave out"
    missing = [name for name in listed if not (ROOT / folder_of(name)).is_dir()]
    assert not missing, "packages listed that have no folder"
