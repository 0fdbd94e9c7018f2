"""Late arrivals (Cluster view), the wait chains and the critical path on the timeline, and the SQL console, in
Debian's chromium under each page's real Content-Security-Policy (a console error fails the test): on runs whose
answers are known by construction, the real 2-rank sample and a 1,000-rank run. Screenshots go to tests/artifacts."""

from __future__ import annotations

from urllib.parse import parse_qs, quote, urlparse

import pytest

from ascendscope.sample_data.waits import T0_US
from tests.browser_helpers import poll
from tests.conftest import needs_samples
from tests.samples import needs_real

pytestmark = pytest.mark.browser

CLUSTER_READY = "() => document.body.dataset.clusterReady === '1'"
TIMELINE_READY = "() => window.__timeline && window.__timeline.ready"
US = 1000


def open_cluster(page, live_server, run_id):
    page.goto(f"{live_server.base_url}/runs/{run_id}/cluster")
    page.wait_for_function(CLUSTER_READY, timeout=30_000)


def test_cluster_view_names_the_late_rank_and_why(page, live_server, wait_runs, artifacts_dir):
    open_cluster(page, live_server, wait_runs.ids["waits_sharded"])
    rows = page.locator("#cl-late-rows tbody tr")
    assert rows.count() == 1
    cells = rows.nth(0).locator("td")
    assert cells.nth(1).inner_text() == "hcom_allReduce__123_0_1" and cells.nth(3).inner_text() == "2"
    assert cells.nth(5).inner_text() == "0.900"  # wait caused (ms): three ranks × 300 µs
    # the kernel by its excess over the median rank, then the one with the most time in the window
    assert "computing +0.300 ms · kernel MatMul +0.300 ms over rank 1 · most time: MatMul 0.400 ms" in \
        cells.nth(7).inner_text()
    rows.nth(0).locator(".v-expand").click()
    page.locator(".cl-late-items").wait_for()
    cause = page.locator(".cl-late-why tr.cl-late-cause td")
    assert cause.nth(0).inner_text() == "computing" and cause.nth(3).inner_text() == "100.0%"
    matmul = page.locator(".cl-late-items tr", has_text="MatMul").locator("td")
    assert matmul.nth(3).inner_text() == "0.400" and matmul.nth(4).inner_text() == "81.6%"  # of 490 µs
    assert page.locator("#cl-late-totals").get_attribute("data-ranks") == "4"
    assert page.locator("#cl-late-totals").get_attribute("data-kind") == "bars"
    assert page.locator("#cl-late .v-csv").is_visible() and not page.locator("#cl-late .v-parquet").is_visible()
    assert "rank 2 caused the most" in page.locator("#cl-late-totals-note").inner_text()
    page.locator("#cl-late").screenshot(path=str(artifacts_dir / "cluster_late_arrivals.png"))
    page.locator("#cl-late-totals").screenshot(path=str(artifacts_dir / "cluster_late_totals.png"))
    # the last rank's link opens its wait chain on the timeline
    href = rows.nth(0).locator("a.cl-late-open").get_attribute("href")
    q = parse_qs(urlparse(href).query)
    assert q["overlay"] == ["waits"] and q["ranks"] == ["1,2"]


def test_cluster_view_of_1000_ranks(page, live_server, late_synthetic, artifacts_dir):
    s = late_synthetic
    open_cluster(page, live_server, s.run_id)
    assert page.locator("#cl-late-rows tbody tr").count() == 2
    assert page.locator("#cl-late-totals").get_attribute("data-ranks") == str(s.ranks)
    assert page.locator("#cl-late-totals").get_attribute("data-kind") == "scatter"  # 1,000 bars would be a blur
    shown = page.locator("#cl-late-step").input_value()
    lates = {int(t) for t in page.locator("#cl-late-rows tbody tr td:nth-child(4)").all_inner_texts()}
    assert lates == {s.late_rank(int(shown), 0), s.late_rank(int(shown), 1)}
    page.locator("#cl-late").screenshot(path=str(artifacts_dir / "cluster_late_arrivals_1000.png"))


@needs_real
def test_cluster_view_of_the_real_sample(page, live_server, runs, artifacts_dir):
    open_cluster(page, live_server, runs.ids["level1"])
    first = page.locator("#cl-late-rows tbody tr").nth(0).locator("td")
    assert first.nth(1).inner_text() == "hcom_allReduce__586_0_1" and first.nth(3).inner_text() == "1"
    assert first.nth(5).inner_text() == "5.608"
    page.locator("#cl-late-rows tbody tr").nth(0).locator(".v-expand").click()
    page.locator(".cl-late-items").wait_for()
    page.locator("#cl-late").screenshot(path=str(artifacts_dir / "cluster_late_arrivals_level1.png"))


def open_timeline(page, live_server, run_id, **params):
    page.goto(f"{live_server.base_url}/runs/{run_id}/timeline?" + "&".join(f"{k}={quote(str(v), safe=',')}"
                                                                           for k, v in params.items()))
    page.wait_for_function(TIMELINE_READY, timeout=20_000)


def test_timeline_draws_the_wait_chain_and_the_critical_path(page, live_server, wait_runs, artifacts_dir):
    run = wait_runs.ids["waits_sharded"]
    open_timeline(page, live_server, run, overlay="waits,path", cp_rank=0,
                  start_ns=(T0_US - 20) * US, end_ns=(T0_US + 800) * US)
    drawn = poll(page, """() => { const i = window.__timeline.insights;
        return i.drawn.waits >= 3 && i.drawn.path >= 1 ? i.drawn : null; }""", timeout_s=15)
    assert drawn["late"] == 1 and drawn["remote"] == 1
    assert page.locator("#tl-waits-btn").get_attribute("aria-pressed") == "true"
    assert page.locator("#tl-critpath").get_attribute("data-state") == "ready"
    page.screenshot(path=str(artifacts_dir / "timeline_wait_chain_path.png"))
    # the toggles switch the overlays off (and the URL follows)
    page.locator("#tl-waits-btn").click()
    page.locator("#tl-path-btn").click()
    poll(page, "() => { const d = window.__timeline.insights.drawn; return d.waits === 0 && d.path === 0; }")
    assert "overlay" not in page.url


def test_slice_detail_of_a_collective_says_who_it_waited_for(page, live_server, wait_runs, artifacts_dir, client):
    """Click-through from the timeline: a waiting rank's collective op names the late rank and why, links to that
    rank's op with the wait chain, and to the step's late arrivals in the Cluster view."""
    run = wait_runs.ids["waits_sharded"]
    inst = client.get(f"/api/runs/{run}/late_arrivals/instance",
                      params={"group_id": "0", "op_name": "hcom_allReduce__123_1_1", "seq": 0}).json()
    op = dict(zip(inst["arrivals"]["rank"], inst["arrivals"]["slice_id"]))[0]
    open_timeline(page, live_server, run, slice=op, ranks=0)
    box = page.locator("#tl-late-detail")
    box.wait_for(timeout=15_000)
    text = box.inner_text()
    assert "Waited 300 µs for rank 2, the last of 4 ranks" in text
    assert "computing +300 µs (100% of its lateness)" in text
    assert "kernel MatMul +300 µs over rank 1" in text  # the kernel by its excess over the median rank's
    page.locator("#tl-detail").screenshot(path=str(artifacts_dir / "timeline_slice_detail_late.png"))
    late = parse_qs(urlparse(page.locator("#tl-late-open").get_attribute("href")).query)
    assert late["ranks"] == ["0,2"] and late["slice"] == [str(inst["late_slice_id"])]
    page.locator("#tl-late-cluster").click()
    page.wait_for_function(CLUSTER_READY, timeout=30_000)
    assert page.locator("#cl-late-step").input_value() == "2"  # the op's step, not the default one
    assert page.locator("#cl-late-rows tbody tr td:nth-child(2)").first.inner_text() == "hcom_allReduce__123_1_1"


def test_critical_path_what_if(page, live_server, wait_runs, artifacts_dir):
    open_timeline(page, live_server, wait_runs.ids["waits"], overlay="path", cp_rank=2,
                  start_ns=(T0_US - 20) * US, end_ns=(T0_US + 800) * US)
    page.locator('.tl-panel-tab[data-tab="critpath"]').click()
    page.locator("#cp-names").wait_for()
    assert "Step 1 of rank 2: 780 µs measured" in page.locator("#cp-summary").inner_text()
    page.locator("#cp-names").select_option("MatMul")
    page.locator("#cp-factor").fill("2")
    page.locator("#cp-factor").dispatch_event("change")
    page.locator("#cp-eval").click()
    page.locator("#cp-result").wait_for()
    text = page.locator("#cp-result").inner_text()
    assert "Estimated step: 580 µs (measured 780 µs): 200 µs saved" in text
    assert page.locator(".cp-assumptions li").count() >= 5
    page.locator("#tl-panel").screenshot(path=str(artifacts_dir / "timeline_critical_path_whatif.png"))
    assert page.locator(".cp-assumptions").get_attribute("open") is not None  # stated beside the estimate
    page.locator(".cp-whatif").screenshot(path=str(artifacts_dir / "critical_path_whatif_result.png"))


def test_critical_path_what_if_infers_the_collectives_order(page, live_server, runs, tmp_path_factory, artifacts_dir):
    """A run without wait tasks: the panel lists the two orders inferred from the launches, the what-if of rank 1's
    MatMul × 1000 saves its 300 µs lead; unchecked, nothing is inferred (and the estimate is the model's without)."""
    from tests.insight_sample import add_generated_run

    run, t = add_generated_run(runs.data_dir, tmp_path_factory.mktemp("nowait-ui"), "nowait_ui", ranks=4,
                               late_rank=1, extra_us=300, wait_tasks=False)
    open_timeline(page, live_server, run, overlay="path", cp_rank=1, start_ns=(T0_US - 20) * US,
                  end_ns=(T0_US + 800) * US)
    page.locator('.tl-panel-tab[data-tab="critpath"]').click()
    page.locator("#cp-names").wait_for()
    assert page.locator("#cp-inferred").get_attribute("data-count") == "2"
    assert page.locator("#cp-infer").is_checked()
    page.locator("#cp-names").select_option("MatMul")
    page.locator("#cp-factor").fill("1000")
    page.locator("#cp-factor").dispatch_event("change")
    page.locator("#cp-eval").click()
    page.locator("#cp-result").wait_for()
    assert f"{t['whatif_1000_ns'] // US} µs saved" in page.locator("#cp-result").inner_text()
    page.locator("#cp-inferred summary").click()
    assert "Add → hcom_allReduce__123_0_1 (before)" in page.locator("#cp-inferred").inner_text()
    page.locator(".cp-whatif").screenshot(path=str(artifacts_dir / "critical_path_whatif_inferred.png"))
    page.locator("#cp-infer").uncheck()
    page.locator("#cp-eval").click()
    poll(page, "() => document.getElementById('cp-inferred').dataset.count === '0'")
    assert "90 µs saved" in page.locator("#cp-result").inner_text() and "cp_infer=0" in page.url


@needs_samples
def test_wait_chain_on_the_real_sample(page, live_server, runs, artifacts_dir):
    open_timeline(page, live_server, runs.ids["level1"], overlay="waits,path", cp_rank=0)
    poll(page, "() => window.__timeline.insights.drawn.waits >= 1", timeout_s=15)
    poll(page, "() => window.__timeline.insights.drawn.path >= 1", timeout_s=20)
    page.locator('.tl-panel-tab[data-tab="critpath"]').click()
    page.screenshot(path=str(artifacts_dir / "timeline_wait_chain_path_level1.png"))


def test_sql_console(page, live_server, wait_runs, artifacts_dir):
    run = wait_runs.ids["waits_sharded"]
    page.goto(f"{live_server.base_url}/runs/{run}/query")
    page.wait_for_function("() => document.body.dataset.queryReady === '1'")
    assert page.locator(".q-table-entry[data-table='cluster_collectives']").count() == 1
    page.locator(".q-example", has_text="Step time per rank and step").click()
    page.wait_for_function("() => document.getElementById('query-view').dataset.state === 'done'")
    assert page.locator("#q-table tbody tr").count() == 8  # 4 ranks × 2 steps
    assert "sql=" in page.url and "8 rows" in page.locator("#q-status").inner_text()
    # sort by step_ms descending: a click, then another
    page.locator("#q-table th[data-col='2']").click()
    page.locator("#q-table th[data-col='2']").click()
    shown = [float(t) for t in page.locator("#q-table tbody tr td:nth-child(3)").all_inner_texts()]
    assert shown == sorted(shown, reverse=True) and len(set(shown)) > 1
    assert page.locator("#q-chart .main-svg").count() >= 1
    # the chart's y by default is the first measure (step_ms), not a key column (step)
    assert page.locator("#q-y option:checked").inner_text() == "step_ms"
    assert page.locator("#q-kind").input_value() == "scatter"  # each rank twice: bars would pile up
    assert "/query.csv?sql=" in page.locator("#q-csv").get_attribute("href")
    page.screenshot(path=str(artifacts_dir / "sql_console.png"))
    # a link reproduces the query: it fills the editor, and runs only on a click of Run
    asked = []
    page.on("request", lambda r: asked.append(r.url) if "/api/runs/" in r.url and "/query?" in r.url else None)
    page.goto(page.url)
    page.wait_for_function("() => document.body.dataset.queryReady === '1'")
    assert page.locator("#query-view").get_attribute("data-state") == "filled"
    assert "cluster_steps" in page.locator("#q-sql").input_value()
    assert page.locator("#q-table tbody tr").count() == 0 and asked == []
    page.locator("#q-run").click()
    page.wait_for_function("() => document.getElementById('query-view').dataset.state === 'done'")
    assert page.locator("#q-table tbody tr").count() == 8 and len(asked) == 1
    # a slice id in a result opens that slice on the timeline, its rank loaded
    sql = "SELECT rank, slice_id, name, dur_ns FROM slices WHERE name = 'MatMul' AND rank = 2 ORDER BY ts_ns LIMIT 1"
    page.goto(f"{live_server.base_url}/runs/{run}/query?sql={quote(sql)}")
    page.wait_for_function("() => document.body.dataset.queryReady === '1'")
    page.locator("#q-run").click()
    page.wait_for_function("() => document.getElementById('query-view').dataset.state === 'done'")
    link = page.locator("#q-table a.q-slice").first
    slice_id = int(link.inner_text())
    assert parse_qs(urlparse(link.get_attribute("href")).query)["ranks"] == ["2"]
    link.click()
    page.wait_for_function(TIMELINE_READY, timeout=20_000)
    page.wait_for_function("(id) => window.__timeline.selected === id", arg=slice_id, timeout=15_000)
    # long values come back shortened by the console's worker, and the page says so
    page.goto(f"{live_server.base_url}/runs/{run}/query")
    page.wait_for_function("() => document.body.dataset.queryReady === '1'")
    page.locator("#q-sql").fill("SELECT repeat('x', 5000) AS s, range(3000) AS l")
    page.locator("#q-run").click()
    page.wait_for_function("() => document.getElementById('query-view').dataset.state === 'done'")
    assert "2 long values shortened" in page.locator("#q-status").inner_text()


def test_sql_console_shows_a_refusal(browser, live_server, wait_runs):
    """A refused statement shows the server's reason; the one console message is the browser's own note of the 400
    answer (so this test has its own page, not the fixture that fails on any console error)."""
    from tests.conftest import VIEWPORT

    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sql = quote("ATTACH '/tmp/x.duckdb' AS x")
    page.goto(f"{live_server.base_url}/runs/{wait_runs.ids['waits']}/query?sql={sql}")
    page.wait_for_function("() => document.body.dataset.queryReady === '1'")
    page.locator("#q-run").click()
    page.wait_for_function("() => document.getElementById('query-view').dataset.state === 'error'")
    assert "read_only" in page.locator("#q-error").inner_text()
    assert page.locator("#q-sql").input_value() == "ATTACH '/tmp/x.duckdb' AS x"
    context.close()
    assert errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"], errors
