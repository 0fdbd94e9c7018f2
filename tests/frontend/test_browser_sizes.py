"""The UI at the window sizes people use (1280×720, 1920×1080): no page scrolls sideways, the top bar keeps every
link whole (the "API" link was cut at 1280), the timeline's toolbar stays on one line and leaves the lanes room, and
every table's last column is either in view or behind an edge that fades out (``common/overflow.js``), with the
box scrolling to it. Every view of a run, the runs page and Compare; the timeline's Critical Path panel too."""

from __future__ import annotations

import pytest

from ascendscope.server.pages import VIEW_NAMES
from tests.browser_helpers import OpenRequests, settle

pytestmark = pytest.mark.browser

SIZES = [(1280, 720), (1920, 1080)]
LAYOUT = """() => {
  const de = document.documentElement;
  const bar = document.querySelector('.topbar');
  const links = [...bar.querySelectorAll('.topbar-right a')].map((a) => {
    const r = a.getBoundingClientRect();
    return { text: a.textContent.trim(), left: r.left, right: r.right, cut: a.scrollWidth > a.clientWidth + 1 };
  });
  const tables = [...document.querySelectorAll('table')].filter((t) => t.offsetParent && t.tHead).map((t) => {
    const ths = [...t.tHead.rows[0].cells];
    const last = ths[ths.length - 1];
    let box = t.parentElement;
    while (box && box !== document.body && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
    const b = box && box !== document.body ? box.getBoundingClientRect() : { left: 0, right: innerWidth };
    const scrolls = box && box !== document.body && ['auto', 'scroll'].includes(getComputedStyle(box).overflowX)
      && box.scrollWidth > box.clientWidth;
    return { id: t.id || t.className, last: last.textContent.trim(), right: last.getBoundingClientRect().right,
      boxRight: b.right, scrolls, cue: !!box?.classList?.contains('more-right'),
      textCut: last.scrollWidth > last.clientWidth + 1 };
  });
  return { page: [de.scrollWidth, de.clientWidth], bar: [bar.scrollWidth, bar.clientWidth], links, tables,
           width: innerWidth };
}"""


def check_layout(page, where: str) -> dict:
    got = page.evaluate(LAYOUT)
    assert got["page"][0] <= got["page"][1], f"{where}: the page scrolls sideways {got['page']}"
    assert got["bar"][0] <= got["bar"][1], f"{where}: the top bar overflows {got['bar']}"
    for link in got["links"]:
        assert 0 <= link["left"] and link["right"] <= got["width"] and not link["cut"], f"{where}: {link}"
    assert {"Runs", "API"} <= {link["text"] for link in got["links"]}
    for t in got["tables"]:
        assert not t["textCut"], f"{where}: {t['id']}'s last header is cut: {t}"
        if t["right"] > t["boxRight"] + 1:  # the last column is out of view: the box must scroll to it, and say so
            assert t["scrolls"] and t["cue"], f"{where}: {t['id']}'s last column '{t['last']}' is clipped: {t}"
    return got


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_page_fits_the_window(page, live_server, size):
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.set_default_timeout(30_000)
    rid = live_server.runs["level1"]
    urls = {"runs": "/", "compare": f"/compare?a={rid}&b={rid}&rank_a=0&rank_b=1",
            **{v: f"/runs/{rid}/{v}?rank=0" for v in VIEW_NAMES}}
    requests = OpenRequests(page)
    seen_tables = 0
    for name, url in urls.items():
        page.goto(live_server.base_url + url, wait_until="domcontentloaded")
        settle(page, requests)  # (the tables' boxes are measured as they render)
        seen_tables += len(check_layout(page, f"{name} at {size}")["tables"])
    assert seen_tables >= 15  # (the check read the views' tables)


def test_the_timeline_keeps_one_toolbar_line_and_room_for_lanes(page, live_server):
    page.set_viewport_size({"width": 1280, "height": 720})
    page.set_default_timeout(30_000)
    requests = OpenRequests(page)
    page.goto(f"{live_server.base_url}/runs/{live_server.runs['generated']}/timeline")
    page.wait_for_function("() => window.__timeline && window.__timeline.ready")
    bar = page.evaluate("""() => { const tb = document.querySelector('.tl-toolbar');
      const kids = [...tb.querySelectorAll('button, a.btn, input')].filter((b) => b.offsetParent);
      return { height: tb.getBoundingClientRect().height,
               tallest: Math.max(...kids.map((b) => b.getBoundingClientRect().height)),
               overflow: tb.scrollWidth - tb.clientWidth,
               lanes: document.getElementById('tl-main').getBoundingClientRect().height }; }""")
    assert bar["height"] <= 40 and bar["tallest"] <= 30 and bar["overflow"] <= 0, bar  # one line, no label wraps
    assert bar["lanes"] >= 300, bar  # (230 px were left at this size)
    check_layout(page, "timeline at 1280x720")
    # the Critical Path page of the panel at 1600 wide: its tables' last column ("Share") in view
    page.set_viewport_size({"width": 1600, "height": 900})
    page.locator('.tl-panel-tab[data-tab="critpath"]').click()
    page.get_by_role("button", name="Load").click()
    page.locator("#cp-summary").wait_for()
    settle(page, requests)
    got = check_layout(page, "critical path at 1600x900")
    assert [t["last"] for t in got["tables"]].count("Share") >= 2
