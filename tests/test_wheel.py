"""The wheel, installed in a fresh venv, serves the bundled sample run from a folder far from the checkout, and its
Python API opens that run.

This is what a user who runs ``pip install ascendscope`` gets: no checkout on ``sys.path``, a ``server/`` folder of the
user's own in the working directory (which must not shadow ours), and the templates, static files, plotly, the
bundled run and the JupyterLab launcher icon all found inside the installed packages.
"""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.server.test_cli_serve import stop, wait_for

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with only the wheel built from this checkout installed in it. Its dependencies are those of
    the test environment, seen through a path entry (not as a site folder: its ``.pth`` files, among them the
    editable install of this checkout, are not run), and ``pip check`` proves the wheel's own requirements are
    met by them. (Installing them anew from pip's cache took most of a minute of every test run.)"""
    where = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            "--wheel-dir", str(where / "dist"), str(ROOT)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (where / "dist").glob("ascendscope-*.whl")
    venv.create(where / "venv", with_pip=False)
    python = where / "venv" / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    done = subprocess.run([*pip, "install", "--quiet", "--no-deps", str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    site = next((where / "venv" / "lib").glob("python3*/site-packages"))
    ours = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()))
    (site / "zz_test_dependencies.pth").write_text(f"{ours}\n")
    checked = subprocess.run([*pip, "check"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    found = subprocess.run([str(python), "-c", "import ascendscope; print(ascendscope.__file__)"],
                           capture_output=True, text=True, cwd=where)
    assert Path(found.stdout.strip()).is_relative_to(site), found  # the wheel's, never the checkout's
    return where / "venv" / "bin"


def test_the_wheel_holds_one_package(installed):
    site = next((installed.parent / "lib").glob("python3*/site-packages"))
    ours = {p.name for p in site.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))}
    assert "ascendscope" in ours
    assert not ours & {"server", "ingest", "frontend", "sample_data", "bench", "pyapi"}
    package = site / "ascendscope"
    assert (package / "__init__.py").exists() and (package / "run.py").exists()  # pyapi/ is ascendscope itself
    assert {"server", "ingest", "frontend", "sample_data", "bench"} <= {p.name for p in package.iterdir()}
    assert (package / "icon.svg").read_text().startswith("<svg")
    entry_points = next(site.glob("ascendscope-*.dist-info")) / "entry_points.txt"
    assert "ascendscope.jupyter:server_process" in entry_points.read_text()


def test_the_installed_api_opens_a_run_outside_the_checkout(installed, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "server").mkdir(parents=True)
    (elsewhere / "server" / "__init__.py").write_text("raise ImportError('the user’s own server package')\n")
    script = ("import ascendscope, sys\n"
              "from ascendscope import sample_data\n"
              "from pathlib import Path\n"
              "bundled = Path(sample_data.__file__).parent / 'bundled'\n"
              "run = ascendscope.open(bundled, data_dir=sys.argv[1], quiet=True)\n"
              "print(run.ranks, len(run.steps()), sorted({m.split('.')[0] for m in sys.modules} & "
              "{'fastapi', 'uvicorn', 'starlette', 'jinja2'}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run([str(installed / "python"), "-c", script, str(tmp_path / "data")], capture_output=True,
                         text=True, cwd=elsewhere, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[0, 1] 6 []"


def test_the_installed_wheel_serves_the_bundled_run_outside_the_checkout(installed, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "server").mkdir(parents=True)
    (elsewhere / "server" / "__init__.py").write_text("raise ImportError('the user’s own server package')\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen([str(installed / "ascendscope"), "serve", "--no-browser", "--port", str(port),
                             "--data-dir", str(tmp_path / "data"), "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=elsewhere, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        runs = wait_for(lambda: [r for r in httpx.get(f"{base}/api/runs", timeout=5).json()["runs"]
                                 if r["status"] in ("ready", "failed")], timeout_s=180)
        (run,) = runs
        assert run["status"] == "ready", run
        assert "sample_data" in run["source"] and str(ROOT) not in run["source"]
        tracks = httpx.get(f"{base}/api/runs/{run['id']}/timeline/tracks", timeout=10).json()
        assert tracks["ranks"] == [0, 1]
        page = httpx.get(f"{base}/runs/{run['id']}/timeline", timeout=10)
        assert page.status_code == 200 and 'id="timeline"' in page.text
        for asset in ("/static/js/timeline/main.js", "/vendor/plotly.min.js"):
            assert httpx.get(f"{base}{asset}", timeout=10).status_code == 200, asset
    finally:
        output = stop(proc)
    assert "ascendscope is serving" in output, output[-2000:]
