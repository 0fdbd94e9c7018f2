"""System View and the timeline workflow in Debian's chromium, on level1 and the generated 2-rank run: the System
View pages against the API, Time Range Analysis, the right-click menu, markers (K, drag, rename, region, kept
across reloads in the shared store), lanes pinned across ranks and hidden, per-rank offsets (typed, and "align on
this slice"), and Range Stats' self time and instances.

Positions come from the API, the view range and the lane labels; waits use locators, expect() and evaluate()
polled from Python (the page runs under the real Content-Security-Policy)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser_helpers import api, poll
from tests.conftest import needs_samples

pytestmark = [needs_samples, pytest.mark.browser]


def settle(page):
    poll(page, "window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0")
    page.evaluate("window.__timeline.redraw()")


def open_timeline(page, live_server, name="level1", query=""):
    page.goto(f"{live_server.base_url}/runs/{live_server.runs[name]}/timeline{query}")
    expect(page.locator("#timeline")).to_have_attribute("data-ready", "true")
    settle(page)


def view(page):
    el = page.locator("#timeline")
    return int(el.get_attribute("data-view-start-ns")), int(el.get_attribute("data-view-end-ns"))


def tracks_of(live_server, run):
    return api(live_server, f"/api/runs/{run}/timeline/tracks")["tracks"]


def select_range(page, a=0.30, b=0.45):
    box = page.locator("#tl-ruler").bounding_box()
    y = box["y"] + box["height"] - 8
    page.mouse.move(box["x"] + box["width"] * a, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * b, y, steps=4)
    page.mouse.up()
    return poll(page, "window.__timeline.range")


def slice_point(page, track_id, ts_abs, dur, depth, shift=0):
    """Page coordinates of the middle of a slice drawn `shift` ns from its recorded time."""
    page.evaluate("id => window.__timeline.revealTrack(id)", track_id)
    settle(page)
    start, end = view(page)
    canvas = page.evaluate("window.__timeline.canvasRect")
    geo = page.evaluate("window.__timeline.geometry")
    label = page.locator(f'#tl-labels .tl-lane[data-track-id="{track_id}"]').first.bounding_box()
    a, b = max(ts_abs + shift, start), min(ts_abs + shift + dur, end)
    x = canvas["left"] + ((a + b) / 2 - start) / (end - start) * canvas["width"]
    y = label["y"] + geo["TRACK_PAD_PX"] + depth * geo["DEPTH_PX"] + geo["SLICE_PX"] / 2
    return x, y


def menu_item(page, action):
    return page.locator(f'#tl-menu .tl-menu-item[data-action="{action}"]')


def open_system_view(page):
    page.locator('.tl-panel-tab[data-tab="sysview"]').click()
    expect(page.locator("#tl-sysview")).to_have_attribute("data-sv-state", "ready")


# ---- System View ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["level1", "generated"])
def test_system_view_overall_metrics_and_their_slices(page, live_server, name):
    run = live_server.runs[name]
    want = api(live_server, f"/api/runs/{run}/systemview/overall", rank=1)
    open_timeline(page, live_server, name)
    open_system_view(page)
    page.locator("#sv-rank").select_option("1")
    expect(page.locator("#sv-table tr.sv-row").first).to_be_visible()
    poll(page, "() => window.__timeline.systemView.rank === 1")
    expect(page.locator("#tl-sysview")).to_have_attribute("data-sv-state", "ready")
    computing = want["rows"][0]
    row = page.locator(f'#sv-table tr.sv-row[data-key="{computing["key"]}"]')
    expect(row.locator("td").nth(3)).to_have_text(f'{computing["count"]:,}')
    # the accelerator cores show under Computing; E2E closes the tree
    for core in computing["children"]:
        expect(page.locator(f'#sv-table tr.sv-row[data-key="{core["key"]}"]')).to_be_visible()
    expect(page.locator("#sv-table tr.sv-row").last).to_have_attribute("data-key", "e2e")
    row.click()
    expect(page.locator("#sv-details tr.sv-slice")).to_have_count(min(computing["count"], 50))
    first = page.locator("#sv-details tr.sv-slice").first
    slice_id = int(first.get_attribute("data-slice-id"))
    first.click()
    poll(page, "id => window.__timeline.selected === id", slice_id)
    expect(page.locator("#tl-sysview")).to_be_visible()  # the list stays up to click the next one


def test_system_view_starts_on_the_rank_the_page_shows(page, live_server):
    open_timeline(page, live_server, query="?rank=1")
    open_system_view(page)
    expect(page.locator("#sv-rank")).to_have_value("1")
    assert page.evaluate("window.__timeline.systemView.rank") == 1


def test_python_page_sorts_filters_and_lists_slices(page, live_server):
    run = live_server.runs["level1"]
    open_timeline(page, live_server)
    open_system_view(page)
    page.locator('.sv-page-btn[data-page="python"]').click()
    expect(page.locator("#sv-table tr.sv-row").first).to_be_visible()
    want = api(live_server, f"/api/runs/{run}/systemview/python", rank=0, limit=100)
    keys = page.locator("#sv-table tr.sv-row").evaluate_all("rows => rows.map(r => r.dataset.key)")
    assert keys == [r["key"] for r in want["rows"]]
    expect(page.locator("#sv-table th", has_text="Self")).to_be_visible()
    page.locator("#sv-table th", has_text="Count").click()
    by_count = api(live_server, f"/api/runs/{run}/systemview/python", rank=0, limit=100, sort="count")
    expect(page.locator("#sv-table tr.sv-row").first).to_have_attribute("data-key", by_count["rows"][0]["key"])
    page.locator(".sv-filter").fill("aten::copy_")
    page.locator(".sv-filter").press("Enter")
    expect(page.locator("#sv-table tr.sv-row")).to_have_count(1)
    page.locator("#sv-table tr.sv-row").click()
    listed = api(live_server, f"/api/runs/{run}/systemview/python/slices", rank=0, key="aten::copy_", limit=50)
    expect(page.locator("#sv-details tr.sv-slice")).to_have_count(len(listed["rows"]))


def test_time_range_analysis_scopes_system_view(page, live_server):
    run = live_server.runs["level1"]
    open_timeline(page, live_server)
    rng = select_range(page, 0.35, 0.5)
    canvas = page.locator("#tl-canvas").bounding_box()
    page.mouse.click(canvas["x"] + canvas["width"] * 0.4, canvas["y"] + 40, button="right")
    menu_item(page, "range-analysis").click()
    expect(page.locator("#tl-sysview")).to_be_visible()
    assert poll(page, "window.__timeline.systemView.scope") == rng
    want = api(live_server, f"/api/runs/{run}/systemview/overall", rank=0, **rng)
    expect(page.locator("#sv-scope")).to_contain_text("Time range")
    computing = want["rows"][0]
    row = page.locator(f'#sv-table tr.sv-row[data-key="{computing["key"]}"]')
    expect(row.locator("td").nth(3)).to_have_text(f'{computing["count"]:,}')
    page.locator("#sv-whole-run").click()
    whole = api(live_server, f"/api/runs/{run}/systemview/overall", rank=0)
    expect(row.locator("td").nth(3)).to_have_text(f'{whole["rows"][0]["count"]:,}')
    assert page.evaluate("window.__timeline.systemView.scope") is None


def test_show_in_system_view_from_a_slice(page, live_server):
    run = live_server.runs["level1"]
    tracks = tracks_of(live_server, run)
    comm = next(t for t in tracks if t["rank"] == 1 and t["kind"] == "communication"
                and t["thread_name"].startswith("Group"))
    op = api(live_server, f"/api/runs/{run}/systemview/communication/slices", rank=1, key="hcom_allReduce_",
             sort="start", order="asc")["rows"][0]
    origin = int(api(live_server, f"/api/runs/{run}")["origin_ns"])
    open_timeline(page, live_server)
    x, y = slice_point(page, comm["track_id"], origin + op["ts_ns"], op["dur_ns"], 0)
    page.mouse.click(x, y, button="right")
    menu_item(page, "system-view").click()
    view = poll(page, "window.__timeline.systemView.page === 'communication' && window.__timeline.systemView")
    assert view["rank"] == 1
    expect(page.locator("#sv-table tr.sv-row.current")).to_have_attribute("data-key", "hcom_allReduce_")
    expect(page.locator(f'#sv-details tr.sv-slice[data-slice-id="{op["slice_id"]}"]')).to_be_visible()


def test_show_in_system_view_from_an_overlap_slice(page, live_server):
    """An Overlap Analysis slice opens Overall Metrics on its row (a name with parentheses: the row's key)."""
    run = live_server.runs["level1"]
    exposed = next(t for t in tracks_of(live_server, run) if t["rank"] == 0 and t["kind"] == "overlap"
                   and t["thread_name"] == "Communication(Not Overlapped)")
    overall = api(live_server, f"/api/runs/{run}/systemview/overall", rank=0)
    row = next(c for r in overall["rows"] for c in r["children"] if c["name"] == "Not Overlapped")
    longest = api(live_server, f"/api/runs/{run}/systemview/overall/slices", rank=0, key=row["key"])["rows"][0]
    origin = int(api(live_server, f"/api/runs/{run}")["origin_ns"])
    open_timeline(page, live_server)
    x, y = slice_point(page, exposed["track_id"], origin + longest["ts_ns"], longest["dur_ns"], 0)
    page.mouse.click(x, y, button="right")
    menu_item(page, "system-view").click()
    expect(page.locator("#sv-table tr.sv-row.current")).to_have_attribute("data-key", row["key"])
    expect(page.locator(f'#sv-details tr.sv-slice[data-slice-id="{longest["slice_id"]}"]')).to_be_visible()


# ---- the right-click menu --------------------------------------------------------------------------------------------

def test_context_menu_offers_the_view_actions_with_shortcuts(page, live_server):
    open_timeline(page, live_server)
    canvas = page.locator("#tl-canvas").bounding_box()
    page.mouse.click(canvas["x"] + 400, canvas["y"] + 30, button="right")
    menu = page.locator("#tl-menu")
    expect(menu).to_be_visible()
    labels = menu.locator(".tl-menu-item .label").all_inner_texts()
    for label in ("Time Range Analysis", "Fit to screen", "Zoom to selection", "Reset zoom", "Add marker here",
                  "Hide lane", "Pin lane"):
        assert any(x.startswith(label) for x in labels), (label, labels)
    expect(menu_item(page, "zoom-range").locator(".key")).to_have_text("Shift+Z")
    expect(menu_item(page, "undo").locator(".key")).to_have_text("Backspace")
    expect(menu_item(page, "reset").locator(".key")).to_have_text("Ctrl+0")
    expect(menu_item(page, "add-marker").locator(".key")).to_have_text("K")
    expect(menu_item(page, "range-analysis")).to_be_disabled()  # no range yet
    expect(menu_item(page, "undo")).to_be_disabled()
    page.keyboard.press("Escape")
    expect(menu).to_be_hidden()
    full = view(page)
    rng = select_range(page, 0.2, 0.3)
    page.mouse.click(canvas["x"] + 400, canvas["y"] + 30, button="right")
    menu_item(page, "zoom-range").click()
    poll(page, "s => document.getElementById('timeline').dataset.viewStartNs !== s", str(full[0]))
    got = view(page)  # the range's edges are fractional ns until they leave as integers: within 1 ns
    assert abs(got[0] - int(rng["start_ns"])) <= 1 and abs(got[1] - int(rng["end_ns"])) <= 1
    page.mouse.click(canvas["x"] + 400, canvas["y"] + 30, button="right")
    expect(menu_item(page, "undo").locator(".label")).to_have_text("Undo zoom (1)")
    menu_item(page, "reset").click()
    poll(page, "s => document.getElementById('timeline').dataset.viewStartNs === s", str(full[0]))


def test_hide_a_lane_and_show_it_again(page, live_server):
    open_timeline(page, live_server)
    label = page.locator('#tl-labels-inner .tl-lane.lane-group[data-kind="cann"][data-rank="0"]')
    lane_id = label.get_attribute("data-lane-id")
    label.click(button="right")
    menu_item(page, "hide").click()
    expect(label).to_have_count(0)
    assert poll(page, "window.__timeline.hidden") == [lane_id]
    page.reload()
    expect(page.locator("#tl-show-hidden")).to_have_text("1 hidden · show")
    page.locator("#tl-show-hidden").click()
    expect(page.locator(f'#tl-labels-inner .tl-lane[data-lane-id="{lane_id}"]')).to_have_count(1)
    assert page.evaluate("window.__timeline.hidden") == []


# ---- markers ------------------------------------------------------------------------------------------------------

def test_markers_add_drag_rename_region_and_persist(page, live_server):
    run = live_server.runs["level1"]
    open_timeline(page, live_server)
    canvas = page.locator("#tl-canvas").bounding_box()
    x = canvas["x"] + canvas["width"] * 0.25
    page.mouse.move(x, canvas["y"] + 60)
    page.keyboard.press("k")
    marks = poll(page, "window.__timeline.markers")
    assert len(marks) == 1 and marks[0]["end_ns"] is None and marks[0]["name"] == "Marker 1"
    start, end = view(page)
    at = int(marks[0]["start_ns"])
    assert abs(at - (start + (end - start) * 0.25)) <= (end - start) / canvas["width"] * 2
    # drag its flag on the ruler a hundred pixels right
    ruler = page.locator("#tl-ruler").bounding_box()
    fx = page.evaluate("t => window.__timeline.xOf(t)", marks[0]["start_ns"])
    page.mouse.move(fx, ruler["y"] + 6)
    page.mouse.down()
    page.mouse.move(fx + 100, ruler["y"] + 6, steps=5)
    page.mouse.up()
    moved = int(poll(page, "s => { const m = window.__timeline.markers[0]; return m.start_ns !== s && m.start_ns; }",
                     marks[0]["start_ns"]))
    assert abs((moved - at) - 100 * (end - start) / canvas["width"]) <= 2 * (end - start) / canvas["width"]
    # a click on the flag opens its editor: rename it
    fx = page.evaluate("t => window.__timeline.xOf(t)", str(moved))
    page.mouse.click(fx, ruler["y"] + 6)
    editor = page.locator("#tl-marker-editor")
    expect(editor).to_be_visible()
    editor.locator("input").fill("warm-up ends")
    editor.locator("input").press("Enter")
    expect(editor).to_be_hidden()
    # a selected range kept as a region marker from the flag button at its edge
    rng = select_range(page, 0.5, 0.6)
    page.locator("#tl-range-mark").click()
    marks = poll(page, "() => window.__timeline.markers.length === 2 && window.__timeline.markers")
    region = marks[1]
    assert (region["start_ns"], region["end_ns"]) == (rng["start_ns"], rng["end_ns"])
    # the shared store (common/markers.js) holds them: the Memory view reads the same key
    stored = page.evaluate("k => JSON.parse(localStorage.getItem(k))", f"ascendscope:markers:{run}")
    assert [(m["name"], m["start_ns"], m["end_ns"]) for m in stored] == \
        [("warm-up ends", str(moved), None), ("Region 1", rng["start_ns"], rng["end_ns"])]
    page.reload()
    expect(page.locator("#timeline")).to_have_attribute("data-ready", "true")
    assert [m["name"] for m in poll(page, "window.__timeline.markers")] == ["warm-up ends", "Region 1"]
    # the Markers list goes to a region (view and range) and deletes
    page.locator("#tl-markers-btn").click()
    expect(page.locator("#tl-markers-btn")).to_have_text("Markers (2) ▾")
    page.locator("#tl-markers-pop .tl-marker-row", has_text="Region 1").locator("a.name").click()
    assert poll(page, "window.__timeline.range") == rng
    page.locator("#tl-markers-btn").click()
    page.locator("#tl-markers-pop .tl-marker-row", has_text="warm-up ends").locator(".tl-x").click()
    left = poll(page, "() => window.__timeline.markers.length === 1 && window.__timeline.markers")
    assert [m["name"] for m in left] == ["Region 1"]


def test_a_held_k_adds_one_marker(page, live_server):
    open_timeline(page, live_server)
    canvas = page.locator("#tl-canvas").bounding_box()
    page.mouse.move(canvas["x"] + 200, canvas["y"] + 60)
    page.keyboard.down("k")
    page.keyboard.down("k")  # the key held: a keydown with repeat set
    page.keyboard.down("k")
    page.keyboard.up("k")
    page.mouse.move(canvas["x"] + 400, canvas["y"] + 60)
    page.keyboard.press("k")
    marks = poll(page, "() => window.__timeline.markers.length >= 2 && window.__timeline.markers")
    assert [m["name"] for m in marks] == ["Marker 1", "Marker 2"]


# ---- pinned lanes, offsets -------------------------------------------------------------------------------------------

def test_pin_a_lane_on_every_rank_stays_on_top(page, live_server):
    open_timeline(page, live_server)
    label = page.locator('#tl-labels-inner .tl-lane.lane-group[data-kind="overlap"][data-rank="0"]')
    label.scroll_into_view_if_needed()
    label.click(button="right")
    menu_item(page, "pin-all").click()
    pinned = poll(page, "() => window.__timeline.lanes().filter(l => l.pinned && l.type === 'group')")
    assert [(p["title"], p["rank"]) for p in pinned] == [("0_Overlap Analysis", 0), ("1_Overlap Analysis", 1)]
    canvas = page.evaluate("window.__timeline.canvasRect")
    assert pinned[0]["top"] == canvas["top"] and all(p["visible"] for p in pinned)
    # a rank filter keeps both pinned ranks in view: pinning is how ranks are compared
    page.locator("#rank-select").select_option("1")
    lanes = poll(page, "() => window.__timeline.lanes().every(l => l.pinned || l.rank === 1)"
                       " && window.__timeline.lanes()")
    assert {(lane["title"]) for lane in lanes if lane["pinned"] and lane["type"] == "group"} == \
        {"0_Overlap Analysis", "1_Overlap Analysis"}
    page.reload()
    expect(page.locator("#timeline")).to_have_attribute("data-ready", "true")
    assert len(poll(page, "() => window.__timeline.lanes().filter(l => l.pinned && l.type === 'group')")) == 2


def test_rank_offset_typed_and_aligned_on_a_slice(page, live_server):
    run = live_server.runs["level1"]
    tracks = tracks_of(live_server, run)
    comm1 = next(t for t in tracks if t["rank"] == 1 and t["kind"] == "communication"
                 and t["thread_name"].startswith("Group"))
    ops = api(live_server, f"/api/runs/{run}/systemview/communication/slices", rank=1, key="hcom_allReduce_",
              sort="start", order="asc")["rows"]
    op = ops[0]
    align = api(live_server, f"/api/runs/{run}/timeline/align", slice_id=op["slice_id"], rank=0)
    origin = int(api(live_server, f"/api/runs/{run}")["origin_ns"])
    open_timeline(page, live_server)
    # typed in the rank's header
    chip = page.locator('#tl-labels-inner .tl-lane.lane-rank[data-rank="1"] .offset')
    chip.scroll_into_view_if_needed()
    chip.click()
    page.locator(".tl-offset-input").fill("2ms")
    page.locator(".tl-offset-input").press("Enter")
    assert poll(page, "() => Object.keys(window.__timeline.offsets).length && window.__timeline.offsets") == \
        {"1": 2_000_000}
    expect(page.locator('#tl-labels-inner .tl-lane.lane-rank[data-rank="1"] .offset')).to_have_text("+2 ms")
    poll(page, "() => location.search.includes('offsets=1%3A2000000') || location.search.includes('offsets=1:2000000')")
    settle(page)
    # the op is drawn 2 ms later: a right-click there finds it, and aligns rank 1 on rank 0's op of that name
    x, y = slice_point(page, comm1["track_id"], origin + op["ts_ns"], op["dur_ns"], 0, shift=2_000_000)
    page.mouse.click(x, y, button="right")
    expect(menu_item(page, "align")).to_have_text("Align rank 1 on this slice")
    menu_item(page, "align").click()
    assert poll(page, "s => window.__timeline.offsets['1'] === s && window.__timeline.offsets", align["shift_ns"]) \
        == {"1": align["shift_ns"]}
    # both ranks' op now start at the same x
    match = align["match"]
    x0 = page.evaluate("t => window.__timeline.xOf(t)", str(origin + match["ts_ns"]))
    x1 = page.evaluate("t => window.__timeline.xOf(t)", str(origin + op["ts_ns"] + align["shift_ns"]))
    assert abs(x0 - x1) < 0.5
    # kept for the next visit; "Reset all rank offsets" clears them
    page.goto(f"{live_server.base_url}/runs/{run}/timeline")
    expect(page.locator("#timeline")).to_have_attribute("data-ready", "true")
    assert poll(page, "() => Object.keys(window.__timeline.offsets).length && window.__timeline.offsets") == \
        {"1": align["shift_ns"]}
    canvas = page.locator("#tl-canvas").bounding_box()
    page.mouse.click(canvas["x"] + 300, canvas["y"] + 30, button="right")
    menu_item(page, "reset-offsets").click()
    poll(page, "() => Object.keys(window.__timeline.offsets).length === 0")


# ---- Range Stats --------------------------------------------------------------------------------------------------

def test_range_stats_show_self_time_and_list_instances(page, live_server):
    run = live_server.runs["level1"]
    open_timeline(page, live_server)
    rng = select_range(page, 0.3, 0.5)
    table = page.locator("#tl-range-table")
    expect(table.locator("tr.totals")).to_be_visible()
    expect(table.locator("th", has_text="Self")).to_be_visible()
    want = api(live_server, f"/api/runs/{run}/timeline/range_stats", **rng)
    name = next(n for n, c in zip(want["name"], want["count"]) if c >= 3)
    row = table.locator("tr.tl-range-row").filter(has=page.locator("td.name", has_text=name)).first
    row.click()
    inst = api(live_server, f"/api/runs/{run}/timeline/range_instances", name=name, limit=50, **rng)
    rows = page.locator("#tl-range-instances tr.tl-instance")
    expect(rows).to_have_count(len(inst["slice_id"]))
    rows.first.click()
    poll(page, "id => window.__timeline.selected === id", inst["slice_id"][0])
    expect(page.locator("#tl-range-instances")).to_be_visible()
