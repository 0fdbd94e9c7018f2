"""A first view in a fresh browser: the Operator view of the bundled sample, from the address bar to its chart.

    ascendscope bench firstview                         # loopback, then 20 Mbit/s with 40 ms latency
    ascendscope bench firstview --before /tmp/before    # and an older checkout, interleaved

Serves the bundled sample with ``ascendscope serve`` (read-only, in a data dir of its own, ingested once), then
for each sample starts a new headless chromium (an empty cache, no connection kept), opens
``/runs/<id>/operator`` at 1600×1000 and waits for the first pie's slices to be drawn (``#op-type-pie``). One
unmeasured view per server comes first (the run's database opened: the first view of a fresh browser, not of a
fresh server).
Reported per link and version: the median, min and max ms from the navigation's start to the chart
(``performance.now()`` when the page first shows it), the page's bytes on the wire and the bytes of content
(resource timing), when the last module arrived, and the CPU seconds of the server and of chromium per view (the
browser's own work: plotly.js alone takes most of it, so on a loaded machine the wall time follows the load). The
throttled link is Chromium's network emulation (DevTools ``Network.emulateNetworkConditions``: the given latency on
every request and the given throughput in each direction). Versions alternate sample by sample, so both see the
same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from ascendscope.bench.served import Server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
VIEWPORT = {"width": 1600, "height": 1000}
# the first pie's slices on screen (plotly draws them as paths in .pielayer): when the poll first sees them (the
# page's clock then, not once the answer is back here: the page may be busy with more charts meanwhile); a function,
# not an expression string, which Playwright would eval under a CSP that forbids it
CHART = "() => document.querySelector('#op-type-pie .pielayer path.surface') !== null && performance.now()"
TIMINGS = """() => ({
  resources: performance.getEntriesByType('resource').map((r) => ({
    name: r.name, start: r.startTime, end: r.responseEnd, wire: r.transferSize, body: r.decodedBodySize,
    type: r.initiatorType })),
  nav: (() => { const n = performance.getEntriesByType('navigation')[0];
    return { end: n.responseEnd, wire: n.transferSize, body: n.decodedBodySize }; })(),
})"""
LINKS = {"loopback": None, "20mbit_40ms": {"latency_ms": 40, "mbit_s": 20}}


def emulate(page, link: dict | None) -> None:
    if link is None:
        return
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    bytes_s = link["mbit_s"] * 1_000_000 / 8
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": link["latency_ms"],
                                                  "downloadThroughput": bytes_s, "uploadThroughput": bytes_s})


def browser_cpu_s() -> float:
    """CPU seconds (user + system) of every chromium process under this one (Playwright's driver starts them)."""
    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            if "chrom" in p.name():
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def one_view(pw, url: str, link: dict | None) -> dict:
    """One fresh chromium, one page load to the chart; what the page measured."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
    try:
        page = browser.new_context(viewport=VIEWPORT).new_page()
        emulate(page, link)
        cpu = browser_cpu_s()
        page.goto(url, wait_until="commit")
        chart_ms = page.wait_for_function(CHART, timeout=180_000, polling="raf").json_value()
        cpu = browser_cpu_s() - cpu
        got = page.evaluate(TIMINGS) | {"chart_ms": chart_ms}
    finally:
        browser.close()
    res = got["resources"]
    modules = [r for r in res if r["name"].endswith(".js") and "plotly" not in r["name"]]
    return {"chart_ms": round(got["chart_ms"]), "browser_cpu_s": round(cpu, 3),
            "wire_kb": round((got["nav"]["wire"] + sum(r["wire"] for r in res)) / 1e3),
            "content_kb": round((got["nav"]["body"] + sum(r["body"] for r in res)) / 1e3),
            "requests": len(res) + 1,
            "modules": len(modules),
            "last_module_ms": round(max((r["end"] for r in modules), default=0)),
            "resources": res}


def ready_run(srv: Server) -> str:
    """The id of the server's one run, once it is ready (the bundled sample, ingested at the server's start)."""
    deadline = time.monotonic() + 180
    while True:
        runs = srv.wait_ready("/api/runs")
        runs = runs.get("runs", runs) if isinstance(runs, dict) else runs
        if runs and runs[0]["status"] == "ready":
            return runs[0]["id"]
        if time.monotonic() > deadline:
            raise SystemExit(f"the bundled sample was not ready in time: {runs}")
        time.sleep(0.3)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench firstview", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="fresh browsers per link and version (default 5)")
    ap.add_argument("--links", default=",".join(LINKS), help=f"which of {', '.join(LINKS)} (default both)")
    ap.add_argument("--before", default=None, metavar="CHECKOUT", help="an older checkout, measured alternately")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write every sample here")
    args = ap.parse_args(argv)

    from playwright.sync_api import sync_playwright

    versions = {"after": None} | ({"before": Path(args.before)} if args.before else {})
    links = [name for name in args.links.split(",") if name]
    samples: dict = {(v, link): [] for v in versions for link in links}
    servers = {}
    with tempfile.TemporaryDirectory(prefix="ascendscope-firstview-") as tmp:
        try:
            for version, checkout in versions.items():
                servers[version] = Server(Path(tmp) / version, checkout=checkout)
            ids = {version: ready_run(srv) for version, srv in servers.items()}
            with sync_playwright() as pw:
                for version, srv in servers.items():  # unmeasured: the run's database opened, answers warm
                    one_view(pw, f"{srv.base}/runs/{ids[version]}/operator", None)
                for link in links:
                    for _ in range(args.repeat):
                        for version, srv in servers.items():
                            cpu = srv.cpu_s()
                            got = one_view(pw, f"{srv.base}/runs/{ids[version]}/operator", LINKS[link])
                            got["server_cpu_s"] = round(srv.cpu_s() - cpu, 3)
                            got["load_avg_1m"] = round(os.getloadavg()[0], 2)
                            print(f"{version} {link}: {got['chart_ms']} ms (browser {got['browser_cpu_s']} CPU-s, "
                                  f"load {got['load_avg_1m']})", file=sys.stderr, flush=True)
                            samples[(version, link)].append(got)
        finally:
            for srv in servers.values():
                srv.stop()
    report = {"load_avg_1m": round(os.getloadavg()[0], 2), "cores": os.cpu_count(), "results": []}
    for (version, link), got in samples.items():
        chart = [g["chart_ms"] for g in got]
        report["results"].append({
            "version": version, "link": link, "n": len(got), "chart_ms_median": round(statistics.median(chart)),
            "chart_ms_min": min(chart), "chart_ms_max": max(chart),
            "last_module_ms_median": round(statistics.median(g["last_module_ms"] for g in got)),
            "wire_kb": got[-1]["wire_kb"], "content_kb": got[-1]["content_kb"], "requests": got[-1]["requests"],
            "server_cpu_s_median": round(statistics.median(g["server_cpu_s"] for g in got), 3),
            "browser_cpu_s_median": round(statistics.median(g["browser_cpu_s"] for g in got), 3)})
    if args.json:
        Path(args.json).write_text(json.dumps({"report": report, "samples": {f"{v}/{lk}": s for (v, lk), s
                                                                             in samples.items()}}, indent=1))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
