"""ascendscope behind a real Jupyter server with jupyter-server-proxy (the ``[jupyter]`` extra), under a
JupyterHub-like base URL: the launcher entry is listed, Jupyter's token guards the dashboard, every page works
under the prefix in chromium (no request leaves it, no console error), and ``Run.show``'s IFrame displays a view
inside a page of Jupyter's origin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.browser_helpers import OpenRequests, settle
from tests.conftest import free_port

pytest.importorskip("jupyter_server_proxy", reason="the [jupyter] extra is not installed")

BASE = "/user/tester/"
TOKEN = "jupyter-test-token"
PREFIX = f"{BASE}ascendscope/"


def _get(url: str, timeout: float = 5.0):
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:  # not listening yet
        return 0, b""


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory, runs):
    """A Jupyter server (token, base URL /user/tester/) whose proxy serves ascendscope over a data dir holding the
    generated run; yields (origin, run id)."""
    root = tmp_path_factory.mktemp("jupyter")
    data_dir = root / "ascendscope-data"
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    run = store.create_run("generated", "generated")
    shutil.copy(runs.dbs["generated"], store.db_path(run.id))
    store.set_status(run.id, "ready")
    port = free_port()
    env = {**os.environ, "ASCENDSCOPE_DATA_DIR": str(data_dir), "JUPYTER_CONFIG_DIR": str(root / "config"),
           "JUPYTER_DATA_DIR": str(root / "data"), "JUPYTER_RUNTIME_DIR": str(root / "runtime")}
    exe = Path(sys.executable).with_name("jupyter-server")
    log = open(root / "jupyter.log", "w")
    proc = subprocess.Popen([str(exe), "--no-browser", "--allow-root", "--ip", "127.0.0.1", "--port", str(port),
                             f"--IdentityProvider.token={TOKEN}", f"--ServerApp.base_url={BASE}",
                             f"--ServerApp.root_dir={root}"], env=env, stdout=log, stderr=subprocess.STDOUT)
    origin = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while _get(f"{origin}{BASE}api/status?token={TOKEN}", 2)[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("jupyter server did not start: " + (root / "jupyter.log").read_text()[-2000:])
            time.sleep(0.3)
        (root / "host.html").write_text("<!doctype html><title>host</title><body></body>")
        yield origin, run.id
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_the_launcher_lists_ascendscope(jupyter):
    origin, _ = jupyter
    status, body = _get(f"{origin}{BASE}server-proxy/servers-info?token={TOKEN}")
    assert status == 200
    (entry,) = [s for s in json.loads(body)["server_processes"] if s["name"] == "ascendscope"]
    assert entry["launcher_entry"]["title"] == "ascendscope" and entry["launcher_entry"]["enabled"]
    assert entry["launcher_entry"]["path_info"] == "ascendscope/"
    status, icon = _get(f"{origin}{entry['launcher_entry']['icon_url']}?token={TOKEN}")
    assert status == 200 and icon.startswith(b"<svg")


def test_jupyter_guards_the_dashboard(jupyter):
    import http.client
    from urllib.parse import urlsplit

    origin, run_id = jupyter
    conn = http.client.HTTPConnection(urlsplit(origin).netloc, timeout=10)
    conn.request("GET", f"{PREFIX}api/runs")  # no Jupyter token: sent to Jupyter's login, not to our data
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status in (302, 403) and run_id.encode() not in body
    status, body = _get(f"{origin}{PREFIX}api/runs?token={TOKEN}", 90)  # the first request starts it
    assert status == 200 and run_id in {r["id"] for r in json.loads(body)["runs"]}


@pytest.mark.browser
def test_every_page_works_under_the_prefix(jupyter, browser, artifacts_dir):
    origin, run_id = jupyter
    context = browser.new_context(viewport={"width": 1500, "height": 950})
    page = context.new_page()
    errors: list[str] = []
    outside: list[str] = []
    failed: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(origin + PREFIX) else None)
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.set_default_timeout(30_000)
    page.goto(f"{origin}{BASE}api/status?token={TOKEN}")  # Jupyter's login cookie, as a browser in JupyterLab has
    outside.clear()
    page.goto(f"{origin}{PREFIX}")
    page.locator(f'a[href*="runs/{run_id}/timeline"]').first.click()
    page.wait_for_function("() => window.__timeline && window.__timeline.ready")
    assert page.url.startswith(f"{origin}{PREFIX}runs/{run_id}/timeline")
    page.locator("#tl-export").hover()  # the link takes the window in view when it is about to be used
    export = page.locator("#tl-export").get_attribute("href")
    assert export.startswith(f"{PREFIX}api/runs/{run_id}/export/timeline.json?start_ns=")
    page.screenshot(path=str(artifacts_dir / "jupyter_timeline.png"))
    for view, ready in (("summary", "#sum-breakdown tbody tr"), ("operator", "#op-groups-table tbody tr"),
                        ("memory", ".js-plotly-plot"), ("communication", "#comm-ops-table tbody tr"),
                        ("advice", "#adv-findings-table tbody tr"), ("cluster", ".js-plotly-plot")):
        page.locator(f'#view-tabs a[data-view="{view}"]').click()
        page.wait_for_url(f"{origin}{PREFIX}runs/{run_id}/{view}*")
        page.locator(ready).first.wait_for()
        if view == "advice":
            parquet = page.locator("#adv-findings .v-parquet").get_attribute("href")
            assert parquet.startswith(f"{PREFIX}api/runs/{run_id}/export/advice.parquet")
    page.locator('a.muted[title="All runs"]').click()
    page.wait_for_url(f"{origin}{PREFIX}")
    requests = OpenRequests(page)
    page.goto(f"{origin}{PREFIX}compare?a={run_id}")
    settle(page, requests)  # (every request the page makes as it loads and draws has ended)
    context.close()
    assert not outside, f"requests that left the prefix: {outside[:5]}"
    assert not failed, failed
    assert not errors, errors


@pytest.mark.browser
def test_run_show_displays_a_view_inside_jupyters_origin(jupyter, browser, artifacts_dir, monkeypatch):
    origin, run_id = jupyter
    import ascendscope.jupyter as jp

    monkeypatch.setenv("ASCENDSCOPE_JUPYTER_BASE_URL", BASE)
    frame = jp.show(run_id, "summary", rank=1)  # what Run.show displays (IPython prints its repr here)
    assert frame.src == f"{PREFIX}runs/{run_id}/summary?rank=1"
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{origin}{BASE}api/status?token={TOKEN}")  # Jupyter's login cookie
    # an HTML page of Jupyter's (its file viewer, under Jupyter's own page policy, as a notebook's page is)
    page.goto(f"{origin}{BASE}view/host.html")
    page.evaluate("(html) => { document.body.innerHTML = html; }", frame._repr_html_())
    view = page.frame_locator("iframe")
    view.locator("#sum-breakdown tbody tr").first.wait_for(timeout=30_000)
    assert view.locator("#rank-select").input_value() == "1"
    page.screenshot(path=str(artifacts_dir / "jupyter_show.png"))
    context.close()
    assert not errors, errors
