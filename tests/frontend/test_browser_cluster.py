"""The Cluster view in Debian's chromium under the page's real Content-Security-Policy: it opens with no console
error on the real 2-rank sample, on a generated run of 24 ranks and on a synthetic run of 1,000 ranks × 100 steps;
its heatmap holds every rank × step, the slow ranks are listed, the matrix is drawn, and the rank picker (typed, or
a click on a heatmap cell) opens that rank's timeline."""

from __future__ import annotations

import re

import pytest

from tests.browser_helpers import api, poll
from tests.cluster_sample import add_with_cluster_tables, synthetic_cluster_run
from tests.conftest import REAL_SAMPLES, LiveServer, needs_samples, serving

pytestmark = [needs_samples, pytest.mark.browser]

READY = "() => document.body.dataset.clusterReady === '1'"
GENERATED_RANKS = 24
FIXTURES = REAL_SAMPLES / "msinsight_server_fixtures"  # ranks 0 and 1, and a cluster_analysis_output of 16


@pytest.fixture(scope="module")
def cluster_server(tmp_path_factory, level1_db):
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.sample_data.generate import generate_run
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data = tmp_path_factory.mktemp("cluster-browser-data")
    work = tmp_path_factory.mktemp("cluster-browser-work")
    generate_run(work / "gen", ranks=GENERATED_RANKS, steps=2, ops_per_step=3, seed=5, cann_lane=False)
    ingest_path(work / "gen", work / "gen-src.duckdb")
    big = synthetic_cluster_run(data, work)
    ids = {"level1": add_with_cluster_tables(data, work, "level1", level1_db),
           "generated": add_with_cluster_tables(data, work, "generated", work / "gen-src.duckdb"),
           "big": big.run_id}
    if FIXTURES.is_dir():
        ingest_path(FIXTURES, work / "fixtures-src.duckdb")
        ids["fixtures"] = add_with_cluster_tables(data, work, "fixtures", work / "fixtures-src.duckdb", FIXTURES)
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(data)))) as base:
        yield LiveServer(base_url=base, runs=ids), big


def open_cluster(page, server, name):
    page.goto(f"{server.base_url}/runs/{server.runs[name]}/cluster")
    page.wait_for_function(READY, timeout=20_000)


def heatmap_shape(page) -> tuple[int, int]:
    return tuple(page.evaluate("""() => { const z = document.getElementById('cl-heatmap').data[0].z;
        return [z.length, z[0].length]; }"""))


def test_opens_on_the_real_sample(page, cluster_server):
    server, _ = cluster_server
    open_cluster(page, server, "level1")
    assert heatmap_shape(page) == (2, 1)
    assert page.locator("#cl-summary").inner_text() == "2 ranks · 1 step"
    assert "three ranks or more" in page.locator("#cl-slow").inner_text()
    assert page.locator("#cl-analysis-none").is_visible()
    page.wait_for_function("() => document.getElementById('cl-matrix').data.length > 0")
    assert page.locator("#cl-links-table tbody tr").count() > 0
    # the page head's preloads are the very requests the view makes: one fetch each, started by the <link>
    loads = page.evaluate("""() => performance.getEntriesByType('resource').filter((e) => e.name.includes('/cluster/'))
        .map((e) => [new URL(e.name).pathname.split('/').pop(), e.initiatorType])""")
    assert sorted(loads) == [["heatmap", "link"], ["matrix", "link"], ["overview", "link"]]


def test_many_ranks_and_the_metric_picker(page, cluster_server):
    server, _ = cluster_server
    open_cluster(page, server, "generated")
    assert heatmap_shape(page) == (GENERATED_RANKS, 2)
    rid = server.runs["generated"]
    want = api(server, f"/api/runs/{rid}/cluster/heatmap", metric="free")["z"]
    page.select_option("#cl-metric", "free")
    got = poll(page, """() => { const d = document.getElementById('cl-heatmap').data[0];
        return d.colorbar.title.text.startsWith('Free') && d.z; }""")
    assert got == [[None if v is None else v / 1e6 for v in row] for row in want]
    assert page.locator("#cl-rank-list option").count() == GENERATED_RANKS


def test_rank_picker_opens_the_ranks_timeline(page, cluster_server):
    server, _ = cluster_server
    open_cluster(page, server, "generated")
    page.fill("#cl-rank-input", "999")
    page.press("#cl-rank-input", "Enter")
    assert page.locator("#cl-rank-note").inner_text() == "no rank 999 in this run"
    page.fill("#cl-rank-input", "17")
    page.press("#cl-rank-input", "Enter")
    page.wait_for_url(re.compile(r"/timeline\?rank=17&ranks=17$"))
    page.wait_for_selector("#rank-select")
    assert page.locator("#rank-select").input_value() == "17"


def test_a_heatmap_cell_opens_its_ranks_timeline(page, cluster_server):
    server, _ = cluster_server
    open_cluster(page, server, "generated")
    x, y = page.evaluate("""() => { const gd = document.getElementById('cl-heatmap');
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
        return [box.left + xa._offset + xa.l2p(1), box.top + ya._offset + ya.l2p(5)]; }""")
    page.mouse.click(x, y)
    page.wait_for_url(re.compile(r"/timeline\?rank=5&ranks=5$"))


def test_a_thousand_ranks(page, cluster_server):
    server, big = cluster_server
    open_cluster(page, server, "big")
    assert heatmap_shape(page) == (big.ranks, big.steps)
    assert page.locator("#cl-summary").inner_text() == f"{big.ranks} ranks · {big.steps} steps · 3 slow"
    # the slow ranks are called out on their heatmap rows
    assert page.evaluate("() => document.getElementById('cl-heatmap').data[1].customdata") == big.slow_ranks
    slow = page.locator("#cl-slow-table tbody tr")
    assert [int(slow.nth(i).get_attribute("data-rank")) for i in range(slow.count())] == \
        sorted(big.slow_ranks, key=lambda r: -api(server, f"/api/runs/{big.run_id}/cluster/heatmap",
                                                   metric="computing")["rank_mean_ns"][r])
    assert all("Computing" in slow.nth(i).inner_text() for i in range(slow.count()))
    page.wait_for_function("() => document.getElementById('cl-matrix').data.length > 0")
    assert page.evaluate("() => document.getElementById('cl-matrix').data[0].z.length") == 250
    first = page.locator("#cl-links-table tbody tr").first.locator("td")
    assert (first.nth(0).inner_text(), first.nth(1).inner_text()) == tuple(str(r) for r in big.slow_link)
    assert page.locator("#cl-rank-list option").count() == big.ranks
    href = page.locator("#cl-slow-table a.cl-open").first.get_attribute("href")
    assert re.fullmatch(rf"/runs/{big.run_id}/timeline\?rank=\d+&ranks=\d+", href)


def test_cluster_analysis_output_as_the_step_data(page, cluster_server):
    server, _ = cluster_server
    if "fixtures" not in server.runs:
        pytest.skip(f"real sample {FIXTURES} not found")
    open_cluster(page, server, "fixtures")
    assert heatmap_shape(page) == (2, 1)
    assert page.locator("#cl-analysis-files tbody tr").count() == 4
    page.select_option("#cl-source", "cluster_analysis")
    poll(page, "() => document.getElementById('cl-heatmap').data[0].z.length === 16")
    assert page.locator("#cl-summary").inner_text() == "2 ranks · 1 step · 16 in cluster_analysis_output"
    # rank 8 is only in the cluster output: its cell says so instead of opening a timeline without data
    x, y = page.evaluate("""() => { const gd = document.getElementById('cl-heatmap');
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
        return [box.left + xa._offset + xa.l2p(0), box.top + ya._offset + ya.l2p(8)]; }""")
    page.mouse.click(x, y)
    poll(page, "() => document.getElementById('cl-rank-note').textContent.includes('only in cluster_analysis_output')")
    assert page.url.endswith("/cluster")
