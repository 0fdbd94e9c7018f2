"""What the screenshots of issue #19 showed, in Debian's chromium under the page's real CSP: no literal "null" on
the Summary, a tooltip that follows a keyboard pan, Memory opening on the operators' range, the Cluster's
slowest-links table styled with no link to a rank the run lacks, ``?ranks=N`` selecting rank N, a failed run's
error shown once, and Range Stats saying its durations are whole slices'. Each test saves a screenshot to
tests/artifacts."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser_helpers import api, poll
from tests.conftest import needs_samples

pytestmark = [needs_samples, pytest.mark.browser]

TL_READY = "window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"
NULL_TEXT = """(sel) => [...document.querySelectorAll(sel)].some((n) => [...n.querySelectorAll('*')].concat([n])
    .some((e) => [...e.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim() === 'null')))"""


def test_summary_prints_no_null(page, live_server, artifacts_dir):
    page.goto(f"{live_server.base_url}/runs/{live_server.runs['level1']}/summary")
    expect(page.locator("#sum-top-table")).to_be_visible()
    expect(page.locator("#sum-breakdown")).to_be_visible()
    assert not page.evaluate(NULL_TEXT, "#summary-view, #sum-top, #sum-table, main")
    page.screenshot(path=str(artifacts_dir / "polish_summary.png"), full_page=True)


def open_timeline(page, base, run, query=""):
    page.goto(f"{base}/runs/{run}/timeline{query}")
    expect(page.locator("#timeline")).to_have_attribute("data-ready", "true")
    poll(page, TL_READY)


def test_the_tooltip_follows_a_keyboard_pan(page, live_server, artifacts_dir):
    open_timeline(page, live_server.base_url, live_server.runs["level1"])
    for _ in range(3):  # zoomed in (the whole run cannot pan)
        page.keyboard.press("w")
    poll(page, TL_READY)
    run = live_server.runs["level1"]
    tracks = api(live_server, f"/api/runs/{run}/timeline/tracks")["tracks"]
    busiest = max((t for t in tracks if t["rank"] == 0 and t["kind"] == "hardware"), key=lambda t: t["slice_count"])
    lanes = page.evaluate("window.__timeline.lanes()")
    hw = next(x for x in lanes if x["track_id"] == busiest["track_id"])
    assert hw["visible"]
    geo = page.evaluate("window.__timeline.geometry")
    rect = page.evaluate("window.__timeline.canvasRect")
    y = hw["top"] + geo["TRACK_PAD_PX"] + geo["SLICE_PX"] / 2
    tooltip = page.locator("#tl-tooltip")
    before = None
    for x in range(int(rect["left"] + 40), int(rect["left"] + rect["width"] - 40), 2):
        page.mouse.move(x, y)
        page.wait_for_timeout(30)
        if tooltip.is_visible():
            before = tooltip.inner_text()
            break
    assert before, "no slice found to hover on the first hardware lane"
    for _ in range(3):  # the view moves, the mouse does not
        page.keyboard.press("d")
        poll(page, TL_READY)
    page.wait_for_timeout(100)
    page.screenshot(path=str(artifacts_dir / "polish_tooltip_after_pan.png"))
    assert not tooltip.is_visible() or tooltip.inner_text() != before


def test_memory_opens_on_the_operators_range(page, live_server, artifacts_dir):
    run = live_server.runs["level1"]
    page.goto(f"{live_server.base_url}/runs/{run}/memory")
    page.wait_for_function("() => { const d = document.getElementById('mem-chart'); return d && d.data; }")
    curves = api(live_server, f"/api/runs/{run}/memory/curves", rank=0, group="overall")

    def span(series):  # the curves' times are relative to the run's origin already
        ts = [int(t) for s in series for t in s["t_ns"]]
        return min(ts) / 1e6, max(ts) / 1e6

    ops = span([s for s in curves["series"] if s["component"] != "APP"])
    full = span(curves["series"])
    assert full[0] < ops[0] or full[1] > ops[1], "the sample's APP samples reach beyond the operators' records"
    shown = page.evaluate("() => document.getElementById('mem-chart')._fullLayout.xaxis.range")
    pad = (ops[1] - ops[0]) * 0.01  # charts.dataRange pads by 1%
    assert shown == pytest.approx([ops[0] - pad, ops[1] + pad], abs=1e-3)
    page.screenshot(path=str(artifacts_dir / "polish_memory_operators_range.png"), full_page=True)
    page.click("#mem-range-toggle")
    pad = (full[1] - full[0]) * 0.01
    poll(page, "([a, b]) => { const r = document.getElementById('mem-chart')._fullLayout.xaxis.range;"
               " return Math.abs(r[0] - a) < 1e-3 && Math.abs(r[1] - b) < 1e-3; }", [full[0] - pad, full[1] + pad])
    expect(page.locator("#mem-range-toggle")).to_have_text("Operators' range")
    page.screenshot(path=str(artifacts_dir / "polish_memory_full_range.png"), full_page=True)


def test_cluster_links_are_styled_and_name_absent_ranks(page, live_server, view_runs, artifacts_dir):
    run = view_runs["fixtures"]
    page.goto(f"{live_server.base_url}/runs/{run}/cluster", timeout=30_000)
    page.wait_for_function("() => document.body.dataset.clusterReady === '1'", timeout=20_000)
    table = page.locator("#cl-links-table")
    expect(table).to_have_class("grid v-table")
    ranks = {r["rank"] for r in api(live_server, f"/api/runs/{run}")["ranks"]}
    links = api(live_server, f"/api/runs/{run}/cluster/matrix")["slow_links"]
    absent = {r for link in links for r in (link["src_rank"], link["dst_rank"])} - ranks
    assert absent, "the fixtures' p2p link goes to a rank whose folder is not in the run"
    hrefs = table.locator("a").evaluate_all("els => els.map(a => a.textContent)")
    assert {int(h) for h in hrefs} <= ranks
    expect(table.locator(".cl-rank-absent").first).to_contain_text("not in the run")
    table.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir / "polish_cluster_links.png"), full_page=True)


def test_ranks_in_the_url_select_that_rank(page, live_server):
    run = live_server.runs["level1"]
    for view in ("timeline", "summary"):
        page.goto(f"{live_server.base_url}/runs/{run}/{view}?ranks=1")
        expect(page.locator("#rank-select")).to_have_value("1")


def test_a_failed_run_shows_its_error_once(page, live_server, runs, artifacts_dir):
    from ascendscope.server.runs import RunStore

    store = RunStore(runs.data_dir)
    run = store.create_run("broken", "broken")
    store.set_status(run.id, "failed", error="no profiling data found in broken")
    page.goto(f"{live_server.base_url}/runs/{run.id}/timeline")
    expect(page.locator("#run-not-ready")).to_be_visible()
    page.wait_for_timeout(2500)  # the page used to poll once and print the error again
    expect(page.locator(".run-error")).to_have_count(1)
    page.screenshot(path=str(artifacts_dir / "polish_failed_run.png"))
    store.delete(run.id)


def test_range_stats_say_their_durations_are_whole_slices(page, live_server, artifacts_dir):
    open_timeline(page, live_server.base_url, live_server.runs["level1"])
    ruler = page.locator("#tl-ruler").bounding_box()
    page.mouse.move(ruler["x"] + ruler["width"] * 0.30, ruler["y"] + 6)
    page.mouse.down()
    page.mouse.move(ruler["x"] + ruler["width"] * 0.32, ruler["y"] + 6, steps=4)
    page.mouse.up()
    note = page.locator("#tl-range-whole")
    expect(note).to_be_visible(timeout=10_000)
    expect(note).to_contain_text("whole slices")
    page.screenshot(path=str(artifacts_dir / "polish_range_stats.png"))


def test_system_view_says_why_its_count_differs_from_the_operator_view(page, live_server, db_runs, artifacts_dir):
    run = db_runs["db_level1"]
    page.goto(f"{live_server.base_url}/runs/{run}/timeline")
    expect(page.locator("#timeline")).to_have_attribute("data-ready", "true")
    page.locator('.tl-panel-tab[data-tab="sysview"]').click()
    expect(page.locator("#tl-sysview")).to_have_attribute("data-sv-state", "ready")
    want = api(live_server, f"/api/runs/{run}/systemview/overall", rank=0)["notes"]
    assert want and "communication operator" in want[0]
    note = page.locator(".sv-note").first
    expect(note).to_have_text(want[0])
    note.scroll_into_view_if_needed()
    page.locator("#tl-sysview").screenshot(path=str(artifacts_dir / "polish_systemview_db.png"))
