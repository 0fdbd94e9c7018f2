"""Charts asked for before plotly.js has run are drawn one task each, in their order, once it has: a view's first
chart is on screen after its own drawing, not after that of every chart of the view (the longest task of a first
view was plotly.js's evaluation followed by all its charts). And what a view binds to a chart drawn so (the
Operator top-N bars' click, which filters the groups table) is bound once the chart is there.

plotly.js is held back until the view's data has been answered, so that the charts wait for it, as they do in a
fresh browser; a mutation observer (a DevTools init script, outside the page's CSP) notes which charts each of its
callbacks sees drawn: the callbacks of one task see what the whole task drew."""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.browser

CHARTS = ("op-type-pie", "op-core-pie", "op-top-bar")
OBSERVE = """(() => {
  const ids = IDS;
  window.__drawn = [];
  new MutationObserver(() => {
    const now = ids.filter((id) => document.querySelector(`#${id} .main-svg`));
    const last = window.__drawn[window.__drawn.length - 1] || [];
    if (now.length !== last.length) window.__drawn.push(now);
  }).observe(document, { childList: true, subtree: true });
})();""".replace("IDS", json.dumps(list(CHARTS)))


def hold_plotly(page, answers: list[str]):
    """plotly.js answered only once the Operator view's overview (its charts' data) has been answered."""
    def later(route):
        deadline = time.monotonic() + 20
        while not answers and time.monotonic() < deadline:
            page.wait_for_timeout(50)
        page.wait_for_timeout(300)  # (the view draws its charts' turns as soon as the data is in)
        route.continue_()

    page.on("response", lambda r: answers.append(r.url) if "/operators?" in r.url else None)
    page.route("**/plotly.min.js", later)


def test_charts_waiting_for_plotly_are_drawn_one_task_each_in_order(page, live_server, runs):
    answers: list[str] = []
    page.add_init_script(OBSERVE)
    hold_plotly(page, answers)
    page.goto(f"{live_server.base_url}/runs/{runs.ids['level1']}/operator")
    page.wait_for_function("(ids) => ids.every((id) => document.querySelector(`#${id} .main-svg`))",
                           arg=list(CHARTS), timeout=30_000)
    assert answers, "the view's data was not asked for"
    drawn = page.evaluate("() => window.__drawn")
    # one chart more at each step, in the order the view asked for them
    assert drawn == [list(CHARTS[:i]) for i in range(1, len(CHARTS) + 1)], drawn


def test_the_top_bars_click_filters_the_groups_table_on_a_first_view(page, live_server, runs):
    answers: list[str] = []
    hold_plotly(page, answers)
    page.goto(f"{live_server.base_url}/runs/{runs.ids['level1']}/operator")
    page.locator("#op-top-bar .bars path").first.wait_for(timeout=30_000)
    page.wait_for_function("() => document.querySelectorAll('#op-groups-table tbody tr').length > 1")
    # the last bar is the largest group (drawn bottom-up), the groups table's first row by total time
    name = page.evaluate("() => { const d = document.getElementById('op-top-bar');"
                         " return d.data[0].customdata[d.data[0].y.length - 1][2]; }")
    page.evaluate("() => { const d = document.getElementById('op-top-bar');"
                  " d.emit('plotly_click', { points: [{ pointIndex: d.data[0].y.length - 1 }] }); }")
    page.wait_for_function("(q) => document.querySelector('#op-groups .v-filter')?.value === q",
                           arg=name.split(" · ")[0])
    page.wait_for_function("() => !document.getElementById('op-groups-table').classList.contains('loading')")
    rows = page.locator("#op-groups-table tbody tr:not(.v-details-row)").count()
    assert rows >= 1
