"""Every command in the README and the docs holds.

* Every fenced block after an ``<!-- example -->`` line (README.md, docs/*.md) is run as written (Python with this
  interpreter, bash with ``ascendscope`` on the PATH) in a folder beside ``sample_data/``, with a data folder of its
  own. Each Python example also runs the ways a user without a notebook runs it, each on a fresh data folder (so it
  ingests): saved as a script file (no ``if __name__ == "__main__":`` guard) and piped on stdin.
* Every other ``bash`` block's commands are checked without running them (a benchmark takes minutes to hours, a
  server runs until stopped): each ``ascendscope`` subcommand or ``python -m`` module is asked for its ``--help`` and
  must know every option the command gives; ``scripts/*.sh`` must exist (``serve.sh`` passes its options to
  ``ascendscope serve``, ``test.sh`` its paths to pytest); ``pip install -e '.[extras]'`` must name extras of
  pyproject.toml; ``curl`` must ask for a route of the app; ``docker run`` must end in a valid ``ascendscope``
  command. A program not in this list fails the test, so a new kind of command gets a check of its own.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- example -->\s*\n)?```(python|bash)\n(.*?)\n```", re.S)
NOT_CHECKED = {"git", "ray"}  # other projects' commands: their options are theirs


def blocks() -> list[tuple[str, bool, str, str]]:
    """(file, is an example, language, code) of every python or bash block of the docs."""
    out = []
    for path in DOCS:
        for example, kind, code in BLOCK.findall(path.read_text(encoding="utf-8")):
            out.append((path.relative_to(ROOT).as_posix(), bool(example), kind, code))
    return out


def examples() -> list[tuple[str, str, str]]:
    return [(where, kind, code) for where, example, kind, code in blocks() if example]


def commands() -> list[tuple[str, list[str]]]:
    """(file, argv) of each command of the bash blocks that are not run: continuation lines joined, comments and
    output redirections dropped, pipelines and lists split."""
    out = []
    for where, example, kind, code in blocks():
        if example or kind != "bash":
            continue
        for line in code.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            argv: list[str] = []
            for word in [*words, "&&"]:
                if word in ("&&", "||", "|", ";"):
                    if argv:
                        out.append((where, argv))
                    argv = []
                else:
                    argv.append(word)
    return out


def test_the_docs_have_their_examples():
    readme = [kind for where, kind, _ in examples() if where == "README.md"]
    assert "python" in readme and "bash" in readme
    everywhere = [kind for _, kind, _ in examples()]
    assert everywhere.count("python") >= 3 and everywhere.count("bash") >= 2


def fresh_workdir(root: Path) -> tuple[Path, dict]:
    work = root / "work"
    work.mkdir()
    (work / "sample_data").symlink_to(ROOT / "sample_data")
    env = {**os.environ, "ASCENDSCOPE_DATA_DIR": str(root / "data"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return work, env


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> tuple[Path, dict]:
    return fresh_workdir(tmp_path_factory.mktemp("readme"))


@pytest.mark.parametrize("index", range(len(examples())))
def test_each_example_runs(workdir, index):
    work, env = workdir
    where, kind, code = examples()[index]
    command = [sys.executable, "-c", code] if kind == "python" else ["bash", "-euo", "pipefail", "-c", code]
    out = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    check_example(where, index, kind, code, out, work)


PYTHON_EXAMPLES = [i for i, (_, kind, _) in enumerate(examples()) if kind == "python"]


@pytest.mark.parametrize("how", ["file", "stdin"])
@pytest.mark.parametrize("index", PYTHON_EXAMPLES)
def test_each_python_example_runs_as_a_script_on_a_fresh_data_dir(tmp_path, index, how):
    """As a user saves and runs it: a file without a main guard, or piped into ``python -``; it ingests first."""
    work, env = fresh_workdir(tmp_path)
    where, kind, code = examples()[index]
    script = work / "example.py"
    script.write_text(code + "\n", encoding="utf-8")
    command = [sys.executable, script.name] if how == "file" else [sys.executable, "-"]
    out = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600,
                         input=code + "\n" if how == "stdin" else None)
    check_example(where, index, kind, code, out, work)
    assert "ingesting" in out.stderr  # (it did not find the run already there)


def check_example(where: str, index: int, kind: str, code: str, out: subprocess.CompletedProcess, work: Path) -> None:
    assert out.returncode == 0, f"{where} example {index} ({kind}) failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    if "run.ranks" in code:
        assert "[0, 1]" in out.stdout
    if 'run.export("kernels"' in code:
        assert (work / "kernels.parquet").is_file() and (work / "rank0.json").is_file()
    if "run.show" in code:
        assert out.stdout.count("IFrame") == 2
    if "ascendscope compare" in code:
        assert "PASS: 2 check(s)" in out.stdout and "FAIL: 1 of 1 check(s) failed" in out.stdout
        assert "the gate failed: exit 1" in out.stdout and "▲" in out.stdout
        for name in ("report.html", "report.md", "kernels.csv", "trace.json"):
            assert (work / name).stat().st_size > 0
    if "ascendscope report" in code:
        assert (work / "report.html").stat().st_size > 0


@functools.cache
def help_of(*args: str) -> str:
    """``ascendscope ARGS --help``, in this process (each subcommand's parser, bench modules included)."""
    from ascendscope.server import cli

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        cli.main([*args, "--help"])
    return buf.getvalue()


def options(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", a)]


def check_ascendscope(argv: list[str]) -> None:
    """argv after ``ascendscope``: the subcommand (``bench NAME`` for a benchmark) must know every option."""
    sub = argv[:2] if argv[0] == "bench" and len(argv) > 1 and not argv[1].startswith("-") else argv[:1]
    text = help_of(*sub)
    assert text.startswith("usage: ascendscope " + " ".join(sub)), f"ascendscope {' '.join(sub)}: {text[:200]}"
    for opt in options(argv[len(sub):]):
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), f"ascendscope {' '.join(sub)} has no {opt}"


@functools.cache
def routes() -> list[re.Pattern]:
    from ascendscope.server.app import create_app

    return [re.compile(re.sub(r"\{[^}]+\}", "[^/]+", path) + "$") for path in create_app().openapi()["paths"]]


def check(argv: list[str]) -> None:
    prog = Path(argv[0]).name
    if prog == "ascendscope":
        check_ascendscope(argv[1:])
    elif prog.startswith("python") and argv[1] == "-m" and argv[2] == "pip":
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        for spec in argv[3:]:
            if m := re.fullmatch(r"\.\[([\w,-]+)\]", spec):
                assert set(m.group(1).split(",")) <= set(extras), f"unknown extras in {spec}"
    elif prog.startswith("python") and argv[1] == "-m":
        module = argv[2]
        assert module.startswith("ascendscope.bench."), f"python -m {module}: not checked"
        check_ascendscope(["bench", module.rsplit(".", 1)[1], *argv[3:]])
    elif prog == "bash":
        script = ROOT / argv[1]
        assert script.is_file(), f"no {argv[1]}"
        if argv[1] == "scripts/serve.sh":
            check_ascendscope(["serve", *argv[2:]])
        elif argv[1] == "scripts/test.sh":
            for arg in argv[2:]:
                assert arg.startswith("-") or (ROOT / arg).exists(), f"scripts/test.sh: no {arg}"
    elif prog == "docker":
        if argv[1] == "build":
            assert (ROOT / "Dockerfile").is_file()
        else:
            assert argv[1] == "run" and "ascendscope" in argv, argv
            check_ascendscope(argv[len(argv) - argv[::-1].index("ascendscope"):])
    elif prog == "curl":
        path = urlsplit(next(a for a in argv if a.startswith("http"))).path
        assert any(r.match(path) for r in routes()), f"no route for {path}"
    else:
        assert prog in NOT_CHECKED, f"a command of a program the test does not check: {' '.join(argv)}"


def test_every_command_in_the_docs_is_valid():
    found = commands()
    assert any(argv[:2] == ["bash", "scripts/serve.sh"] for _, argv in found)
    assert any(where == "docs/benchmarks.md" and "bench" in argv for where, argv in found)
    for where, argv in found:
        try:
            check(argv)
        except AssertionError as err:
            raise AssertionError(f"{where}: {' '.join(argv)}: {err}") from None
