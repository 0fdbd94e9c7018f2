"""Small helpers the browser tests share: a JSON GET against the live server, polling the page from Python
(``page.evaluate`` works under the Content-Security-Policy, where a ``wait_for_function`` expression string does
not), and waiting until a page has settled (no request open, nothing loading)."""

from __future__ import annotations

import time

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


class OpenRequests:
    """The requests of ``page`` not yet finished or failed, as Playwright reports them (its events arrive while the
    test waits on the page)."""

    def __init__(self, page):
        self.open: set = set()
        page.on("request", lambda r: self.open.add(r))
        page.on("requestfinished", lambda r: self.open.discard(r))
        page.on("requestfailed", lambda r: self.open.discard(r))


FRAMES = ("(n) => new Promise((done) => { const f = (k) => (k ? requestAnimationFrame(() => f(k - 1)) : done());"
          " f(n); })")
BUSY = "() => !!document.querySelector('.loading')"


def settle(page, requests: OpenRequests, quiet_frames: int = 3, timeout_s: float = 30.0) -> None:
    """Until the page has loaded, no request is open and nothing shows ``.loading``, over ``quiet_frames`` painted
    frames in a row (an answer that arrives renders, and a box it resizes is measured, before the next frame)."""
    page.wait_for_load_state("load")
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while quiet < quiet_frames:
        page.evaluate(FRAMES, 1)
        quiet = quiet + 1 if not requests.open and not page.evaluate(BUSY) else 0
        if time.monotonic() > deadline:
            raise AssertionError(f"{page.url} still busy after {timeout_s} s: {[r.url for r in requests.open]}")
