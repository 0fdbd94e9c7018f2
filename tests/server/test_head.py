"""HEAD answers wherever GET does (monitors and proxies probe with it): every GET route of the API and every page,
served by uvicorn, answers HEAD with GET's status and headers and no body."""

from __future__ import annotations

import httpx

from ascendscope.server.pages import VIEW_NAMES
from tests.conftest import needs_samples
from tests.server.test_http_errors import first_choice, is_integer, realistic_values

pytestmark = needs_samples

PAGES = ("/", "/compare", "/docs", "/openapi.json", "/favicon.ico", "/vendor/plotly.min.js",
         "/static/js/common/api.js", "/runs/{run_id}", *(f"/runs/{{run_id}}/{v}" for v in VIEW_NAMES))
# (Content-Length only present in both: an answer may differ in its last float digits from one request to the
# next, as DuckDB sums in parallel)
SAME_HEADERS = ("content-type", "content-security-policy", "cache-control", "location")


def get_urls(app, run: str, ordinary: dict[str, str]) -> list[tuple[str, dict]]:
    """Every GET route of the API with its required parameters filled with ordinary values, and every page."""
    urls = [(p.replace("{run_id}", run), {}) for p in PAGES]
    for path, operations in app.openapi()["paths"].items():
        if "get" not in operations:
            continue
        url, query = path.replace("{run_id}", run), {}
        for p in operations["get"].get("parameters", []):
            value = ordinary.get(p["name"], "1" if is_integer(p) else first_choice(p))
            if p["in"] == "path":
                url = url.replace(f"{{{p['name']}}}", {"name": "steps", "fmt": "csv"}.get(p["name"], value))
            elif p.get("required"):
                query[p["name"]] = value
        urls.append((url, query))
    return urls


def test_every_get_route_and_page_answers_head(app, client, live_server, runs):
    run = runs.ids["level1"]
    urls = get_urls(app, run, realistic_values(client, run))
    assert len(urls) > 70
    wrong = []
    with httpx.Client(base_url=live_server.base_url, timeout=60) as http:
        for url, query in urls:
            got = http.get(url, params=query)
            head = http.head(url, params=query)
            same = {h: (got.headers.get(h), head.headers.get(h)) for h in SAME_HEADERS
                    if got.headers.get(h) != head.headers.get(h)}
            if ("content-length" in got.headers) != ("content-length" in head.headers):
                same["content-length"] = (got.headers.get("content-length"), head.headers.get("content-length"))
            if head.status_code != got.status_code or head.content or same:
                wrong.append((url, query, got.status_code, head.status_code, len(head.content), same))
    assert not wrong, "\n".join(map(str, wrong))
