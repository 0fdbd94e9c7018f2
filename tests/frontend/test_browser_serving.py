"""The Serving view in Debian's chromium under the page's real Content-Security-Policy, on a generated serving run
whose latencies are known (tests/serving_sample.py): the percentiles and the slowest request are shown, a range
selected on a chart filters every panel, a batch clicked lists its requests and links the timeline at its time,
and a run without serving data says so. A screenshot is left in tests/frontend/artifacts/serving.png."""

from __future__ import annotations

import pytest

from tests.browser_helpers import poll
from tests.conftest import LiveServer, serving
from tests.serving_sample import nearest_rank, serving_store

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def serving_server(tmp_path_factory):
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.sample_data.generate import generate_run
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    data = tmp_path_factory.mktemp("serving-browser-data")
    work = tmp_path_factory.mktemp("serving-browser-work")
    ids, truths = serving_store(data, work, names=("burst", "csv_only", "pd"))  # (those the tests open)
    generate_run(work / "npu", ranks=1, steps=1, ops_per_step=5)
    store = RunStore(data)
    run = store.create_run("npu", "npu")
    ingest_path(work / "npu", store.db_path(run.id))
    store.set_status(run.id, "ready")
    ids["npu"] = run.id
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(data)))) as base:
        yield LiveServer(base_url=base, runs=ids), truths


def loaded(page, n: int) -> None:
    poll(page, "(n) => Number(document.body.dataset.servingLoaded || 0) >= n", n)


def test_serving_view(page, serving_server, artifacts_dir):
    server, truths = serving_server
    reqs = truths["burst"]["requests"]
    page.goto(f"{server.base_url}/runs/{server.runs['burst']}/serving")
    loaded(page, 1)
    stats = page.locator("#sv-stats").inner_text()
    ttft_p50_ms = nearest_rank([r["ttft_ns"] for r in reqs], 0.5) / 1e6
    assert "TTFT p50 / p90 / p99" in stats and f"{ttft_p50_ms:g}" in stats.replace(" ms", "")
    rows = page.locator("#sv-slowest-table tbody tr")
    slowest = max(reqs, key=lambda r: r["e2e_ns"])
    assert rows.count() == len(reqs)
    assert rows.first.locator("td").first.inner_text() == slowest["rid"]
    assert rows.first.locator(".sv-reason").inner_text() == "queued"
    page.locator("#sv-requests .main-svg").first.wait_for()
    page.screenshot(path=str(artifacts_dir / "serving.png"), full_page=True)
    page.locator("#sv-slowest").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir / "serving-lower.png"))

    # a batch clicked: its requests, and the timeline at its time
    page.evaluate("() => document.getElementById('sv-batches').emit('plotly_click', {points: [{customdata: 2}]})")
    link = page.locator("#sv-open-timeline")
    link.wait_for()
    href = link.get_attribute("href")
    assert "timeline" in href and "start_ns=" in href and "rank=0" in href
    detail = page.locator("#sv-batch-detail").inner_text()
    assert all(item[0] in detail for item in truths["burst"]["batches"][2]["items"])
    batch = truths["burst"]["batches"][2]
    origin = min(r["arrival_ns"] for r in reqs)
    batch_ns = (origin + batch["start"] * 1_000_000, origin + batch["end"] * 1_000_000)

    # a range: from the end of the first request on, every panel is asked again
    cut_ms = reqs[0]["e2e_ns"] / 1e6 + 0.5
    page.evaluate("(lo) => Plotly.relayout('sv-requests', {'xaxis.range[0]': lo, 'xaxis.range[1]': 1e6})", cut_ms)
    loaded(page, 2)
    origin = min(r["arrival_ns"] for r in reqs)
    cut = origin + int(cut_ms * 1e6)
    arrived = sum(1 for r in reqs if r["arrival_ns"] >= cut)
    assert f"{arrived} of {len(reqs)}" in page.locator("#sv-stats").inner_text()
    assert page.locator("#sv-slowest-table tbody tr").count() == arrived or arrived == 0
    assert page.locator("#sv-reset").is_visible()
    page.locator("#sv-reset").click()
    loaded(page, 3)
    assert f"{len(reqs)} of {len(reqs)}" in page.locator("#sv-stats").inner_text()

    # the batch's link opens the timeline (the service's trace) around the batch
    page.goto(f"{server.base_url}{href}" if href.startswith("/") else href)
    poll(page, "() => window.__timeline && window.__timeline.ready")
    tl = page.locator("#timeline")
    start, end = int(tl.get_attribute("data-view-start-ns")), int(tl.get_attribute("data-view-end-ns"))
    assert start <= batch_ns[0] and end >= batch_ns[1] and end - start < 10 * (batch_ns[1] - batch_ns[0]) + 5_000_000


def test_no_serving_data_is_said(page, serving_server):
    server, _ = serving_server
    page.goto(f"{server.base_url}/runs/{server.runs['npu']}/serving")
    page.locator("#sv-none").wait_for(state="visible")
    assert "msServiceProfiler" in page.locator("#sv-none").inner_text()
    assert page.locator("#sv-body").is_hidden()


def test_run_of_no_ranks(page, serving_server):
    """The CSVs alone: the view works, and a batch has no timeline to open."""
    server, truths = serving_server
    page.goto(f"{server.base_url}/runs/{server.runs['csv_only']}/serving")
    loaded(page, 1)
    assert page.locator("#sv-slowest-table tbody tr").count() == len(truths["csv_only"]["requests"])
    page.evaluate("() => document.getElementById('sv-batches').emit('plotly_click', {points: [{customdata: 0}]})")
    page.locator("#sv-batch-detail p").wait_for()
    assert page.locator("#sv-open-timeline").count() == 0


def test_forward_queues_and_pd_panels(page, serving_server, artifacts_dir):
    server, truths = serving_server
    more = truths["pd"]["more"]
    page.goto(f"{server.base_url}/runs/{server.runs['pd']}/serving")
    loaded(page, 1)
    for box in ("#sv-forward-box", "#sv-queues-card", "#sv-pd-section"):
        assert page.locator(box).is_visible()
    note = page.locator("#sv-forward-note").inner_text()
    n_card0 = sum(1 for f in more["forwards"] if f["prof_id"] == "0")
    assert f"card 0 (dp 0): {n_card0} forwards" in note
    bars = page.evaluate("() => document.getElementById('sv-pd').data.map((t) => t.name)")
    assert bars[:3] == ["arrival to prefill result (P instance)", "KV transfer", "decode (D instance)"]
    slow = page.locator("#sv-slowest-table tbody tr").first.locator(".sv-evidence").inner_text()
    assert "waiting" in slow and "KV transfer" in slow
    page.locator("#sv-pd .main-svg").first.wait_for()
    page.screenshot(path=str(artifacts_dir / "serving-pd.png"), full_page=True)
    for box in ("sv-forward-box", "sv-pd-section", "sv-slowest"):
        page.locator(f"#{box}").screenshot(path=str(artifacts_dir / f"serving-pd-{box}.png"))
    # a run without those files keeps the panels hidden
    page.goto(f"{server.base_url}/runs/{server.runs['burst']}/serving")
    loaded(page, 1)
    assert not page.locator("#sv-pd-section").is_visible() and not page.locator("#sv-forward-box").is_visible()
