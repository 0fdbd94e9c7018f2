"""Small helpers the browser tests share: a JSON GET against the live server, and polling the page from Python
(``page.evaluate`` works under the Content-Security-Policy, where a ``wait_for_function`` expression string does
not)."""

from __future__ import annotations

import httpx


def api(live_server, path, **params):
    resp = httpx.get(f"{live_server.base_url}{path}", params=params, timeout=10)
    resp.raise_for_status()
    return resp.json()


def poll(page, expr, arg=None, timeout_s=10.0):
    """The first truthy value of page.evaluate(expr, arg), polled from Python."""
    waited = 0.0
    while True:
        value = page.evaluate(expr, arg)
        if value:
            return value
        if waited > timeout_s:
            raise AssertionError(f"still false after {timeout_s} s: {expr}")
        page.wait_for_timeout(50)
        waited += 0.05
