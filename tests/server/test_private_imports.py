"""The server uses other modules through their public names only: ``from x import _helper`` ties a caller to
what its module may change freely (a leading underscore says so)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[2] / "server"


def private_imports(source: str) -> list[tuple[int, str]]:
    """(line, "module.name") of every ``from module import _name`` (a private module itself, ``from . import
    _x``, is still a module: it counts too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"{node.module or '.'}.{alias.name}") for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


@pytest.mark.parametrize("source, expected", [
    ("from ascendscope.ingest.discover import _is_rank_dir\n", [(1, "ascendscope.ingest.discover._is_rank_dir")]),
    ("def f():\n    from .timeline import _intern, viewport\n", [(2, "timeline._intern")]),
    ("from __future__ import annotations\nfrom x import public\n", []),
])
def test_the_check_finds_private_imports(source, expected):
    assert private_imports(source) == expected


def test_server_modules_import_only_public_names():
    offenders = [f"{path.relative_to(SERVER.parent)}:{line}: {name}"
                 for path in sorted(SERVER.rglob("*.py")) for line, name in private_imports(path.read_text())]
    assert not offenders, "make these public (or keep them in their module):\n" + "\n".join(offenders)
