"""The Phases view in Debian's chromium under the page's real Content-Security-Policy: on a generated 1F1B run it
draws every stage's microbatches with their send/recv links and the bubbles beside the theoretical ratio; on an RL
job the roles' lanes, each iteration's deciding chain and the straggler table; a click on a phase opens that rank's
timeline at it; a run without mstx ranges says how to add them."""

from __future__ import annotations

import re

import pytest

from tests.browser_helpers import api

pytestmark = [pytest.mark.browser]

READY = "() => document.body.dataset.phasesReady === '1'"


def open_phases(page, live_server, run_id):
    page.goto(f"{live_server.base_url}/runs/{run_id}/phases")
    page.wait_for_function(READY, timeout=20_000)


def test_pipeline_chart_and_bubbles(page, live_server, phase_runs):
    run = phase_runs.ids["pp_text"]
    open_phases(page, live_server, run)
    gantt = "document.getElementById('ph-gantt').gantt"
    assert page.evaluate(f"() => {gantt}.count") == 4 * 16  # 4 stages × (8 forwards + 8 backwards), device only
    # forwards stage s → s+1 and backwards s+1 → s, for each of 8 microbatches
    assert page.evaluate(f"() => {gantt}.links.length") == 2 * 3 * 8
    assert page.evaluate(f"() => {gantt}.lanes") == [f"rank {r}" for r in range(4)]
    text = page.locator("#ph-pp-body").inner_text()
    assert "4 stages × 8 microbatches" in text and "theoretical bubble ratio 27.3%" in text
    assert page.locator("#ph-pp-1 tbody tr").count() == 4
    assert page.locator("#ph-pp-1 tbody tr").first.inner_text().split("\t")[5] == "27.3%"


def test_rl_job_roles_chain_and_click_to_timeline(page, live_server, phase_runs):
    run = phase_runs.ids["rl_text"]
    truth = phase_runs.truth["rl_text"]
    open_phases(page, live_server, run)
    lanes = page.evaluate("() => document.getElementById('ph-gantt').gantt.lanes")
    assert sorted(lanes) == sorted([f"actor · rank {r}" for r in range(4)] + [f"rollout · rank {r}" for r in range(4)]
                                   + [f"ref · rank {r}" for r in range(4, 8)])
    chain = page.locator("#ph-iter-table tbody tr").first.locator(".ph-chain").inner_text()
    want = " → ".join(f"{p}@{r}" for p, r in truth["iterations"][0]["chain"])
    assert re.sub(r" \([^)]*\)", "", chain) == want
    assert page.locator("#ph-phase-table tbody tr").count() == 2 * 5
    # the chain's phases are outlined on the Gantt: 4 per iteration
    marked = page.evaluate("""() => document.getElementById('ph-gantt').gantt.perLane.flat()
        .filter((it) => it.marked).map((it) => it.tip.split('\\n')[0])""")
    assert sorted(marked) == sorted(p for it in truth["iterations"] for p, _ in it["chain"])
    page.select_option("#ph-iteration", "2")
    page.wait_for_function("() => document.querySelectorAll('#ph-phase-table tbody tr').length === 5")
    # a click on a phase bar opens its rank's timeline at its range
    row = api(live_server, f"/api/runs/{run}/phases", iteration=2, phase="update_actor", rank=2)["rows"][0]
    x, y = page.evaluate("(url) => document.getElementById('ph-gantt').gantt.centerOf(url)", row["timeline"])
    page.mouse.move(x, y)
    assert "update_actor" in page.locator(".ph-tip").inner_text() and "rank 2 · iteration 2" in \
        page.locator(".ph-tip").inner_text()
    page.mouse.click(x, y)
    page.wait_for_url(re.compile(r"/timeline\?ranks=2&start_ns=\d+&end_ns=\d+&slice=\d+"))
    assert f"slice={row['slice_id']}" in page.url
    # the timeline opens with the range selected
    page.wait_for_function("id => window.__timeline && window.__timeline.selected === id", arg=row["slice_id"],
                           timeout=20_000)


def test_a_run_without_mstx_says_how_to_add_them(page, live_server, runs):
    open_phases(page, live_server, runs.ids["generated"])
    assert page.locator("#ph-empty").is_visible() and not page.locator("#ph-body").is_visible()
    assert not page.locator("#ph-iteration").is_visible()
    assert "torch_npu.npu.mstx.range_start" in page.locator("#ph-howto-code").inner_text()


def test_rl_discrete_workers_by_role_folder(page, live_server, phase_runs):
    """verl's discrete mode: every role folder's workers are lanes of their own, named <folder>·<rank>."""
    run = phase_runs.ids["rl_discrete"]
    truth = phase_runs.truth["rl_discrete"]
    page.set_viewport_size({"width": 1400, "height": 1000})
    open_phases(page, live_server, run)
    lanes = page.evaluate("() => document.getElementById('ph-gantt').gantt.lanes")
    assert sorted(lanes) == sorted(w for ws in truth["workers_of"].values() for w in ws)
    chain = page.locator("#ph-iter-table tbody tr").first.locator(".ph-chain").inner_text()
    assert re.sub(r" \([^)]*\)", "", chain) == " → ".join(f"{p}@{w}" for p, w in truth["iterations"][0]["chain"])
    assert "actor_update·" in page.locator("#ph-worker-table").inner_text()
    page.screenshot(path="/tmp/i38/phases_rl_discrete.png", full_page=True)


def test_dualpipev_overlapped_blocks_are_split_bars(page, live_server, phase_runs):
    run = phase_runs.ids["dualpipev_text"]
    truth = phase_runs.truth["dualpipev_text"]
    page.set_viewport_size({"width": 1400, "height": 900})
    open_phases(page, live_server, run)
    split = page.evaluate("""() => document.getElementById('ph-gantt').gantt.perLane.flat()
        .filter((it) => it.split).length""")
    assert split == sum(c["overlap"] for c in truth["counts"])
    legend = page.locator("#ph-gantt").inner_text()
    assert "forward + backward overlapped" in legend and "forward_backward_overlaping" not in legend
    head = page.locator("#ph-pp-1 thead").inner_text()
    assert "F+B overlapped" in head and "weight" in head
    assert "dualpipev" in page.locator("#ph-pp-body").inner_text()
    page.screenshot(path="/tmp/i38/phases_dualpipev.png", full_page=True)
