"""The operator, memory, summary and communication pages in Debian's chromium (Playwright, headless) on the real
samples: each page renders, its plotly charts hold data, tables fill from the server, and a click-through lands on
the right slice of the timeline. Runs without a trace show disabled links. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import PYTORCH_TEXT, VIEW_SAMPLES, needs_samples
from tests.samples import HAVE_REAL, STEP, needs_real

pytestmark = [needs_samples, pytest.mark.browser]

TIMELINE_READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"


def comm_ops(run: str) -> int:
    """The communication ops of a view run's communication.json files (every rank; Total Op Info excluded)."""
    root = PYTORCH_TEXT / "level1" if run == "level1" else VIEW_SAMPLES[run]
    n = 0
    for path in root.glob("**/ASCEND_PROFILER_OUTPUT/communication.json"):
        for step in json.loads(path.read_text()).values():
            n += sum(len(set(kind) - {"Total Op Info"}) for kind in step.values())
    return n


def chart_points(page, node_id: str) -> int:
    """How many data points the plotly chart ``#node_id`` draws (0 when it has no traces yet)."""
    return page.evaluate("""(id) => {
        const d = document.getElementById(id);
        if (!d || !d.data) return 0;
        let n = 0;
        for (const t of d.data) {
            const v = t.values || t.y || t.z || [];
            n += Array.isArray(v) ? v.flat().filter((x) => x !== null && x !== undefined).length : 0;
        }
        return n;
    }""", node_id)


def wait_chart(page, node_id: str) -> int:
    page.wait_for_function("(id) => { const d = document.getElementById(id); "
                           "return d && d.data && d.data.length > 0; }",
                           arg=node_id)
    return chart_points(page, node_id)


def wait_rows(page, table_id: str, minimum: int = 1):
    page.wait_for_function(
        "([id, n]) => { const t = document.getElementById(id); return t && !t.classList.contains('loading') &&"
        " t.querySelectorAll('tbody tr:not(.v-details-row)').length >= n &&"
        " !t.querySelector('tbody td.empty'); }", arg=[table_id, minimum])


def bad_paths(page) -> list[str]:
    """The SVG paths of every plotly chart on the page with a non-finite coordinate (plotly writes "MNaN,…")."""
    return page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot path')]
        .map((p) => p.getAttribute('d') || '').filter((d) => /NaN|Infinity/.test(d))""")


def open_view(page, base_url, run_id, view, query=""):
    page.goto(f"{base_url}/runs/{run_id}/{view}{query}")
    page.wait_for_selector(f"#{view}-view")


def shot(page, artifacts_dir, name):
    """A full-page screenshot: the page scrolls inside #content, so let it grow for the picture."""
    page.evaluate("""() => { document.documentElement.style.height = 'auto'; document.body.style.height = 'auto';
        document.getElementById('content').style.overflow = 'visible'; }""")
    page.screenshot(path=str(artifacts_dir / f"view_{name}.png"), full_page=True)
    page.evaluate("""() => { document.documentElement.style.height = ''; document.body.style.height = '';
        document.getElementById('content').style.overflow = ''; }""")


def follow_to_timeline(page, link) -> str:
    """Click a "Show in Timeline" link; return the slice id it named once the timeline has selected it."""
    href = link.get_attribute("href")
    assert href and "slice=" in href, href
    slice_id = href.split("slice=")[1].split("&")[0]
    link.click()
    page.wait_for_url("**/timeline?*")
    page.wait_for_function(TIMELINE_READY, timeout=20_000)
    page.wait_for_function("(id) => document.getElementById('timeline').dataset.selectedSliceId === id",
                           arg=slice_id, timeout=20_000)
    return slice_id


def test_operator_page_and_click_through(page, live_server, view_runs, artifacts_dir):
    run = view_runs["level1"]
    open_view(page, live_server.base_url, run, "operator")
    assert wait_chart(page, "op-type-pie") > 3
    assert wait_chart(page, "op-core-pie") >= 2
    assert wait_chart(page, "op-top-bar") == 15
    wait_rows(page, "op-groups-table", 10)
    wait_rows(page, "op-torch-table", 10)
    headers = page.locator("#op-groups-table thead th").all_inner_texts()
    assert any("Total Time" in h for h in headers) and any("Accelerator Core" in h for h in headers)
    # server-side sort: click "Count" and the first row has the largest count
    page.locator("#op-groups-table thead th", has_text="Count").click()
    page.wait_for_function("() => document.querySelector('#op-groups-table th.sorted')?.textContent.includes('Count')")
    wait_rows(page, "op-groups-table", 10)
    cells = page.locator("#op-groups-table tbody tr td:nth-child(4)").all_inner_texts()
    counts = [int(c.replace(",", "")) for c in cells]
    assert counts == sorted(counts, reverse=True)
    # open the first group's kernels
    page.locator("#op-groups-table tbody tr button.v-expand").first.click()
    link = page.locator(".v-instance-table a.tl-link").first
    link.wait_for()
    shot(page, artifacts_dir, "operator_level1")
    assert not bad_paths(page)
    kernel = page.locator(".v-instance-table tbody tr").first.locator("td").first.inner_text()
    slice_id = follow_to_timeline(page, link)
    detail = httpx.get(f"{live_server.base_url}/api/runs/{run}/timeline/slices/{slice_id}", timeout=10)
    detail.raise_for_status()
    assert kernel in str(detail.json())  # the selected slice is the kernel the row named


def test_operator_page_without_trace(page, live_server, view_runs, artifacts_dir):
    open_view(page, live_server.base_url, view_runs["st4"], "operator")
    assert wait_chart(page, "op-type-pie") > 3
    wait_rows(page, "op-groups-table", 10)
    page.locator("#op-groups-table tbody tr button.v-expand").first.click()
    page.locator(".v-instance-table .tl-link.disabled").first.wait_for()
    assert page.locator(".v-instance-table a.tl-link").count() == 0
    assert "no trace" in page.locator("#op-summary").inner_text()
    # rank 1 has no kernel_details.csv: the page says so instead of failing
    page.select_option("#rank-select", "1")
    page.wait_for_function("() => document.getElementById('op-summary').textContent.includes('No kernels')")
    assert "Ranks with kernels: 0, 2" in page.locator("#op-summary").inner_text()
    page.select_option("#rank-select", "0")
    page.wait_for_function("() => /^Rank 0: [0-9,]+ kernels/.test(document.getElementById('op-summary').textContent)")
    shot(page, artifacts_dir, "operator_st4")
    assert not bad_paths(page)


def test_memory_page_pick_and_timeline(page, live_server, view_runs, artifacts_dir):
    run = view_runs["level1"]
    open_view(page, live_server.base_url, run, "memory")
    assert wait_chart(page, "mem-chart") > 100
    assert wait_chart(page, "mem-modules") > 10
    wait_rows(page, "mem-table", 10)
    assert page.locator("#mem-table tr.peak").count() <= 1
    assert "Peak Memory Usage" in page.locator("#mem-peak").inner_text()
    # pick the instant of the peak: the table lists the allocations live then, a link opens the timeline there
    ov = httpx.get(f"{live_server.base_url}/api/runs/{run}/memory", params={"rank": 0}, timeout=10).json()
    peak_ms = (int(ov["peak_allocation"]["allocation_time_ns"]) - int(ov["origin_ns"])) / 1e6
    x, y = page.evaluate("""(xms) => {
        const gd = document.getElementById('mem-chart'), xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const r = gd.getBoundingClientRect();
        return [r.left + xa._offset + xa.l2p(xms), r.top + ya._offset + ya._length / 2];
    }""", peak_ms)
    for dx in (-6, -3, 0, 1, 0):  # plotly hovers (and so clicks) only after mouse moves it has not throttled
        page.mouse.move(x + dx, y)
        page.wait_for_timeout(150)
    page.wait_for_function("() => (document.getElementById('mem-chart')._hoverdata || []).length > 0")
    page.mouse.down()
    page.mouse.up()
    page.locator("#mem-pick-timeline").wait_for()
    page.wait_for_function("() => document.querySelector('#mem-pick .v-live')")
    wait_rows(page, "mem-table", 1)  # live at the peak: at least the peak allocation itself
    shot(page, artifacts_dir, "memory_level1")
    assert not bad_paths(page)
    href = page.locator("#mem-pick-timeline").get_attribute("href")
    start = int(href.split("start_ns=")[1].split("&")[0])
    end = int(href.split("end_ns=")[1].split("&")[0])
    page.locator("#mem-pick-timeline").click()
    page.wait_for_url("**/timeline?*")
    page.wait_for_function(TIMELINE_READY, timeout=20_000)
    tl = page.locator("#timeline")
    view = int(tl.get_attribute("data-view-start-ns")), int(tl.get_attribute("data-view-end-ns"))
    assert view[0] <= (start + end) // 2 <= view[1]


def test_memory_charts_are_svg_under_the_csp(page, live_server, view_runs):
    """Under the real policy (no eval, so no WebGL traces) both memory charts draw SVG lines with finite coordinates,
    the time axis spans the data (not shapes or arrows), and nothing is logged as an error (the fixture checks)."""
    run = view_runs["level1"]
    open_view(page, live_server.base_url, run, "memory")
    assert wait_chart(page, "mem-chart") > 100
    assert wait_chart(page, "mem-modules") > 10
    page.locator("#mem-chart .scatterlayer path.js-line").first.wait_for(state="attached")  # a flat line has no height
    page.locator("#mem-modules .scatterlayer path.js-line").first.wait_for(state="attached")
    assert "WebGL" not in page.locator("#memory-view").inner_text()
    assert page.locator("#memory-view .js-plotly-plot canvas").count() == 0  # (the snapshot sub-tab draws on a canvas)
    for node in ("mem-chart", "mem-modules"):
        lines = page.locator(f"#{node} .scatterlayer path.js-line").evaluate_all(
            "(ps) => ps.filter((p) => getComputedStyle(p).display !== 'none').map((p) => p.getAttribute('d'))")
        assert lines and all(len(d) > 20 for d in lines), node
    assert not bad_paths(page)
    curves = httpx.get(f"{live_server.base_url}/api/runs/{run}/memory/curves", params={"rank": 0}, timeout=10).json()
    every = [t / 1e6 for s in curves["series"] for t in s["t_ns"]]
    ops = [t / 1e6 for s in curves["series"] if s["component"] != "APP" for t in s["t_ns"]]
    x_range = "() => document.getElementById('mem-chart')._fullLayout.xaxis.range"
    # it opens on the operators' records (the APP samples of the whole process span more), the rest one click away
    assert min(every) < min(ops) or max(every) > max(ops)
    lo, hi = page.evaluate(x_range)
    assert lo <= min(ops) and hi >= max(ops) and hi - lo <= 1.05 * (max(ops) - min(ops))
    page.click("#mem-range-toggle")
    page.wait_for_function(f"(t) => ({x_range})()[0] <= t", arg=min(every))
    lo, hi = page.evaluate(x_range)
    assert lo <= min(every) and hi >= max(every) and hi - lo <= 1.05 * (max(every) - min(every))


@needs_real  # the real st4 has 18,659 memory rows, more than the page's point budget; a twin has hundreds (the
# down-sampling itself is checked on the twins through the API: tests/server/api/test_api_views.py)
def test_memory_page_downsampled(page, live_server, view_runs, artifacts_dir):
    open_view(page, live_server.base_url, view_runs["st4"], "memory")
    points = wait_chart(page, "mem-chart")
    assert 100 < points < 40_000
    page.wait_for_function("() => document.getElementById('mem-chart').dataset.downsampled === 'true'")
    assert "down-sampled" in page.locator("#mem-sample-note").inner_text()
    wait_rows(page, "mem-table", 10)
    assert page.locator("#mem-table .tl-link.disabled").count() > 0
    shot(page, artifacts_dir, "memory_st4")
    assert not bad_paths(page)


@pytest.mark.parametrize("run, ranks", [("level1", 2), ("st4", 4), ("fixtures", 2)])
def test_summary_page(page, live_server, view_runs, artifacts_dir, run, ranks):
    open_view(page, live_server.base_url, view_runs[run], "summary")
    wait_chart(page, "sum-chart")
    bars = page.evaluate("() => document.getElementById('sum-chart').data.filter((t) => t.type === 'bar')"
                         ".map((t) => t.x.length)")
    assert bars and all(n == ranks for n in bars)
    findings = httpx.get(f"{live_server.base_url}/api/runs/{view_runs[run]}/summary", timeout=10).json()["findings"]
    assert page.locator("#sum-findings li").count() == len(findings) >= 1  # 2 or more in the real samples
    shown = page.locator("#sum-findings").inner_text()
    assert all(f["text"] in shown for f in findings), (findings, shown)
    host_bound = any(f["kind"] == "host_bound" for f in findings)
    assert ("host-bound" in shown.lower()) == host_bound
    if HAVE_REAL or run == "level1":  # every real sample idles over 10 % of its step (the st4 and fixtures twins not)
        assert host_bound
    if run == "level1":  # one profiled step, numbered 50 in the real sample: a count, not the id alone
        assert f"1 (step {STEP})" in page.locator("#sum-base").inner_text()
    wait_rows(page, "sum-breakdown", ranks)
    wait_rows(page, "sum-ranks-table", ranks)
    shot(page, artifacts_dir, f"summary_{run}")
    assert not bad_paths(page)


def test_communication_page_click_through(page, live_server, view_runs, artifacts_dir):
    run = view_runs["level1"]
    open_view(page, live_server.base_url, run, "communication")
    ops = comm_ops("level1")  # 8 in the real sample
    assert wait_chart(page, "comm-gantt") == ops
    assert wait_chart(page, "comm-rank-chart") > 4
    assert wait_chart(page, "comm-size-chart") > 0
    wait_rows(page, "comm-ops-table", ops)
    wait_rows(page, "comm-rank-table-grid", 2)
    shot(page, artifacts_dir, "communication_level1")
    page.click("#comm-mode-matrix")
    # cells between ranks: the real sample's group spans 8 ranks, the twin's the 2 ranks it has (links 0-1, 1-0)
    assert wait_chart(page, "comm-heatmap") >= (4 if HAVE_REAL else 2)
    shot(page, artifacts_dir, "communication_level1_matrix")
    assert not bad_paths(page)
    page.click("#comm-mode-duration")
    link = page.locator("#comm-ops-table a.tl-link").first
    slice_id = follow_to_timeline(page, link)
    assert int(slice_id) > 0


@pytest.mark.parametrize("run", ["st4", "fixtures"])
def test_communication_page_cluster(page, live_server, view_runs, artifacts_dir, run):
    open_view(page, live_server.base_url, view_runs[run], "communication")
    ops = comm_ops(run)  # more than 10 in the real samples
    assert wait_chart(page, "comm-gantt") >= min(11, ops)
    assert wait_chart(page, "comm-rank-chart") > 4
    wait_rows(page, "comm-ops-table", min(10, ops))
    page.locator("#comm-no-trace").wait_for()
    assert page.locator("#comm-ops-table a.tl-link").count() == 0
    assert page.locator("#comm-ops-table .tl-link.disabled").count() > 0
    assert page.locator("#comm-advice li").count() >= 1
    shot(page, artifacts_dir, f"communication_{run}")
    page.click("#comm-mode-matrix")
    assert wait_chart(page, "comm-heatmap") >= 2
    for metric in ("transit_size_mb", "transport_type"):
        page.select_option("#comm-metric", metric)
        page.wait_for_function("(m) => document.getElementById('comm-matrix-note').textContent.includes(m)",
                               arg={"transit_size_mb": "Transit Size", "transport_type": "Transport Type"}[metric])
    shot(page, artifacts_dir, f"communication_{run}_matrix")
    assert not bad_paths(page)


def test_timeline_of_a_run_without_trace_says_so(page, live_server, view_runs):
    page.goto(f"{live_server.base_url}/runs/{view_runs['st4']}/timeline")
    page.wait_for_selector("#timeline[data-no-trace='true']")
    note = page.locator("#tl-notrace")
    assert note.is_visible()
    assert "No trace in this run" in note.inner_text()
    assert note.locator("a[href$='/summary']").count() == 1
