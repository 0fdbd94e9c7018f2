"""Timeline drawing benchmark in Debian's chromium: frame times with 100k+ slices on screen, while W/A/S/D move.

    ascendscope bench render --slices 10000000

Serves the synthetic run of ``bench.query`` (built once), opens its timeline at 1600×1000 in headless chromium,
shows every track, and then (1) redraws the loaded view 60 times and (2) presses W/A/S/D 40 times, reading each
frame's draw time and slice count from the page (``window.__timeline.stats``). Reports p50/p95 draw time and
the frame rate that allows.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

from ascendscope.bench.query import percentile, prepare_store

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
# a function, not a bare expression: Playwright would eval that, which the page's CSP blocks
READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"


def serve(data: Path):
    import uvicorn

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(Settings.from_env(data_dir=str(data), port=port)),
                                           host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench render", description=__doc__.split("\n\n")[0])
    ap.add_argument("--slices", type=int, default=10_000_000)
    ap.add_argument("--cache", default="bench/out")
    args = ap.parse_args(argv)

    from playwright.sync_api import sync_playwright

    data, run_id = prepare_store(Path(args.cache), args.slices)
    server, base = serve(data)
    redraw_ms, key_ms, drawn = [], [], []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{base}/runs/{run_id}/timeline")
            page.wait_for_function(READY, timeout=120_000)
            page.evaluate("window.__timeline.showAllLanes && window.__timeline.showAllLanes()")
            page.wait_for_function(READY, timeout=120_000)
            for _ in range(60):
                stats = page.evaluate("(() => { window.__timeline.redraw(); return window.__timeline.stats; })()")
                redraw_ms.append(stats["ms"])
                drawn.append(stats["slices"])
            page.locator("#timeline").focus()
            for key in "wwwwddddaaaassss" * 3:
                page.keyboard.press(key)
                page.wait_for_function(READY, timeout=60_000)
                stats = page.evaluate("window.__timeline.stats")
                key_ms.append(stats["ms"])
            browser.close()
    finally:
        server.should_exit = True
    report = {
        "slices_on_screen": {"median": int(statistics.median(drawn)), "max": max(drawn)},
        "redraw_ms": {"p50": round(statistics.median(redraw_ms), 1), "p95": round(percentile(redraw_ms, 95), 1)},
        "fps_at_p95": round(1000 / max(percentile(redraw_ms, 95), 1e-3)),
        "after_wasd_draw_ms": {"p50": round(statistics.median(key_ms), 1), "p95": round(percentile(key_ms, 95), 1)},
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
