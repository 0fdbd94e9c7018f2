"""The Memory view's "Memory snapshot" sub-tab in chromium under the real CSP: the Active Memory Timeline (stacked
blocks drawn, the timeline's W/S/A/D keys zooming and panning it, a block's details on a click), the allocator state
at a clicked time, the potential leaks of a dragged range and the OOMs, each against the API; a run with profiler
memory and a snapshot beside its rank folder shows both sub-tabs. Screenshots go to tests/artifacts/ (one is the
README's docs/images/memory_snapshot.png)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import corpus_figures as cf
from tests.browser_helpers import api, poll
from tests.memsnap_sample import ingest_like_server, write_case

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
REAL = Path(__file__).resolve().parents[1] / "corpus" / "torch_npu_2026_memsnap_expandable"


@pytest.fixture(scope="module")
def snap_server(tmp_path_factory):
    from ascendscope.sample_data.generate import T0_NS, generate_run
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings
    from tests.conftest import LiveServer, serving

    data = tmp_path_factory.mktemp("snap-browser-data")
    work = tmp_path_factory.mktemp("snap-browser-work")
    store = RunStore(data)
    ids = {}
    for name in ("cuda", "npu_notime"):
        path, _ = write_case(name, work / name)
        ids[name] = ingest_like_server(store, name, path)
    beside = work / "beside"
    generate_run(beside, ranks=1, steps=2, ops_per_step=40)
    write_case("npu", beside, epoch_us=T0_NS // 1000)  # dumped while the rank was profiled: one clock
    ids["beside"] = ingest_like_server(store, "beside", beside)
    ids["real"] = ingest_like_server(store, "real", REAL)
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(data)))) as base:
        yield LiveServer(base_url=base, runs=ids)


def open_snapshot(page, server, name, query=""):
    page.goto(f"{server.base_url}/runs/{server.runs[name]}/memory{query}", timeout=60_000)
    page.wait_for_function("() => { const c = document.querySelector('#snap-chart canvas');"
                           " return c && Number(c.dataset.blocks) > 0; }")
    page.wait_for_selector("#snap-state-totals")
    page.wait_for_selector("#snap-leaks-total")


def canvas_box(page):
    return page.locator("#snap-chart canvas").bounding_box()


def test_active_memory_timeline_and_its_keys(page, snap_server, artifacts_dir):
    open_snapshot(page, snap_server, "cuda")
    assert page.locator("#mem-snapshot").is_visible() and page.locator("#mem-subtabs").is_visible()
    assert not page.locator("#mem-profiler").is_visible()  # a run of a snapshot alone opens on it
    ov = api(snap_server, f"/api/runs/{snap_server.runs['cuda']}/memory/snapshot")
    assert page.locator("#snap-peak-bytes").text_content().strip() and ov["peak"]["bytes"] > 0
    drawn = int(page.locator("#snap-chart canvas").get_attribute("data-blocks"))
    assert drawn == len(api(snap_server, f"/api/runs/{snap_server.runs['cuda']}/memory/snapshot/allocations",
                            limit=500)["blocks"])
    page.locator("#mem-snapshot").screenshot(path=str(artifacts_dir / "memsnap_timeline.png"))
    box = canvas_box(page)
    page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + 8)  # focus (an empty spot: picks a time)
    before = page.locator("#snap-chart canvas").get_attribute("data-window")
    page.keyboard.press("w")
    page.keyboard.press("w")
    zoomed = poll(page, "() => document.querySelector('#snap-chart canvas').dataset.window")
    lo, hi = map(float, zoomed.split(","))
    lo0, hi0 = map(float, before.split(","))
    assert hi - lo < (hi0 - lo0) * 0.7
    page.keyboard.press("d")
    panned = page.locator("#snap-chart canvas").get_attribute("data-window")
    assert float(panned.split(",")[0]) > lo
    page.keyboard.press("a")
    page.keyboard.press("0")
    assert page.locator("#snap-chart canvas").get_attribute("data-window") == before


def test_a_block_opens_with_its_size_life_and_stack(page, snap_server):
    open_snapshot(page, snap_server, "cuda")
    run = snap_server.runs["cuda"]
    alloc = api(snap_server, f"/api/runs/{run}/memory/snapshot/allocations", limit=500)
    big = max(alloc["blocks"], key=lambda b: b["requested_size"] * (b["x1"] - b["x0"]))
    box = canvas_box(page)
    lo, hi = map(float, page.locator("#snap-chart canvas").get_attribute("data-window").split(","))
    pw = box["width"] - 72 - 14
    x = box["x"] + 72 + ((big["x0"] + big["x1"]) / 2 - lo) / (hi - lo) * pw
    top = max(max(c) for c in (api(snap_server, f"/api/runs/{run}/memory/snapshot/curve",
                                   buckets=1200)["columns"]["reserved_max"],
                               api(snap_server, f"/api/runs/{run}/memory/snapshot/curve",
                                   buckets=1200)["columns"]["active_max"]))
    ph = box["height"] - 16 - 26
    mid = big["steps"][0][1] + big["requested_size"] / 2
    y = box["y"] + 16 + ph - mid / (top * 1.05) * ph
    page.mouse.move(x, y)
    tip = page.locator("#snap-chart .snap-tip")
    tip.wait_for(state="visible")
    assert f"0x{big['addr']:x}" in tip.text_content()
    page.mouse.click(x, y)
    page.wait_for_function("(id) => document.getElementById('snap-block').dataset.blockId === String(id)",
                           arg=big["block_id"])
    detail = api(snap_server, f"/api/runs/{run}/memory/snapshot/block", block_id=big["block_id"])
    text = page.locator("#snap-block").text_content()
    assert detail["frames"] and detail["frames"][0]["name"] in text


def test_a_click_shows_the_allocator_state_then(page, snap_server, artifacts_dir):
    open_snapshot(page, snap_server, "npu_notime")
    run = snap_server.runs["npu_notime"]
    end = api(snap_server, f"/api/runs/{run}/memory/snapshot/state")
    assert page.locator("#snap-state").get_attribute("data-reserved") == str(end["totals"]["reserved"])
    box = canvas_box(page)
    page.mouse.click(box["x"] + 72 + (box["width"] - 86) * 0.4, box["y"] + 6)
    idx = int(poll(page, "(e) => { const s = document.getElementById('snap-state');"
                         " return s.dataset.idx !== String(e) && s.dataset.idx; }", end["idx"]))
    st = api(snap_server, f"/api/runs/{run}/memory/snapshot/state", at_idx=idx)
    host = page.locator("#snap-state")
    assert host.get_attribute("data-allocated") == str(st["totals"]["allocated"])
    assert host.get_attribute("data-active") == str(st["totals"]["active"])
    assert int(page.locator("#snap-segments").get_attribute("data-rows")) == min(160, len(st["segments"]))
    page.locator("#snap-state-section").screenshot(path=str(artifacts_dir / "memsnap_state.png"))


def test_a_dragged_range_lists_its_potential_leaks(page, snap_server, artifacts_dir):
    open_snapshot(page, snap_server, "npu_notime")
    run = snap_server.runs["npu_notime"]
    box = canvas_box(page)
    y = box["y"] + 10
    page.mouse.move(box["x"] + 72 + (box["width"] - 86) * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + 72 + (box["width"] - 86) * 0.55, y, steps=8)
    page.mouse.move(box["x"] + 72 + (box["width"] - 86) * 0.8, y, steps=8)
    page.mouse.up()
    text = poll(page, "() => { const t = document.getElementById('snap-leaks-total').textContent;"
                      " return t.startsWith('[#') && !t.startsWith('[#-') && t; }")
    lo, hi = (int(v.strip(" #").replace(",", "")) for v in text[1:text.index(")")].split(","))
    want = api(snap_server, f"/api/runs/{run}/memory/snapshot/leaks", start_idx=lo, end_idx=hi)
    assert int(page.locator("#snap-leaks").get_attribute("data-bytes")) == want["bytes"]
    rows = page.locator("#snap-leaks-table tr.snap-leak")
    assert rows.count() == len(want["groups"]) > 0
    assert want["groups"][0]["label"] in rows.first.text_content()
    rows.first.locator("button").click()
    assert page.locator("#snap-leaks-table .snap-detail-row").first.is_visible()
    page.locator("#snap-leaks").screenshot(path=str(artifacts_dir / "memsnap_leaks.png"))


def test_the_oom_and_the_state_at_it(page, snap_server, artifacts_dir):
    open_snapshot(page, snap_server, "cuda")
    run = snap_server.runs["cuda"]
    ooms = api(snap_server, f"/api/runs/{run}/memory/snapshot/ooms")["ooms"]
    assert page.locator("#snap-ooms").get_attribute("data-ooms") == str(len(ooms)) == "1"
    assert page.locator(".snap-oom-top tbody tr").count() == len(ooms[0]["top"])
    page.locator("#snap-ooms button").first.click()
    page.wait_for_function("(i) => document.getElementById('snap-state').dataset.idx === String(i)",
                           arg=ooms[0]["idx"])
    assert page.locator("#snap-state").get_attribute("data-reserved") == str(ooms[0]["totals"]["reserved"])
    page.locator("#snap-ooms").screenshot(path=str(artifacts_dir / "memsnap_oom.png"))


def test_beside_a_rank_both_sub_tabs(page, snap_server, artifacts_dir):
    page.goto(f"{snap_server.base_url}/runs/{snap_server.runs['beside']}/memory", timeout=60_000)
    page.wait_for_selector("#mem-subtabs:not([hidden])")
    page.wait_for_function("() => document.getElementById('mem-chart')?.dataset.group === 'overall'")
    assert page.locator("#mem-profiler").is_visible() and not page.locator("#mem-snapshot").is_visible()
    page.locator("#mem-tab-snapshot").click()
    assert page.locator("#mem-snapshot").is_visible() and "memory=snapshot" in page.url
    page.wait_for_function("() => Number(document.querySelector('#snap-chart canvas').dataset.blocks) > 0")
    assert "share the run's time zero" in page.locator("#snap-clock").text_content()
    page.reload()
    page.wait_for_function("() => Number(document.querySelector('#snap-chart canvas')?.dataset.blocks) > 0")
    assert page.locator("#mem-snapshot").is_visible()
    page.set_viewport_size({"width": 1600, "height": 900})
    page.screenshot(path=str(artifacts_dir / "memsnap_page.png"))


def test_a_real_torch_npu_snapshot(page, snap_server, artifacts_dir):
    """Ascend/msinsight's expandable-segments snapshot (no time_us: the entry index is the axis): the state at the
    dump equals its segments' totals; the page is the README's screenshot."""
    open_snapshot(page, snap_server, "real")
    (reserved, allocated, active), = cf.snapshot_totals(cf.snapshot_dict(REAL)).values()
    host = page.locator("#snap-state")
    assert (host.get_attribute("data-reserved"), host.get_attribute("data-allocated"),
            host.get_attribute("data-active")) == (str(reserved), str(allocated), str(active))
    assert "entry's index" in page.locator("#snap-clock").text_content()
    page.set_viewport_size({"width": 1600, "height": 900})
    page.wait_for_timeout(300)
    page.screenshot(path=str(artifacts_dir / "memsnap_real.png"))
