"""The Cluster view's parallel strategy in Debian's chromium under the page's real Content-Security-Policy, on
``sample_data.strategy`` runs ingested sharded as the server does: the grid lays out every rank by its coordinates
and colours it by the picked metric, the verdicts name the slow stage and the slow rank with links to their ranks
on the timeline, communication is listed per group kind, and the expert heat map holds the dumps' tokens."""

from __future__ import annotations

import pytest

from tests.browser_helpers import api, poll
from tests.conftest import LiveServer, serving
from tests.strategy_sample import add_strategy_runs

pytestmark = [pytest.mark.browser]

READY = "() => document.body.dataset.expertsReady === '1'"
SHOWN = {"big": {"tp": 4, "pp": 4, "dp": 4, "ep": 4, "slow_stage": 2, "slow_rank": 37, "moe_layers": 6,
                 "hot_expert": 3}}


@pytest.fixture(scope="module")
def strategy_server(tmp_path_factory):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data = tmp_path_factory.mktemp("strategy-browser-data")
    runs = add_strategy_runs(data, tmp_path_factory.mktemp("strategy-browser-src"),
                             {**SHOWN, "plain": {"tp": 2, "pp": 2, "dp": 2}})
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(data)))) as base:
        yield LiveServer(base_url=base, runs=runs.ids), runs


def open_cluster(page, server, name):
    page.goto(f"{server.base_url}/runs/{server.runs[name]}/cluster", timeout=30_000)
    page.wait_for_function(READY, timeout=30_000)


def test_grid_verdicts_and_expert_load(page, strategy_server, artifacts_dir):
    server, runs = strategy_server
    truth = runs.truth["big"]
    open_cluster(page, server, "big")
    # the grid: DP replicas as rows, PP stages as blocks of TP columns (a blank column between stages)
    shape = page.evaluate("""() => { const d = document.getElementById('st-grid').data[0];
        return [d.z.length, d.z[0].length, d.customdata.flat().filter((r) => r !== null).length]; }""")
    assert shape == [4, 4 * 5 - 1, truth["world"]]
    cell = page.evaluate("""() => { const d = document.getElementById('st-grid').data[0];
        const out = {}; d.customdata.forEach((row, y) => row.forEach((r, x) => { if (r !== null) out[r] = [y, x]; }));
        return out; }""")
    for r, c in truth["grid"].items():
        assert cell[str(r)] == [c["dp"], c["pp"] * 5 + c["tp"]]
    # the verdicts: the slow stage and the slow rank, each with its ranks on the timeline
    items = page.locator("#st-verdict-list li")
    texts = items.all_inner_texts()
    assert any(t.startswith("warning PP stage 2 is 20 % slower") for t in texts), texts
    slow = next(t for t in texts if "waits on rank 37" in t)
    assert slow.startswith("warning TP group {36,37,38,39} waits on rank 37")
    href = page.locator("#st-verdict-list li[data-kind=slow_rank] a.st-open").get_attribute("href")
    assert href.endswith("/timeline?ranks=36%2C37%2C38%2C39")
    assert page.locator("#st-spread-table tbody tr").count() == 4  # pp, tp, ep, dp
    kinds = set(page.locator("#st-comm-table tbody tr").evaluate_all("(rows) => rows.map((r) => r.dataset.kind)"))
    assert kinds == {"tp", "pp", "dp", "ep"}
    # colour by computing: the grid holds the API's numbers
    rid = server.runs["big"]
    want = api(server, f"/api/runs/{rid}/strategy/grid", metric="computing")
    page.select_option("#st-metric", "computing")
    got = poll(page, """() => { const d = document.getElementById('st-grid').data[0];
        return d.colorbar.title.text.startsWith('Computing') && d.z; }""")
    for i, r in enumerate(want["rank"]):
        y, x = cell[str(r)]
        assert got[y][x] == pytest.approx(want["value"][i] / 1e6)
    # the expert heat map: layers × experts of the dumps' latest tokens, the hottest first
    dumps = truth["moe"]["dumps"]
    heat = page.evaluate("() => { const d = document.getElementById('st-expert-heat').data[0]; return [d.y, d.z]; }")
    assert heat[0] == [f"layer {layer}" for layer in range(truth["moe"]["layers"])]
    assert heat[1][0] == [dumps["tokens"][(0, e)] for e in range(dumps["experts"])]
    first = page.locator("#st-hottest tbody tr").first.locator("td").all_inner_texts()
    assert int(first[1]) == dumps["hottest"][int(first[0])]
    page.select_option("#st-expert-source", "kernels")
    poll(page, "() => document.querySelectorAll('#st-hot-ranks tbody tr').length > 0")
    hot = page.locator("#st-hot-ranks tbody tr").first.locator("td").all_inner_texts()
    assert int(hot[0]) in truth["moe"]["kernels"]["hot_holders"] and hot[1] == "0"
    page.select_option("#st-expert-source", "dumps")
    poll(page, "() => document.querySelectorAll('#st-hottest tbody tr').length > 0")
    # the pictures (docs/images/strategy.png, experts.png): the page scrolls inside #content, so let it grow
    page.evaluate("""() => { document.documentElement.style.height = 'auto'; document.body.style.height = 'auto';
        document.getElementById('content').style.overflow = 'visible'; }""")
    page.locator("#st-section").screenshot(path=str(artifacts_dir / "cluster_strategy.png"))
    page.locator("#st-experts").screenshot(path=str(artifacts_dir / "cluster_experts.png"))
    # a verdict's link opens its ranks on the timeline
    page.locator("#st-verdict-list li[data-kind=slow_rank] a.st-open").click()
    page.wait_for_url("**/timeline?ranks=36%2C37%2C38%2C39")


def test_a_run_without_metadata_says_how_to_place_it_and_the_sizes_apply(page, strategy_server):
    server, _ = strategy_server
    open_cluster(page, server, "plain")
    assert "TP 2 × PP 2 × DP 2 = 8 ranks" in page.locator("#st-summary").inner_text()
    assert page.locator("#st-verdict-list li").count() >= 1
    page.fill("#st-size-tp", "4")
    page.fill("#st-size-pp", "1")
    page.click("#st-size-apply")
    poll(page, "() => document.getElementById('st-summary').textContent.startsWith('TP 4 × PP 1 × DP 2')")
    shape = page.evaluate("() => { const d = document.getElementById('st-grid').data[0]; "
                          "return [d.z.length, d.z[0].length]; }")
    assert shape == [2, 4]
    assert "picked here" in page.locator("#st-summary").inner_text()
