"""A sharded run with more ranks than the server loads at once, in Debian's chromium under the real
Content-Security-Policy: every request of a page carries the page's ``ranks``, so the timeline opened for rank 4
draws rank 4; picking rank 5 in the selector reloads the page scoped to rank 5; the Operator view opened from its
tab asks for rank 5 only; a ``?slice=`` link to a rank-3 slice (no ``ranks``) reloads scoped to rank 3 and selects
it. The server here loads at most 2 of the generated run's 6 ranks, so the subset path runs on a small run."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser_helpers import api, poll
from tests.conftest import LiveServer, serving

pytestmark = pytest.mark.browser

RANKS = 6
LIMIT = 2
READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"
DRAWN = "() => window.__timeline.stats.slices > 0"


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.generate import generate_run
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    work, data = tmp_path_factory.mktemp("big-run-src"), tmp_path_factory.mktemp("big-run-data")
    generate_run(work / "gen", ranks=RANKS, steps=2, ops_per_step=5)
    store = RunStore(data)
    run = store.create_run("six ranks", str(work / "gen"))
    # a shard per rank (group_bytes=0): the server can then load some ranks and not others
    summary = ingest_sharded(work / "gen", store.run_dir(run.id), workers=1, group_bytes=0)
    store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    app = create_app(Settings.from_env(environ={}, data_dir=str(data), max_loaded_ranks=LIMIT))
    with serving(app) as base:
        yield LiveServer(base_url=base, runs={"big": run.id})


def run_requests(page, run_id) -> list[dict]:
    """The query of every API request under the run the page makes from now on (a live list)."""
    seen: list[dict] = []
    prefix = f"/api/runs/{run_id}/"
    page.on("request", lambda r: seen.append(parse_qs(urlparse(r.url).query))
            if urlparse(r.url).path.startswith(prefix) else None)
    return seen


def drawn_ranks(page) -> set[int]:
    return {lane["rank"] for lane in page.evaluate("() => window.__timeline.lanes()") if lane["rank"] is not None}


def open_timeline(page, url):
    page.goto(url)
    page.wait_for_function(READY, timeout=20_000)
    page.wait_for_function(DRAWN, timeout=20_000)


def test_timeline_and_views_ask_for_the_rank_picked(page, big_run, artifacts_dir):
    run_id = big_run.runs["big"]
    base = f"{big_run.base_url}/runs/{run_id}"
    seen = run_requests(page, run_id)
    open_timeline(page, f"{base}/timeline?ranks=4&rank=4")
    assert drawn_ranks(page) == {4}
    assert seen and all(q.get("ranks") == ["4"] for q in seen), seen
    assert page.locator("#rank-scope").inner_text() == f"rank 4 of {RANKS} loaded · Cluster view"
    page.screenshot(path=str(artifacts_dir / "big_run_rank4.png"))

    # a rank the server has not loaded: the page reloads asking for it instead of filtering to nothing
    page.select_option("#rank-select", "5")
    page.wait_for_url("**ranks=5**")
    page.wait_for_function(READY, timeout=20_000)
    page.wait_for_function(DRAWN, timeout=20_000)
    assert drawn_ranks(page) == {5}
    assert parse_qs(urlparse(page.url).query)["rank"] == ["5"]
    assert page.locator("#rank-select").input_value() == "5"

    # the Operator tab keeps the scope: every request of that page asks for rank 5
    seen.clear()
    page.locator('#view-tabs a.tab[data-view="operator"]').click()
    page.wait_for_selector("#operator-view")
    page.wait_for_function("() => { const t = document.getElementById('op-groups-table'); return t &&"
                           " !t.classList.contains('loading') && t.querySelectorAll('tbody tr').length > 0 &&"
                           " !t.querySelector('tbody td.empty'); }", timeout=20_000)
    assert seen and all(q.get("ranks") == ["5"] for q in seen), seen


def test_a_slice_link_opens_the_slices_rank(page, big_run, artifacts_dir):
    run_id = big_run.runs["big"]
    tracks = api(big_run, f"/api/runs/{run_id}/timeline/tracks", ranks="3")["tracks"]
    track = max((t for t in tracks if t["kind"] != "counter"), key=lambda t: t["slice_count"])
    answer = api(big_run, f"/api/runs/{run_id}/timeline/slices", track_id=track["track_id"], width_px=100)
    slice_id = str(answer["tracks"][0]["slice_id"][0])
    assert int(slice_id) >> 36 == 3
    # the server loads rank 0 for a request about no rank: the link alone would not find the slice
    assert api(big_run, f"/api/runs/{run_id}/timeline/tracks")["loaded_ranks"] == [0]

    open_timeline(page, f"{big_run.base_url}/runs/{run_id}/timeline?slice={slice_id}")
    assert parse_qs(urlparse(page.url).query)["ranks"] == ["3"]
    poll(page, "(id) => document.getElementById('timeline').dataset.selectedSliceId === id", slice_id)
    assert page.evaluate("() => window.__timeline.selected") is not None
    assert drawn_ranks(page) == {3}
    page.screenshot(path=str(artifacts_dir / "big_run_slice_link.png"))


def test_a_rank_link_without_ranks_opens_that_rank(page, big_run):
    """?rank=5 alone (a tab link from a view that asked for rank 5 by its rank parameter)."""
    run_id = big_run.runs["big"]
    open_timeline(page, f"{big_run.base_url}/runs/{run_id}/timeline?rank=5")
    assert parse_qs(urlparse(page.url).query)["ranks"] == ["5"]
    assert drawn_ranks(page) == {5}

