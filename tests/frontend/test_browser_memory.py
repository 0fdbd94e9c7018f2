"""The Memory view in chromium under the real CSP (issue #13 item 5): Group By Overall / Stream / Component, a zoom
on the chart limiting the allocation table (a checkbox, on once zoomed; a double click clears it), and the
timeline's region markers shaded on the chart as bands (Area Mark). Screenshots go to tests/artifacts/."""

from __future__ import annotations

import csv
import json
from decimal import Decimal

import httpx
import pytest

from tests.conftest import PYTORCH_TEXT, needs_samples

pytestmark = [needs_samples, pytest.mark.browser]


def _allocations() -> list[dict]:
    path = PYTORCH_TEXT / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv"
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return list(csv.DictReader(fh))


ALLOCATIONS = _allocations()  # level1 rank 0's operator allocations (184 over ~54 ms in the real sample)
_TIMES = [int(Decimal(r["Allocation Time(us)"].strip()) * 1000) for r in ALLOCATIONS] or [0]
START = min(_TIMES)  # ...694.6 ms in the real sample
_SCALE = (max(_TIMES) - START) / 55_000_000  # the markers below are placed as in the real sample's ~55 ms


def at(ms: float) -> str:
    return str(START + round(ms * 1_000_000 * _SCALE))


# region markers as the timeline stores them (common/markers.js): two regions and a point marker
MARKERS = [
    {"id": "r1", "name": "fwd <b>bold</b>", "start_ns": at(10), "end_ns": at(20), "color": "#5aa0ff"},
    {"id": "r2", "name": "optimizer", "start_ns": at(45), "end_ns": at(55), "color": "#e0508a"},
    {"id": "p1", "name": "a point", "start_ns": at(30), "end_ns": None, "color": "#f2b84b"},
]


def open_memory(page, base, run, query=""):
    page.goto(f"{base}/runs/{run}/memory{query}")
    page.wait_for_selector("#memory-view")
    wait_group(page, "overall")


def wait_group(page, group):
    page.wait_for_function("(g) => { const d = document.getElementById('mem-chart');"
                           " return d && d.dataset.group === g && d.data; }", arg=group)


def legend(page) -> list[str]:
    return page.locator("#mem-chart .legendtext").all_text_contents()


def table_total(page) -> int:
    page.wait_for_function("() => { const t = document.getElementById('mem-table');"
                           " return t && !t.classList.contains('loading'); }")
    return int(page.locator("#mem-allocations .v-table-info").inner_text().split(" of ")[1].replace(",", ""))


def wait_total(page, total):
    page.wait_for_function("(n) => { const t = document.getElementById('mem-table'),"
                           " i = document.querySelector('#mem-allocations .v-table-info');"
                           " return t && !t.classList.contains('loading') && i &&"
                           " i.textContent.endsWith(' of ' + n.toLocaleString('en-US')); }", arg=total)


def plot_box(page):
    """The chart's plot area in page coordinates: left, top, width, height."""
    return page.evaluate("""() => { const gd = document.getElementById('mem-chart'), l = gd._fullLayout;
        const r = gd.getBoundingClientRect();
        return [r.left + l.xaxis._offset, r.top + l.yaxis._offset, l.xaxis._length, l.yaxis._length]; }""")


def bad_paths(page) -> list[str]:
    return page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot path')]
        .map((p) => p.getAttribute('d') || '').filter((d) => /NaN|Infinity/.test(d))""")


def shot(page, artifacts_dir, name):
    page.evaluate("""() => { document.documentElement.style.height = 'auto'; document.body.style.height = 'auto';
        document.getElementById('content').style.overflow = 'visible'; }""")
    page.screenshot(path=str(artifacts_dir / f"memory_{name}.png"), full_page=True)
    page.evaluate("""() => { document.documentElement.style.height = ''; document.body.style.height = '';
        document.getElementById('content').style.overflow = ''; }""")


def test_group_by(page, live_server, view_runs, artifacts_dir):
    run = view_runs["level1"]
    open_memory(page, live_server.base_url, run)
    assert "PTA+GE Allocated" in legend(page)
    page.select_option("#mem-group-by", "stream")
    wait_group(page, "stream")
    streams = legend(page)
    ptrs = {r["Stream Ptr"].strip() for r in ALLOCATIONS}
    assert {f"Stream {p} Allocated" if p else "No stream Allocated" for p in ptrs} <= set(streams)
    assert "operator allocations not yet released" in page.locator("#mem-group-note").inner_text()
    api = httpx.get(f"{live_server.base_url}/api/runs/{run}/memory/curves",
                    params={"rank": 0, "group": "stream"}, timeout=10).json()
    assert streams == [s["name"] for s in api["series"]]
    shot(page, artifacts_dir, "group_stream")
    page.select_option("#mem-group-by", "component")
    wait_group(page, "component")
    assert {"PTA Reserved", "APP Reserved", "HCCL (module) Reserved"} <= set(legend(page))
    assert "PTA+GE Reserved" not in legend(page)
    shot(page, artifacts_dir, "group_component")
    assert not bad_paths(page)


def test_stream_is_disabled_without_streams(page, live_server, view_runs):
    open_memory(page, live_server.base_url, view_runs["fixtures"], "?rank=0")
    option = page.locator("#mem-group-by option[value='stream']")
    assert option.is_disabled() and "(no data)" in option.inner_text()
    assert option.get_attribute("title") == "rank 0's operator allocations have no Stream Ptr values"
    note = page.locator("#mem-group-note").inner_text()
    assert "Stream: rank 0's operator allocations have no Stream Ptr values" in note
    assert not page.locator("#mem-group-by option[value='component']").is_disabled()


def test_zoom_limits_the_table(page, live_server, view_runs, artifacts_dir):
    run = view_runs["level1"]
    open_memory(page, live_server.base_url, run)
    box = page.locator("#mem-only-window")
    assert box.is_disabled() and not box.is_checked()
    everything = table_total(page)
    assert everything == len(ALLOCATIONS)
    left, top, width, height = plot_box(page)
    y = top + height / 2
    page.mouse.move(left + 0.55 * width, y)
    page.mouse.down()
    for i in range(1, 11):
        page.mouse.move(left + (0.55 + 0.015 * i) * width, y + i)
    page.mouse.up()
    page.wait_for_function("() => document.getElementById('mem-chart').dataset.windowStartNs !== ''")
    page.wait_for_function("() => document.getElementById('mem-only-window').checked")
    assert not box.is_disabled()
    chart = page.locator("#mem-chart")
    lo, hi = chart.get_attribute("data-window-start-ns"), chart.get_attribute("data-window-end-ns")
    want = httpx.get(f"{live_server.base_url}/api/runs/{run}/memory/allocations",
                     params={"rank": 0, "start_ns": lo, "end_ns": hi, "limit": 500, "sort": "allocation_time",
                             "order": "asc"}, timeout=10).json()
    assert 0 < want["total"] < everything
    wait_total(page, want["total"])
    assert page.locator("#mem-allocations").get_attribute("data-windowed") == "true"
    # the rows shown are the API's, each allocated or released inside the window
    first = page.locator("#mem-table tbody tr").first.locator("td").first.inner_text()
    assert first.startswith(want["rows"][0]["name"])
    assert all(any(t and int(lo) <= int(t) <= int(hi) for t in (r["allocation_time_ns"], r["release_time_ns"]))
               for r in want["rows"])
    shot(page, artifacts_dir, "zoomed_table")
    box.uncheck()
    wait_total(page, everything)
    box.check()
    wait_total(page, want["total"])
    page.locator("#mem-chart").scroll_into_view_if_needed()  # the checkbox scrolled the page
    left, top, width, height = plot_box(page)
    page.mouse.dblclick(left + width / 2, top + height / 2)  # plotly: autosize, the window is gone
    page.wait_for_function("() => document.getElementById('mem-chart').dataset.windowStartNs === ''")
    wait_total(page, everything)
    assert box.is_disabled() and not box.is_checked()
    assert not bad_paths(page)


def test_region_markers_shade_the_chart(page, live_server, view_runs, artifacts_dir):
    run = view_runs["level1"]
    page.goto(f"{live_server.base_url}/runs/{run}/memory")
    page.evaluate("([key, list]) => localStorage.setItem(key, list)",
                  [f"ascendscope:markers:{run}", json.dumps(MARKERS)])
    open_memory(page, live_server.base_url, run)
    chips = page.locator("#mem-marks .v-mark-chip")
    assert chips.count() == 2  # regions only: the point marker is not an area
    assert chips.first.inner_text().startswith("fwd <b>bold</b>")  # a name is text, not markup
    origin = int(httpx.get(f"{live_server.base_url}/api/runs/{run}/memory", params={"rank": 0},
                           timeout=10).json()["origin_ns"])

    def bands():
        return page.evaluate("""() => (document.getElementById('mem-chart').layout.shapes || [])
            .filter((s) => s.type === 'rect').map((s) => [s.x0, s.x1, s.fillcolor])""")

    got = bands()
    assert got == [[(int(m["start_ns"]) - origin) / 1e6, (int(m["end_ns"]) - origin) / 1e6, m["color"]]
                   for m in MARKERS[:2]]
    labels = page.locator("#mem-chart .annotation-text").all_text_contents()
    assert "fwd <b>bold</b>" in labels and "optimizer" in labels
    shot(page, artifacts_dir, "area_marks")
    page.locator("#mem-marks input[data-marker='r1']").uncheck()
    page.wait_for_function("() => (document.getElementById('mem-chart').layout.shapes || [])"
                           ".filter((s) => s.type === 'rect').length === 1")
    assert bands()[0][2] == "#e0508a"
    # a region saved meanwhile (the timeline, or another tab) appears without a reload
    page.evaluate("([runId, list]) => import('/static/js/common/markers.js')"
                  ".then((m) => m.saveMarkers(runId, list))",
                  [run, MARKERS + [{"id": "r3", "name": "late", "start_ns": at(60),
                                    "end_ns": at(62), "color": "#4bbf73"}]])
    page.wait_for_function("() => document.querySelectorAll('#mem-marks .v-mark-chip').length === 3")
    # zoom to a region: the chart shows it, the table is limited to it
    page.locator("#mem-marks button[data-marker='r2']").click()
    page.wait_for_function("(s) => document.getElementById('mem-chart').dataset.windowStartNs === s",
                           arg=MARKERS[1]["start_ns"])
    assert page.locator("#mem-chart").get_attribute("data-window-end-ns") == MARKERS[1]["end_ns"]
    assert page.locator("#mem-only-window").is_checked()
    want = httpx.get(f"{live_server.base_url}/api/runs/{run}/memory/allocations",
                     params={"rank": 0, "start_ns": MARKERS[1]["start_ns"], "end_ns": MARKERS[1]["end_ns"]},
                     timeout=10).json()
    wait_total(page, want["total"])
    assert not bad_paths(page)
