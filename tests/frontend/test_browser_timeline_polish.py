"""Timeline polish in Debian's chromium on the real samples: deep Python stacks start folded (and unfold on a
click, for a search hit in a hidden level, and from Expand all), a tall lane's label stays in view while the lane
is, an arrow whose other end is off the side is a short stub that jumps there, and a run without a trace shows its
message and no ruler.

Waits use locators, expect() and page.evaluate() polled from Python: nothing here needs eval in the page, so the
tests also hold under the Content-Security-Policy."""

from __future__ import annotations

import math

import pytest
from playwright.sync_api import expect

from tests.browser_helpers import api, poll
from tests.conftest import needs_samples
from tests.samples import HAVE_REAL

pytestmark = [needs_samples, pytest.mark.browser]

READY = "window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"
FOLDED_ROWS = 5  # levels a folded lane shows (geometry.js)


def open_timeline(page, live_server, run_id, query=""):
    page.goto(f"{live_server.base_url}/runs/{run_id}/timeline{query}")
    expect(page.locator("#timeline")).to_have_attribute("data-ready", "true")
    poll(page, READY)


def lane(page, track_id):
    return page.evaluate("id => window.__timeline.lanes().find(l => l.track_id === id)", track_id)


def full_height(page, depths):
    geo = page.evaluate("window.__timeline.geometry")
    return 2 * geo["TRACK_PAD_PX"] + depths * geo["DEPTH_PX"]


def deep_python_track(live_server, run, rank=0):
    tracks = api(live_server, f"/api/runs/{run}/timeline/tracks")["tracks"]
    return max((t for t in tracks if t["rank"] == rank and t["kind"] == "python"), key=lambda t: t["max_depth"])


# ---- folded deep lanes -------------------------------------------------------------------------------------------

def test_deep_python_lane_starts_folded_and_the_npu_lanes_show(page, live_server):
    run = live_server.runs["level1"]
    py = deep_python_track(live_server, run)
    depths = py["max_depth"] + 1
    assert depths > (30 if HAVE_REAL else FOLDED_ROWS + 1)  # the torch op stacks this is about
    open_timeline(page, live_server, run)
    geo = page.evaluate("window.__timeline.geometry")
    row = lane(page, py["track_id"])
    assert row["height"] <= full_height(page, FOLDED_ROWS) + geo["DEPTH_PX"]
    # the device lanes of rank 0 are on the first screen now
    lanes = page.evaluate("window.__timeline.lanes()")
    assert any(x["visible"] and x["kind"] == "hardware" and x["rank"] == 0 and x["type"] == "track" for x in lanes)
    label = page.locator(f'#tl-labels .tl-lane[data-track-id="{py["track_id"]}"]')
    expect(label.locator(".more")).to_have_text(f"+{depths - FOLDED_ROWS} rows")
    # a click on its chevron shows every level; the choice outlives a reload
    label.locator(".twisty").click()
    poll(page, "([id, h]) => window.__timeline.lanes().find(l => l.track_id === id).height === h",
         [py["track_id"], full_height(page, depths)])
    expect(label.locator(".more")).to_have_count(0)
    open_timeline(page, live_server, run)
    assert lane(page, py["track_id"])["height"] == full_height(page, depths)
    # Fold all folds every deep lane, Expand all unfolds them
    page.click("#tl-fold-all")
    poll(page, "n => window.__timeline.lanes().every(l => !l.depths || l.depths <= n || l.folded)", FOLDED_ROWS + 1)
    assert lane(page, py["track_id"])["height"] < full_height(page, depths)
    page.click("#tl-unfold-all")
    poll(page, "() => window.__timeline.lanes().every(l => !l.folded)")
    assert lane(page, py["track_id"])["height"] == full_height(page, depths)


def test_a_hit_in_a_hidden_level_unfolds_its_lane(page, live_server):
    run = live_server.runs["level1"]
    py = deep_python_track(live_server, run)
    hits = api(live_server, f"/api/runs/{run}/timeline/search", q="ProfilerStep#", limit=50)["hits"]
    first = 0  # the search box selects the first match (by time) first
    assert hits["track_id"][first] == py["track_id"] and hits["depth"][first] >= FOLDED_ROWS
    open_timeline(page, live_server, run)
    assert lane(page, py["track_id"])["height"] < full_height(page, py["max_depth"] + 1)
    page.fill("#tl-search", "ProfilerStep#")
    page.press("#tl-search", "Enter")
    poll(page, "id => window.__timeline.selected === id", hits["slice_id"][first])
    poll(page, "([id, h]) => window.__timeline.lanes().find(l => l.track_id === id).height === h",
         [py["track_id"], full_height(page, py["max_depth"] + 1)])
    # and the slice's level is on the screen
    row = lane(page, py["track_id"])
    geo = page.evaluate("window.__timeline.geometry")
    canvas = page.evaluate("window.__timeline.canvasRect")
    y = row["top"] + geo["TRACK_PAD_PX"] + hits["depth"][first] * geo["DEPTH_PX"]
    assert canvas["top"] <= y and y + geo["SLICE_PX"] <= canvas["top"] + canvas["height"]


# ---- sticky lane labels ------------------------------------------------------------------------------------------

def test_a_tall_lane_keeps_its_label_in_view(page, live_server):
    run = live_server.runs["level1"]
    py = deep_python_track(live_server, run)
    open_timeline(page, live_server, run)
    label = page.locator(f'#tl-labels .tl-lane[data-track-id="{py["track_id"]}"]')
    if label.get_attribute("data-folded") == "true":
        label.locator(".twisty").click()
    height = full_height(page, py["max_depth"] + 1)
    poll(page, "([id, h]) => window.__timeline.lanes().find(l => l.track_id === id).height === h",
         [py["track_id"], height])
    canvas = page.evaluate("window.__timeline.canvasRect")
    labels = page.locator("#tl-labels").bounding_box()
    page.mouse.move(labels["x"] + labels["width"] / 2, labels["y"] + labels["height"] / 2)
    for scroll in (min(200, height // 3), min(400, 2 * height // 3), height - 30):  # 200, 400 in the real one
        # scroll the lanes so the lane's top is `scroll` px above the top edge
        delta = lane(page, py["track_id"])["top"] - canvas["top"] + scroll
        page.mouse.wheel(0, delta)
        row = poll(page, "([id, t]) => { const l = window.__timeline.lanes().find(l => l.track_id === id);"
                         " return Math.abs(l.top - t) < 1 && l; }", [py["track_id"], canvas["top"] - scroll])
        name = label.locator(".name").bounding_box()
        assert name["y"] >= canvas["top"] - 0.5, scroll  # in view...
        assert name["y"] + name["height"] <= row["top"] + row["height"] + 0.5, scroll  # ...and inside its lane
    page.mouse.wheel(0, -10 * height)
    poll(page, "id => window.__timeline.lanes().find(l => l.track_id === id).visible", py["track_id"])
    row = poll(page, "([id, t]) => { const l = window.__timeline.lanes().find(l => l.track_id === id);"
                     " return l.top >= t - 0.5 && l; }", [py["track_id"], canvas["top"]])
    assert abs(label.locator(".name").bounding_box()["y"] - row["top"]) < 4  # back at the lane's top


# ---- arrows to the side ----------------------------------------------------------------------------------------------

def test_an_arrow_to_an_end_off_the_side_is_a_stub_that_jumps_there(page, live_server):
    run = live_server.runs["level1"]
    flows = api(live_server, f"/api/runs/{run}/timeline/flows", cat="async_npu")
    # an op whose kernels start long after it: zoomed onto the op, they are far off to the right
    far = [i for i in range(flows["count"]) if flows["src_slice_id"][i] is not None
           and flows["dst_slice_id"][i] is not None and flows["dst_ts_ns"][i] - flows["src_ts_ns"][i] > 1_000_000]
    op = flows["src_slice_id"][far[0]]
    kernels = {flows["dst_slice_id"][i] for i in range(flows["count"]) if flows["src_slice_id"][i] == op}
    open_timeline(page, live_server, run, f"?slice={op}")
    arrows = poll(page, "id => { const a = window.__timeline.arrows.filter(a => a.src_slice_id === id);"
                        " return a.length && window.__timeline.pending() === 0 && a; }", op)
    canvas = page.evaluate("window.__timeline.canvasRect")
    right = canvas["left"] + canvas["width"]
    assert all(a["x2"] > right for a in arrows)  # every kernel is off to the right
    for a in arrows:
        assert a.get("clip") == "dst", a
        assert canvas["left"] <= a["sx"] <= right and a["sx"] > a["px"]
        assert math.hypot(a["sx"] - a["px"], a["sy"] - a["py"]) <= 60  # a stub, not a line to the far end
    # clicking the stub's chevron goes to a kernel
    tip = arrows[0]
    page.mouse.click(tip["sx"] - 1, tip["sy"])
    selected = poll(page, "k => { const s = window.__timeline.selected; return k.includes(s) && s; }",
                    sorted(kernels))
    k = api(live_server, f"/api/runs/{run}/timeline/slices/{selected}")
    # ...and the view moves there (the selection may show a frame before the view has moved)
    poll(page, "t => { const v = document.querySelector('#timeline').dataset;"
               " return BigInt(v.viewStartNs) <= BigInt(t) && BigInt(t) < BigInt(v.viewEndNs); }",
         str(int(k["start_abs_ns"])))


def test_flows_with_no_end_in_view_are_not_drawn(page, live_server):
    run = live_server.runs["level1"]
    info = api(live_server, f"/api/runs/{run}")
    if HAVE_REAL:
        start = int(info["start_ns"]) + 58_000_000
    else:  # 200 µs from one of the run's middle flows
        flows = api(live_server, f"/api/runs/{run}/timeline/flows", cat="async_npu")
        start = int(flows["origin_ns"]) + flows["src_ts_ns"][flows["count"] // 2] - 50_000
    open_timeline(page, live_server, run, f"?start_ns={start}&end_ns={start + 200_000}")
    page.click("#tl-flows-btn")
    page.check('#tl-flows-pop input[data-cat="async_npu"]')
    arrows = poll(page, "() => window.__timeline.pending() === 0 && window.__timeline.arrows.length"
                        " && window.__timeline.arrows")
    canvas = page.evaluate("window.__timeline.canvasRect")
    left, right = canvas["left"], canvas["left"] + canvas["width"]
    for a in arrows:
        assert left <= a["x1"] <= right or left <= a["x2"] <= right, a
        if a.get("clip"):
            assert math.hypot(a["sx"] - a["px"], a["sy"] - a["py"]) <= 60


# ---- a run without a trace -----------------------------------------------------------------------------------------

def test_a_run_without_trace_has_no_ruler(page, live_server, view_runs):
    page.goto(f"{live_server.base_url}/runs/{view_runs['st4']}/timeline")
    expect(page.locator("#timeline")).to_have_attribute("data-no-trace", "true")
    expect(page.locator("#tl-notrace")).to_be_visible()
    expect(page.locator("#tl-ruler")).to_be_hidden()
    expect(page.locator("#tl-span")).to_be_hidden()  # no "20 ns" readout either
