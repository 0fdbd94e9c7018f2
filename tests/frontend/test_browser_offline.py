"""Offline, as Ascend clusters often are: no request of any page leaves the server (every view of a run, the runs
page, Compare, the API reference), and the API page renders from the server's own files. The first view asks for
its whole module graph at once (``<link rel="modulepreload">``), not one level of imports per round trip."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from ascendscope.server.pages import VIEW_NAMES
from tests.browser_helpers import OpenRequests, settle

pytestmark = pytest.mark.browser


def watch_requests(page, base: str) -> list[str]:
    """Every request the page makes that does not go to the test server's origin (``data:``/``blob:`` URLs are
    not requests to anywhere)."""
    origin = urlsplit(base)
    foreign: list[str] = []

    def seen(request):
        url = urlsplit(request.url)
        if url.scheme in ("data", "blob"):
            return
        if (url.scheme, url.netloc) != (origin.scheme, origin.netloc):
            foreign.append(request.url)

    page.on("request", seen)
    page.on("websocket", lambda ws: foreign.append(ws.url))
    return foreign


def test_no_request_of_any_page_leaves_the_server(page, live_server):
    foreign = watch_requests(page, live_server.base_url)
    requests = OpenRequests(page)
    rid = live_server.runs["level1"]
    paths = ["/", f"/compare?a={rid}", *(f"/runs/{rid}/{view}" for view in VIEW_NAMES)]
    page.set_default_timeout(30_000)  # (a dozen pages with plotly.js, on a shared machine)
    for path in paths:
        page.goto(live_server.base_url + path, wait_until="domcontentloaded")
        settle(page, requests)  # every request the page makes as it loads and draws its answers has ended
    assert foreign == [], foreign
    assert page.evaluate("() => typeof Plotly") == "object"  # (the last view, SQL, loaded plotly.js from us)


def test_the_api_page_renders_from_the_server_alone(page, live_server):
    foreign = watch_requests(page, live_server.base_url)
    page.set_default_timeout(30_000)
    page.goto(live_server.base_url + "/docs")
    page.locator(".opblock").first.wait_for()
    assert page.locator(".opblock-summary-path", has_text="/api/runs/{run_id}/timeline/slices").count() >= 1
    page.goto(live_server.base_url + "/redoc")  # (FastAPI's other reference page: here it leads to /docs)
    page.locator(".opblock").first.wait_for()
    assert urlsplit(page.url).path == "/docs"
    page.wait_for_load_state("networkidle")
    assert foreign == [], foreign


def test_a_first_view_asks_for_its_whole_module_graph_at_once(fresh_page, live_server):
    """Every module of the Operator view is asked for before the first one has arrived (the page's modulepreload
    links), so none waits for its importer to arrive and be parsed first: without them, the view's own imports
    waited behind plotly.js (4.8 MB) and each level of imports cost a round trip. (A first view: a new context,
    its cache empty.)"""
    page = fresh_page
    page.set_default_timeout(30_000)
    page.goto(f"{live_server.base_url}/runs/{live_server.runs['level1']}/operator")
    page.locator("#op-type-pie .pielayer path").first.wait_for()
    modules = page.evaluate("""() => performance.getEntriesByType('resource')
        .filter((r) => r.name.includes('/static/') && r.name.endsWith('.js'))
        .map((r) => [new URL(r.name).pathname, r.startTime, r.responseEnd])""")
    assert len(modules) >= 15, modules
    first_arrival = min(end for _, _, end in modules)
    late = [path for path, start, _ in modules if start > first_arrival]
    assert late == [], f"modules asked for only after another arrived: {late}"
    assert all("/static/v-" in path for path, _, _ in modules), modules
