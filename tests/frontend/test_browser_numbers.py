"""Numbers that do not mislead (issue #44): the Cluster heatmap does not paint a spread of a fraction of a percent
from deep blue to deep red; wherever a step time shows, it says which of the two it is (the ProfilerStep slice's
span, or the step trace's computing + exposed communication + free); the NPU Module Memory panel of a db export
names its real source (the db export's NPU_MODULE_MEM, not npu_module_mem.csv)."""

from __future__ import annotations

import statistics

import pytest

from tests.browser_helpers import api
from tests.cluster_sample import BASE_COMM_NS, BASE_COMPUTING_NS, BASE_FREE_NS, synthetic_cluster_run
from tests.frontend.test_browser_insights import T0_US, US, open_timeline

pytestmark = pytest.mark.browser

HEATMAP = ("() => { const t = document.getElementById('cl-heatmap').data?.[0];"
           " return t ? [t.z, t.zmin, t.zmax] : null; }")
MIN_SPREAD = 0.02  # (cluster.js)


@pytest.fixture(scope="module")
def even_cluster(runs, tmp_path_factory):
    """8 ranks × 4 steps whose step times differ by at most 35 µs of 2.6 ms (1.3 %, under 2 %): no slow rank."""
    return synthetic_cluster_run(runs.data_dir, tmp_path_factory.mktemp("even"), ranks=8, steps=4, slow_ranks=(),
                                 name="cluster-even")


@pytest.fixture(scope="module")
def uneven_cluster(runs, tmp_path_factory):
    return synthetic_cluster_run(runs.data_dir, tmp_path_factory.mktemp("uneven"), ranks=8, steps=4,
                                 slow_ranks=(3,), name="cluster-uneven")


def heatmap(page, base, run_id):
    page.set_default_timeout(30_000)
    page.goto(f"{base}/runs/{run_id}/cluster")
    page.locator("#cl-heatmap .heatmaplayer image, #cl-heatmap .hm image").first.wait_for(state="attached")
    z, zmin, zmax = page.wait_for_function(HEATMAP).json_value()
    cells = [v for row in z for v in row if v is not None]
    return cells, zmin, zmax


def test_a_tiny_spread_is_coloured_as_uniform(page, live_server, even_cluster):
    cells, zmin, zmax = heatmap(page, live_server.base_url, even_cluster.run_id)
    base_ms = (BASE_COMPUTING_NS + BASE_COMM_NS + BASE_FREE_NS) / 1e6
    assert len(cells) == 32 and all(base_ms <= v < base_ms * 1.014 for v in cells)
    mid = statistics.median(cells)
    assert zmin is not None and zmax is not None
    assert zmax - zmin == pytest.approx(2 * MIN_SPREAD * mid)  # the colour range is ± 2 % of the median …
    used = (max(cells) - min(cells)) / (zmax - zmin)
    assert used < 0.35  # … so the cells take a third of it at most, around its middle: no deep red, no deep blue
    assert abs((mid - zmin) / (zmax - zmin) - 0.5) < 1e-6
    note = page.locator("#cl-heat-note").inner_text()
    assert "coloured as uniform" in note and "of the median" in note


def test_a_real_spread_uses_the_whole_scale(page, live_server, uneven_cluster):
    cells, zmin, zmax = heatmap(page, live_server.base_url, uneven_cluster.run_id)
    mid = statistics.median(cells)
    far = max(max(cells) - mid, mid - min(cells))
    assert far / mid > 0.5  # the slow rank computes 1.5 ms longer
    assert (zmin, zmax) == (pytest.approx(mid - far), pytest.approx(mid + far))
    assert "distance from the median" in page.locator("#cl-heat-note").inner_text()


def test_summary_and_compare_say_which_step_time(page, live_server, client):
    rid = live_server.runs["generated"]
    for url in (f"/runs/{rid}/summary", f"/compare?a={rid}&b={rid}&rank_a=0&rank_b=1"):
        assert "Two step times, which differ" in client.get(url).text
    summary = client.get(f"/api/runs/{rid}/summary").json()
    slowest = [f["text"] for f in summary["findings"] if f["kind"] == "slowest_rank"]
    assert slowest and all("by the step trace" in t for t in slowest)
    cmp = client.get("/api/compare", params={"a": rid, "b": rid, "rank_a": 0, "rank_b": 1}).json()
    e2e = next(r for r in cmp["breakdown"]["rows"] if r["key"] == "e2e_ns")
    assert e2e["label"].startswith("Step time (step trace:")
    page.set_default_timeout(30_000)
    page.goto(f"{live_server.base_url}/compare?a={rid}&b={rid}&rank_a=0&rank_b=1")
    page.wait_for_function("() => { const t = window.__compareTimeline;"
                           " return t && t.canvas.getAttribute('aria-label').includes('ProfilerStep span'); }")
    label = page.locator("#cmp-tl-canvas").get_attribute("aria-label")
    assert label.count("ProfilerStep span") == 2, label
    row = page.locator('#cmp-breakdown-table tbody tr[data-key="e2e_ns"] td').first.inner_text()
    assert "step trace" in row


def test_the_critical_path_says_its_step_is_the_profilerstep_span(page, live_server, wait_runs):
    open_timeline(page, live_server, wait_runs.ids["waits"], overlay="path", cp_rank=2,
                  start_ns=(T0_US - 20) * US, end_ns=(T0_US + 800) * US)
    page.locator('.tl-panel-tab[data-tab="critpath"]').click()
    page.locator("#cp-names").wait_for()
    text = page.locator("#cp-summary").inner_text()
    assert "Step 1 of rank 2: 780 µs measured (the span of its ProfilerStep slice, not the step trace's" in text
    assert "step_trace_time.csv" in page.locator("#cp-summary").get_attribute("title")


def test_the_module_memory_panel_names_its_real_source(page, live_server, db_runs, client):
    rid = db_runs["db_level1"]
    modules = client.get(f"/api/runs/{rid}/memory/modules", params={"rank": 0}).json()
    assert modules["series"], "the db export's twin has module memory"
    assert modules["source"] == "ascend_pytorch_profiler_0.db NPU_MODULE_MEM"
    text_run = client.get(f"/api/runs/{live_server.runs['level1']}/memory/modules").json()
    assert text_run["source"] == ("npu_module_mem.csv" if text_run["series"] else None)
    page.set_default_timeout(30_000)
    page.goto(f"{live_server.base_url}/runs/{rid}/memory?rank=0")
    note = page.locator("#mem-modules-note")
    page.wait_for_function("() => document.getElementById('mem-modules-note').textContent.includes('modules')")
    assert note.inner_text().startswith("ascend_pytorch_profiler_0.db NPU_MODULE_MEM ·")
    assert "npu_module_mem.csv" not in note.inner_text()
    assert api(live_server, f"/api/runs/{rid}/memory/modules", rank=0)["source"] == modules["source"]
