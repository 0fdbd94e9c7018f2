"""Time to first timeline paint, in Debian's headless chromium, against ``ascendscope serve`` in a child process.

``first_paint(data_dir, run_ids)`` starts one server on ``data_dir`` (as deployed; read-only), waits until it
answers ``/api/runs`` (without opening any run), then for each run opens ``/runs/{id}/timeline`` in a fresh page and
times from the navigation to the moment the page says the timeline is drawn, with at least one slice, and waits for
no data (``window.__timeline.ready``, ``stats.slices > 0`` and ``pending() == 0``). The first visit is cold: it pays
for opening the run's database. Then the page is reloaded ``reloads`` times (warm: the run is open, answers may be
cached). Returns ``{run_id: {"cold_ms", "warm_ms" (median), "slices_drawn"}}``, or ``{"error": why}`` when chromium
or Playwright is missing.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from ascendscope.bench.served import Server

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
# a function, not a bare expression: Playwright would eval that, which the page's CSP blocks
DRAWN = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"
FAILED = "() => window.__timeline && window.__timeline.error"
SETTLED = f"() => ({DRAWN})() || !!({FAILED})()"
# the page can settle once before it has asked for any slice (seen with 64+ ranks): first paint is a slice drawn
PAINTED = f"() => ({DRAWN})() && window.__timeline.stats.slices > 0"


def _paint(browser, url: str, reloads: int, timeout_s: float) -> dict:
    from playwright.sync_api import Error as PlaywrightError

    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    times = []
    try:
        for i in range(1 + reloads):
            t0 = time.perf_counter()
            page.goto(url) if i == 0 else page.reload()
            page.wait_for_function(SETTLED, timeout=timeout_s * 1000)
            if page.evaluate(FAILED):
                return {"error": f"the timeline failed: {page.evaluate(FAILED)}"}
            page.wait_for_function(PAINTED, timeout=timeout_s * 1000)
            times.append((time.perf_counter() - t0) * 1000)
        stats = page.evaluate("window.__timeline.stats")
    except PlaywrightError as exc:  # a timeout or a crashed page is this run's result, not the suite's end
        return {"error": f"{str(exc).splitlines()[0][:200]}{'; page error: ' + errors[0][:200] if errors else ''}"}
    finally:
        page.close()
    return {"cold_ms": round(times[0], 1), "warm_ms": round(statistics.median(times[1:]), 1) if reloads else None,
            "slices_drawn": int(stats.get("slices") or 0)}


def first_paint(data_dir: Path, run_ids: list[str], *, reloads: int = 3, timeout_s: float = 120) -> dict:
    if not CHROMIUM.exists():
        return {"error": f"{CHROMIUM} is missing (apt-get install chromium)"}
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"error": "playwright is not installed (the dev extra)"}
    results: dict = {}
    with Server(data_dir) as server:
        server.wait_ready("/api/runs")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
            try:
                for run_id in run_ids:
                    results[run_id] = _paint(browser, f"{server.base}/runs/{run_id}/timeline", reloads, timeout_s)
            finally:
                browser.close()
    return results
