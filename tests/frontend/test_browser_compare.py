"""The Compare page in Debian's chromium (Playwright, headless), under the real Content-Security-Policy: reached
from the runs page and from a run's tabs, two runs picked in the side selectors, the breakdown, operator, torch op
and communication tables filled with the API's numbers, and the step-aligned timeline drawing both sides (hover
shows a slice, the wheel zooms both, a click offers the slice's own timeline) — also for a GPU Kineto trace
against an NPU run. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import httpx
import pytest

from tests.compare_sample import add_kineto_run
from tests.conftest import needs_samples

pytestmark = [needs_samples, pytest.mark.browser]

READY = "() => document.getElementById('compare-view')?.dataset.ready === 'true'"
TIMELINE_READY = ("() => { const t = window.__compareTimeline; return t && t.data && t.view && t.idle() &&"
                  " Number(t.canvas.dataset.drawnA) > 0 && Number(t.canvas.dataset.drawnB) > 0; }")


@pytest.fixture(scope="module")
def kineto(runs) -> str:
    return add_kineto_run(runs.data_dir)


def wait_ready(page):
    page.wait_for_function(READY)
    page.wait_for_function(TIMELINE_READY)


def cell_texts(page, table_id: str, key: str) -> list[str]:
    return page.locator(f'#{table_id} tbody tr[data-key="{key}"] td').all_inner_texts()


def test_pick_two_runs_and_compare_them(page, live_server, artifacts_dir):
    base, ids = live_server.base_url, live_server.runs
    page.goto(f"{base}/")
    page.locator("#compare-link").click()
    page.wait_for_url(lambda url: url.startswith(f"{base}/compare"))
    page.wait_for_function(READY)
    page.select_option("#cmp-run-a", ids["level1"])
    page.wait_for_function(READY)
    page.select_option("#cmp-run-b", ids["generated"])
    page.wait_for_function("(id) => new URL(location.href).searchParams.get('b') === id", arg=ids["generated"])
    wait_ready(page)
    assert page.locator("#cmp-run-a").input_value() == ids["level1"]
    api = httpx.get(f"{base}/api/compare", params={"a": ids["level1"], "b": ids["generated"]}).json()
    assert page.locator("#cmp-step-a").input_value() == str(api["a"]["step"])
    # the breakdown row of Computing shows both sides' ms and B − A
    comp = next(r for r in api["breakdown"]["rows"] if r["key"] == "computing_ns")
    cells = cell_texts(page, "cmp-breakdown-table", "computing_ns")
    assert cells[1] == f"{comp['a'] / 1e6:,.3f}" and cells[2] == f"{comp['b'] / 1e6:,.3f}"
    assert cells[3] == f"{comp['delta'] / 1e6:+,.3f}"
    # operator rows: as many as the API answered, the one-sided ones badged
    n = len(api["kernels"]["rows"])
    assert page.locator("#cmp-kernels-table tbody tr").count() == n
    assert page.locator("#cmp-kernels-table .cmp-only-a").count() == api["kernels"]["only_a"]
    assert page.locator("#cmp-kernels-table .cmp-only-b").count() == api["kernels"]["only_b"]
    page.select_option("#cmp-show", "a")
    assert page.locator("#cmp-kernels-table tbody tr").count() == api["kernels"]["only_a"]
    page.select_option("#cmp-show", "all")
    assert page.locator("#cmp-torch-table tbody tr").count() == len(api["torch_ops"]["rows"])
    assert page.locator("#cmp-comm-table tbody tr").count() == max(1, len(api["communication"]["rows"]))
    page.screenshot(path=str(artifacts_dir / "compare_level1_vs_generated.png"))

    # the timeline: hover a kernel of A's first hardware lane, then zoom both sides with the wheel
    tl = page.locator("#cmp-timeline")
    tl.scroll_into_view_if_needed()
    lane = page.evaluate("() => window.__compareTimeline.data.a.lanes"
                         ".findIndex((l) => l.kind === 'hardware' && l.count > 5)")
    point = page.evaluate("(i) => window.__compareTimeline.slicePoint('a', i, 3)", lane)
    name = page.evaluate("(i) => { const t = window.__compareTimeline; const l = t.data.a.lanes[i];"
                         " return t.data.names[l.name_id[3]]; }", lane)
    page.mouse.move(point["x"], point["y"])
    tip = page.locator("#cmp-tl-tip")
    tip.wait_for(state="visible")
    assert tip.inner_text().splitlines()[0] == name
    assert "A · level1 · rank 0" in tip.inner_text()
    tl.screenshot(path=str(artifacts_dir / "compare_timeline_hover.png"))
    before = page.evaluate("() => ({ ...window.__compareTimeline.view })")
    page.mouse.wheel(0, -600)
    page.wait_for_function("(w) => { const v = window.__compareTimeline.view; return v.end - v.start < w / 2; }",
                           arg=before["end"] - before["start"])
    page.wait_for_function(TIMELINE_READY)
    answered = page.evaluate("() => { const t = window.__compareTimeline; return [t.data.start_ns, t.data.end_ns,"
                             " t.view.start, t.view.end]; }")
    assert answered[:2] == answered[2:]  # the lanes of the zoomed window were fetched again, for both sides
    # a click picks the slice and links to its run's timeline
    point = page.evaluate("(i) => window.__compareTimeline.slicePoint('a', i, 0)", lane)
    page.mouse.click(point["x"], point["y"])
    link = page.locator("#cmp-tl-open")
    assert link.get_attribute("href").startswith(f"/runs/{ids['level1']}/timeline?slice=")
    tl.screenshot(path=str(artifacts_dir / "compare_timeline_zoomed.png"))


def test_compare_with_from_a_runs_tabs(page, live_server):
    base, ids = live_server.base_url, live_server.runs
    page.goto(f"{base}/runs/{ids['level1']}/summary?rank=1")
    page.locator("#compare-with").click()
    page.wait_for_url(lambda url: url.startswith(f"{base}/compare?a={ids['level1']}"))
    # (the tables only: the run picked as the other side is whichever the store offers first, which depends on what
    # other tests added to the session's store; it may have no timeline to draw)
    page.wait_for_function(READY)
    assert page.locator("#cmp-run-a").input_value() == ids["level1"]
    assert page.locator("#cmp-rank-a").input_value() == "1"
    assert page.locator("#cmp-run-b").input_value() != ids["level1"]


def test_two_ranks_of_one_run(page, live_server, artifacts_dir):
    base, ids = live_server.base_url, live_server.runs
    page.goto(f"{base}/compare?a={ids['level1']}&b={ids['level1']}")
    wait_ready(page)
    assert page.locator("#cmp-rank-a").input_value() == "0"
    assert page.locator("#cmp-rank-b").input_value() == "1"  # one run against itself: its next rank
    assert "comparing two ranks" in page.locator("#cmp-status").inner_text()
    page.screenshot(path=str(artifacts_dir / "compare_two_ranks.png"))


def test_a_gpu_kineto_trace_against_an_npu_run(page, live_server, kineto, artifacts_dir):
    base, ids = live_server.base_url, live_server.runs
    page.goto(f"{base}/compare?a={ids['level1']}&b={kineto}")
    wait_ready(page)
    first, second = page.evaluate("() => window.__compareTimeline.data.b.steps")  # 551, 552 in the real trace
    assert page.locator("#cmp-step-b").input_value() == str(first)
    lanes = page.evaluate("() => window.__compareTimeline.data.b.lanes.map((l) => l.kind)")
    assert lanes and set(lanes) == {"overlap", "hardware"}  # the lane derived from the kernels, the GPU streams
    assert "B: the trace's device lanes (no kernel table)" in page.locator("#cmp-kernels-note").inner_text()
    assert "Side B has no step breakdown" not in page.locator("#cmp-breakdown").inner_text()
    page.locator("#cmp-timeline").screenshot(path=str(artifacts_dir / "compare_npu_vs_gpu_timeline.png"))
    page.select_option("#cmp-step-b", str(second))
    page.wait_for_function("(s) => new URL(location.href).searchParams.get('step_b') === s", arg=str(second))
    wait_ready(page)
    assert page.evaluate("() => window.__compareTimeline.data.b.step") == second


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A live server over a store holding the escaping test's run (HTML in its name, kernel types and names and
    communication op names); yields (base, run id)."""
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings
    from tests.conftest import serving
    from tests.frontend.test_browser_escaping import LINK, hostile_run

    root = tmp_path_factory.mktemp("hostile-compare")
    src = hostile_run(root)
    store = RunStore(root / "data")
    run = store.create_run(LINK, LINK)
    ingest_path(src, store.db_path(run.id))
    store.set_status(run.id, "ready")
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(root / "data")))) as base:
        yield base, run.id


def test_names_from_the_data_stay_text(page, hostile):
    from tests.frontend.test_browser_escaping import IMAGE, LINK, NOTHING_LIVE

    base, run_id = hostile
    page.goto(f"{base}/compare?a={run_id}&b={run_id}")
    wait_ready(page)
    page.wait_for_function("() => document.getElementById('cmp-breakdown-chart')._fullLayout")
    page.locator("#cmp-kernels-table tbody td", has_text=LINK).first.wait_for()
    page.locator("#cmp-kernels-table tbody td", has_text=IMAGE).first.wait_for()
    page.locator("#cmp-comm-table tbody td", has_text=LINK).first.wait_for()
    assert LINK in " ".join(page.locator("#cmp-breakdown-chart .xtick text").all_text_contents())
    assert LINK in page.locator("#cmp-run-a").inner_text()
    assert page.locator(NOTHING_LIVE).count() == 0
