"""The timeline page in Debian's chromium (Playwright, headless) on the real samples: lanes, keys, clicking a
kernel, flow arrows, search, range selection, URL state. Positions are computed from the API + the view range
(the #timeline data-view-* attributes) + the lane labels in the DOM, never hard-coded."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import needs_samples

pytestmark = [needs_samples, pytest.mark.browser]

# waits are functions, never bare expressions: the page runs under the real CSP, which blocks the eval those need
READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"


def api(live_server, path, **params):
    resp = httpx.get(f"{live_server.base_url}{path}", params=params, timeout=10)
    resp.raise_for_status()
    return resp.json()


def open_timeline(page, live_server, name="level1", query=""):
    page.goto(f"{live_server.base_url}/runs/{live_server.runs[name]}/timeline{query}")
    page.wait_for_function(READY)


def view(page) -> tuple[int, int]:
    el = page.locator("#timeline")
    return int(el.get_attribute("data-view-start-ns")), int(el.get_attribute("data-view-end-ns"))


def settle(page):
    page.wait_for_function(READY)
    page.evaluate("window.__timeline.redraw()")


def press_and_wait(page, key) -> tuple[int, int]:
    before = view(page)
    page.keyboard.press(key)
    page.wait_for_function(
        "([a, b]) => { const d = document.getElementById('timeline').dataset;"
        " return d.viewStartNs !== a || d.viewEndNs !== b; }", arg=[str(before[0]), str(before[1])])
    return view(page)


def lane_titles(page) -> list[dict]:
    return page.evaluate("window.__timeline.lanes()")


def track(live_server, run, rank, kind, thread=None):
    tracks = api(live_server, f"/api/runs/{run}/timeline/tracks")["tracks"]
    for t in tracks:
        if t["rank"] == rank and t["kind"] == kind and (thread is None or t["thread_name"] == thread):
            return t
    raise AssertionError(f"no {kind} track {thread} on rank {rank}")


def slice_point(page, track_id, ts_abs, dur, depth):
    """Page coordinates of the middle of a slice, from the view range and the lane's label row."""
    page.evaluate("id => window.__timeline.revealTrack(id)", track_id)
    settle(page)
    start, end = view(page)
    canvas = page.evaluate("window.__timeline.canvasRect")
    geo = page.evaluate("window.__timeline.geometry")
    label = page.locator(f'#tl-labels .tl-lane[data-track-id="{track_id}"]').bounding_box()
    mid = max(ts_abs, start) + (min(ts_abs + dur, end) - max(ts_abs, start)) / 2
    x = canvas["left"] + (mid - start) / (end - start) * canvas["width"]
    y = label["y"] + geo["TRACK_PAD_PX"] + depth * geo["DEPTH_PX"] + geo["SLICE_PX"] / 2
    return x, y


# ---- lanes ---------------------------------------------------------------------------------------------------------

def test_level1_lanes_per_rank(page, live_server):
    open_timeline(page, live_server, "level1")
    lanes = lane_titles(page)
    for rank in (0, 1):
        names = {lane["title"] for lane in lanes if lane["rank"] == rank}
        assert {"Python", "CANN", "Ascend Hardware", "Overlap Analysis"} <= names, names
        assert {"HCCL", "Communication"} & names, names
        assert {"Computing", "Communication(Not Overlapped)", "Free"} <= names
        assert any(n.startswith("Stream ") for n in names) and any(n.startswith("Plane ") for n in names)
    dom = page.locator("#tl-labels .tl-lane .name").all_text_contents()
    assert "Ascend Hardware" in dom and "Overlap Analysis" in dom and "Rank 1" in dom


def test_level0_lanes(page, live_server):
    open_timeline(page, live_server, "level0")
    names = {lane["title"] for lane in lane_titles(page)}
    assert {"Python", "Ascend Hardware", "Overlap Analysis"} <= names
    assert {"HCCL", "Communication"} & names
    assert "CANN" not in names


# ---- keys ----------------------------------------------------------------------------------------------------------

def test_keyboard_zoom_pan_undo_reset(page, live_server):
    open_timeline(page, live_server, "level1")
    page.locator("#timeline").focus()
    full = view(page)
    zoomed = press_and_wait(page, "w")
    assert zoomed[1] - zoomed[0] < full[1] - full[0]
    assert full[0] <= zoomed[0] and zoomed[1] <= full[1]
    out = press_and_wait(page, "s")
    assert out[1] - out[0] > zoomed[1] - zoomed[0]
    press_and_wait(page, "w")
    here = press_and_wait(page, "w")
    left = press_and_wait(page, "a")
    assert left[0] < here[0] and left[1] - left[0] == here[1] - here[0]
    right = press_and_wait(page, "d")
    assert right[0] > left[0]
    assert press_and_wait(page, "Backspace") == left
    assert press_and_wait(page, "Control+0") == full
    page.keyboard.press("ArrowDown")
    page.keyboard.press("q")
    assert "collapsed" in page.locator("#tl-panel").get_attribute("class")
    page.keyboard.press("q")
    page.keyboard.press("?")
    assert page.locator("#tl-help").is_visible()
    page.keyboard.press("Escape")
    assert not page.locator("#tl-help").is_visible()


# ---- selection, flows ------------------------------------------------------------------------------------------------

def test_click_a_kernel_shows_its_details(page, live_server):
    run = live_server.runs["level1"]
    hw = track(live_server, run, 0, "hardware", "Stream 2")
    body = api(live_server, f"/api/runs/{run}/timeline/slices", track_id=hw["track_id"], width_px=20000)
    origin = int(body["origin_ns"])
    t = body["tracks"][0]
    # a real kernel (not an event wait) of moderate length
    candidates = [i for i in range(t["count"]) if "WAIT" not in body["names"][t["name_id"][i]].upper()]
    i = max(candidates, key=lambda j: t["dur_ns"][j])
    kernel_id, name = t["slice_id"][i], body["names"][t["name_id"][i]]
    ts, dur, depth = t["ts_ns"][i] + origin, t["dur_ns"][i], t["depth"][i]
    open_timeline(page, live_server, "level1")
    page.evaluate("([a, b]) => window.__timeline.setView(a, b)", [str(ts - dur), str(ts + 2 * dur)])
    x, y = slice_point(page, hw["track_id"], ts, dur, depth)
    page.mouse.click(x, y)
    page.wait_for_function("id => document.getElementById('timeline').dataset.selectedSliceId === String(id)",
                           arg=kernel_id)
    detail = page.locator("#tl-detail")
    detail.locator(".title").wait_for()
    assert detail.locator(".title").text_content() == name
    assert "Ascend Hardware" in detail.text_content() and str(ts) in detail.text_content()


def test_async_npu_arrow_goes_to_the_kernel(page, live_server):
    run = live_server.runs["level1"]
    flows = api(live_server, f"/api/runs/{run}/timeline/flows", cat="async_npu")
    origin = int(flows["origin_ns"])
    i = next(j for j in range(flows["count"]) if flows["src_slice_id"][j] is not None
             and flows["dst_slice_id"][j] is not None)
    op, kernel = flows["src_slice_id"][i], flows["dst_slice_id"][i]
    open_timeline(page, live_server, "level1", f"?slice={op}")
    page.wait_for_function("id => window.__timeline.selected === id && window.__timeline.arrows.length > 0", arg=op)
    settle(page)
    arrows = page.evaluate("window.__timeline.arrows")
    mine = [a for a in arrows if a["cat"] == "async_npu" and a["src_slice_id"] == op]
    assert mine and mine[0]["dst_slice_id"] == kernel and mine[0]["selected"]
    # the arrow ends where the kernel starts, on the kernel's lane
    k = api(live_server, f"/api/runs/{run}/timeline/slices/{kernel}")
    x_kernel = page.evaluate("t => window.__timeline.xOf(t)", str(flows["dst_ts_ns"][i] + origin))
    assert abs(mine[0]["x2"] - x_kernel) < 1.5
    lanes = {lane["track_id"]: lane for lane in lane_titles(page) if lane["track_id"] is not None}
    lane = lanes[k["track_id"]]
    assert lane["top"] <= mine[0]["y2"] <= lane["top"] + lane["height"]
    # following the arrow from the panel selects the kernel
    page.locator('#tl-detail li[data-flow-id] a.jump').first.click()
    page.wait_for_function("id => window.__timeline.selected === id", arg=kernel)


def test_flow_category_toggle_draws_flows_in_view(page, live_server):
    open_timeline(page, live_server, "level1")
    page.click("#tl-flows-btn")
    page.check('#tl-flows-pop input[data-cat="HostToDevice"]')
    page.wait_for_function("() => window.__timeline.arrows.some(a => a.cat === 'HostToDevice')")
    assert all(a["cat"] == "HostToDevice" for a in page.evaluate("window.__timeline.arrows"))


# ---- search, range, URL ----------------------------------------------------------------------------------------------

def test_search_finds_and_selects(page, live_server):
    run = live_server.runs["level1"]
    hits = api(live_server, f"/api/runs/{run}/timeline/search", q="aten::addmm", limit=3)
    first, second = hits["hits"]["slice_id"][:2]
    open_timeline(page, live_server, "level1")
    page.fill("#tl-search", "aten::addmm")
    page.press("#tl-search", "Enter")
    page.wait_for_function("id => window.__timeline.selected === id", arg=first)
    assert page.locator("#tl-search-count").text_content() == f"1 / {hits['total']}"
    page.press("#tl-search", "Enter")
    page.wait_for_function("id => window.__timeline.selected === id", arg=second)
    page.press("#tl-search", "Shift+Enter")
    page.wait_for_function("id => window.__timeline.selected === id", arg=first)
    start, end = view(page)
    ts = int(hits["origin_ns"]) + hits["hits"]["ts_ns"][0]
    assert start <= ts < end
    page.locator(".tl-panel-tab[data-tab=find]").click()
    assert page.locator("#tl-find tr.tl-find-row").count() == hits["total"]


def test_ruler_drag_selects_a_range_with_stats(page, live_server):
    open_timeline(page, live_server, "level1")
    box = page.locator("#tl-ruler").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 10)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 10, steps=4)
    page.mouse.up()
    page.locator("#tl-range-table tr.totals").wait_for()
    assert page.locator("#tl-range-table tbody tr").count() > 2
    full = view(page)
    page.locator("#timeline").focus()
    zoomed = press_and_wait(page, "Shift+Z")
    span = full[1] - full[0]
    assert abs((zoomed[1] - zoomed[0]) - 0.2 * span) < 0.01 * span


def test_url_holds_view_and_selection(page, live_server):
    run = live_server.runs["level1"]
    info = api(live_server, f"/api/runs/{run}")
    lo, hi = int(info["start_ns"]), int(info["end_ns"])
    start = lo + min(40_000_000, (hi - lo) // 3)  # 40 ms into the real sample
    end = start + min(3_000_000, (hi - lo) // 20)
    open_timeline(page, live_server, "level1", f"?start_ns={start}&end_ns={end}")
    assert view(page) == (start, end)
    page.locator("#timeline").focus()
    new = press_and_wait(page, "w")
    page.wait_for_function("s => location.search.includes('start_ns=' + s)", arg=str(new[0]))


def test_screenshot(page, live_server, artifacts_dir):
    """A representative view for eyes: rank 0, a backward-thread op selected, async_npu flows drawn."""
    run = live_server.runs["level1"]
    tracks = api(live_server, f"/api/runs/{run}/timeline/tracks")["tracks"]
    backward = next(t for t in tracks if t["rank"] == 0 and t["kind"] == "python" and 0 < t["max_depth"] < 15)
    flows = api(live_server, f"/api/runs/{run}/timeline/flows", cat="async_npu")
    # an op whose kernel starts soon after it, so both ends and the arrow are on screen
    mine = [i for i in range(flows["count"]) if flows["src_track_id"][i] == backward["track_id"]
            and flows["dst_slice_id"][i] is not None and 0 < flows["dst_ts_ns"][i] - flows["src_ts_ns"][i] < 500_000]
    i = mine[len(mine) // 2]
    start = int(flows["origin_ns"]) + flows["src_ts_ns"][i] - 300_000
    query = f"?rank=0&slice={flows['src_slice_id'][i]}&start_ns={start}&end_ns={start + 1_200_000}"
    open_timeline(page, live_server, "level1", query)
    page.wait_for_function("() => window.__timeline.arrows.length > 0")
    settle(page)
    page.screenshot(path=str(artifacts_dir / "timeline.png"))


def test_mouse_and_range_keys(page, live_server):
    open_timeline(page, live_server, "level1")
    canvas = page.evaluate("window.__timeline.canvasRect")
    cx, cy = canvas["left"] + canvas["width"] / 2, canvas["top"] + 60
    full = view(page)
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -400)
    page.wait_for_function("s => document.getElementById('timeline').dataset.viewStartNs !== s", arg=str(full[0]))
    wheeled = view(page)
    assert wheeled[1] - wheeled[0] < full[1] - full[0]
    # drag right: earlier times come into view, the span stays
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx + 200, cy, steps=4)
    page.mouse.up()
    dragged = view(page)
    assert dragged[0] < wheeled[0] and dragged[1] - dragged[0] == wheeled[1] - wheeled[0]
    # Alt+drag zooms to the dragged range
    x0, x1 = canvas["left"] + canvas["width"] * 0.25, canvas["left"] + canvas["width"] * 0.5
    page.keyboard.down("Alt")
    page.mouse.move(x0, cy)
    page.mouse.down()
    page.mouse.move(x1, cy, steps=4)
    page.mouse.up()
    page.keyboard.up("Alt")
    zoomed = view(page)
    span = dragged[1] - dragged[0]
    assert abs((zoomed[1] - zoomed[0]) - span / 4) < span * 0.01
    # M sets the range to the selected slice, Shift+Z zooms to it
    run = live_server.runs["level1"]
    hit = api(live_server, f"/api/runs/{run}/timeline/search", q="ProfilerStep#", limit=1)
    sid = hit["hits"]["slice_id"][0]
    page.evaluate("id => window.__timeline.select(id)", sid)
    page.wait_for_function("id => window.__timeline.selected === id && document.querySelector('#tl-detail .title')",
                           arg=sid)
    page.locator("#timeline").focus()
    page.keyboard.press("m")
    page.locator("#tl-range-table tr.totals").wait_for()
    step = press_and_wait(page, "Shift+Z")
    ts = int(hit["origin_ns"]) + hit["hits"]["ts_ns"][0]
    assert step == (ts, ts + hit["hits"]["dur_ns"][0])


def test_rank_filter_and_pins(page, live_server):
    open_timeline(page, live_server, "level1")
    page.select_option("#rank-select", "1")
    page.wait_for_function("() => window.__timeline.lanes().every(l => l.rank === 1)")
    assert "rank=1" in page.url
    page.select_option("#rank-select", "")
    page.wait_for_function("() => window.__timeline.lanes().some(l => l.rank === 0)")
    for rank in (0, 1):
        page.locator(f'#tl-labels .tl-lane.lane-group[data-kind="overlap"][data-rank="{rank}"] .pin').click()
    pinned = [lane["title"] for lane in lane_titles(page) if lane["pinned"]]
    assert pinned[0] == "0_Overlap Analysis" and "1_Overlap Analysis" in pinned and "Free" in pinned
    assert page.locator("#tl-labels-pinned .tl-lane").count() == len(pinned)
    lanes = lane_titles(page)
    assert all(lane["visible"] for lane in lanes if lane["pinned"])


def test_generated_two_rank_run(page, live_server):
    """A generated run: both ranks show every lane kind, and W/S/Backspace work there too."""
    open_timeline(page, live_server, "generated")
    lanes = lane_titles(page)
    text = " ".join(str(v) for lane in lanes for v in lane.values())
    for name in ("Python", "CANN", "Ascend Hardware", "HCCL", "Overlap Analysis", "Rank 0", "Rank 1"):
        assert name in text, name
    start, end = view(page)
    zoomed = press_and_wait(page, "w")
    assert zoomed[1] - zoomed[0] < end - start
    restored = press_and_wait(page, "Backspace")
    assert restored == (start, end)
