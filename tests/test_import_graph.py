"""No import cycles among the ``ascendscope.*`` modules.

Every import counts, at module level or inside a function: a lazy import only postpones a loop, it does not remove
it. The graph is built from the source with :mod:`ast` (relative imports resolved against the importing module's
package), so nothing is imported to check it. ``from package import name`` points at ``package.name`` when that is a
module, else at ``package``.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("server", "ingest", "frontend", "sample_data", "bench")
PACKAGE_ROOT = "pyapi"  # the folder of `ascendscope` itself


def module_files() -> dict[str, Path]:
    """``ascendscope.x.y`` -> its file, for every Python file the package ships."""
    found = {}
    for top in (PACKAGE_ROOT, *TOP):
        for path in (ROOT / top).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[0] == PACKAGE_ROOT:
                parts.pop(0)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["ascendscope", *parts])] = path
    return found


def imports_of(name: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The ``ascendscope`` modules ``source`` (the text of module ``name``) imports anywhere in its body."""
    package = name if is_package else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                targets.add(submodule if submodule in known else module)
    found = set()
    for target in targets:
        while target and target not in known:  # `import a.b.c` where only a.b is ours: the nearest known module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imports_of(name, path.read_text(), path.name == "__init__.py", known)
            for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}, "f": {"g"}, "g": {"f"}}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["f", "g"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports():
    known = {"ascendscope.server.runs", "ascendscope.server.worker", "ascendscope.server.api",
             "ascendscope.server.api.timeline"}
    source = ("from . import runs\n"
              "def later():\n    from ascendscope.server.api import timeline\n"
              "    from .api import ApiError\n"
              "    import ascendscope.server.worker.thing\n")
    assert imports_of("ascendscope.server.db", source, False, known) == known


def test_the_graph_covers_the_package():
    graph = import_graph()
    assert "ascendscope.server.worker" in graph
    assert "ascendscope.server.runs" in graph["ascendscope.server.worker"]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (make each dependency one-way):\n" + "\n".join(" <-> ".join(c) for c in found)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``ingest -> server`` imports: ingest runs without the web layer (a worker, the Python API, Ray tasks), so
    what both need lives in ingest or in a module neither owns (STYLE.md)."""
    return sorted(f"{name} -> {target}" for name, targets in graph.items() if name.startswith("ascendscope.ingest")
                  for target in targets if target.startswith("ascendscope.server"))


def test_the_layer_check_sees_an_ingest_module_importing_the_server():
    graph = {"ascendscope.ingest.cluster": {"ascendscope.server.queries.summary", "ascendscope.ingest.jsonfile"},
             "ascendscope.server.queries.summary": {"ascendscope.ingest.breakdown"}}
    assert layer_violations(graph) == ["ascendscope.ingest.cluster -> ascendscope.server.queries.summary"]


def test_ingest_never_imports_the_server():
    found = layer_violations(import_graph())
    assert not found, "ingest/ must not import server/ (move what both need to ingest/):\n" + "\n".join(found)
