"""A run opens in the browser while it ingests (issue #17), under the real Content-Security-Policy: the runs page
offers it with how many ranks are loaded; its timeline draws a loaded rank while a banner says which ranks are
pending, with the progress and ETA, and the rank selector marks them; a page opened on a pending rank says it is
next in the queue and reloads by itself, drawing that rank, once its shard is published.

The run is pinned half-way (its manifest says rank 2's shard is pending) so the test does not race a worker; the
worker side is tested in tests/server/test_progressive.py. Generated data only. Each test has its own server, so
its own page (``fresh_page``): the module's one tab would outlive the server it polls.
"""

from __future__ import annotations

import pytest

from tests.browser_helpers import poll
from tests.conftest import serving
from tests.run_helpers import pin

pytestmark = pytest.mark.browser

READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"
DRAWN = "() => window.__timeline.stats.slices > 0"


@pytest.fixture()
def half_way(tmp_path):
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.generate import generate_run
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    generate_run(tmp_path / "src", ranks=3, steps=2, ops_per_step=40, seed=4)
    store = RunStore(tmp_path / "data")
    run = store.create_run("three ranks", str(tmp_path / "src"))
    ingest_sharded(tmp_path / "src", store.run_dir(run.id), workers=1, group_bytes=0)
    pin(store.run_dir(run.id), [2])
    store.set_status(run.id, "ingesting", progress={"phase": "reading", "text": "reading rank 2", "percent": 61.0,
                                                    "done_bytes": 600_000, "total_bytes": 1_000_000,
                                                    "mb_per_s": 3.2, "eta_s": 14.0})
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir)))) as base:
        yield base, store, run.id


def drawn_ranks(page) -> set[int]:
    return {lane["rank"] for lane in page.evaluate("() => window.__timeline.lanes()") if lane["rank"] is not None}


def test_a_rank_is_browsable_while_another_ingests(fresh_page, half_way, artifacts_dir):
    page = fresh_page
    base, store, run_id = half_way
    page.goto(f"{base}/")
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    row.locator(".run-ranks").wait_for()
    assert "2 of 3 ranks loaded" in row.locator(".run-ranks").inner_text()
    assert row.locator("a.btn.primary", has_text="Open").count() == 1
    page.screenshot(path=str(artifacts_dir / "progressive_runs_page.png"))

    page.goto(f"{base}/runs/{run_id}/timeline?rank=0")
    page.wait_for_function(READY, timeout=20_000)
    page.wait_for_function(DRAWN, timeout=20_000)
    assert drawn_ranks(page) == {0}
    banner = page.locator("#run-ingesting")
    banner.locator(".ingest-line").wait_for()
    text = banner.inner_text()
    assert "Still ingesting" in text and "2 of 3 ranks loaded" in text and "pending: rank 2" in text
    assert "ETA 14 s" in text and "61%" in text
    poll(page, "() => [...document.querySelectorAll('#rank-select option')].map(o => o.textContent)"
               ".includes('2 (loading)')")
    page.screenshot(path=str(artifacts_dir / "progressive_timeline.png"))
    # rank 2 is loaded meanwhile (the run still ingests): the banner offers it, the page is not reloaded under the user
    pin(store.run_dir(run_id), [])
    page.locator("#run-ingesting .ingest-refresh").wait_for(timeout=20_000)
    assert page.locator("#run-ingesting .ingest-refresh").inner_text() == "1 more loaded: refresh"
    assert drawn_ranks(page) == {0}


def test_a_pending_rank_opens_by_itself_once_loaded(fresh_page, half_way, artifacts_dir):
    page = fresh_page
    base, store, run_id = half_way
    page.goto(f"{base}/runs/{run_id}/timeline?rank=2")
    page.locator("#run-ingesting", has_text="Rank 2 is next in the queue").wait_for(timeout=20_000)
    page.wait_for_function(READY, timeout=20_000)
    # the page did not reload itself asking the server for rank 2 (?ranks=2): no server can load it yet
    assert "ranks=" not in page.url
    assert store.wanted_ranks(run_id) == [2]  # opening it moved it to the front of the ingest queue
    page.screenshot(path=str(artifacts_dir / "progressive_pending_rank.png"))
    # rank 2's shard is published (the worker rewrites the manifest), then the run is ready
    pin(store.run_dir(run_id), [])
    store.set_status(run_id, "ready")
    page.wait_for_function("() => !document.getElementById('run-ingesting')", timeout=20_000)
    page.wait_for_function(READY, timeout=20_000)
    page.wait_for_function(DRAWN, timeout=20_000)
    assert 2 in drawn_ranks(page)


def _big_rank(tmp_path, published: bool):
    """A one-rank run whose rank is still ingesting, served from its overview (ingest.overview) when ``published``,
    else with nothing to show yet; yields the base URL, the store, the run's id and what publishes the overview
    (source, overview shard, progress file) and its note."""
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.generate import generate_run
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings
    from tests.overview_helpers import publish_overview, shard_task

    generate_run(tmp_path / "src", ranks=1, steps=3, ops_per_step=60, seed=11)
    _, ov, note, progress = shard_task(tmp_path / "src", tmp_path / "task")
    store = RunStore(tmp_path / "data")
    run = store.create_run("one big rank", str(tmp_path / "src"))
    ingest_sharded(tmp_path / "src", store.run_dir(run.id), workers=1)
    if published:
        publish_overview(store.run_dir(run.id), tmp_path / "src", ov, progress)
    else:
        pin(store.run_dir(run.id), [0])
    store.set_status(run.id, "ingesting", progress={"phase": "reading", "text": "reading rank 0", "percent": 40.0})
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir)))) as base:
        yield base, store, run.id, (tmp_path / "src", ov, progress), note


@pytest.fixture()
def big_rank_half_way(tmp_path):
    """A one-rank run whose rank is still ingesting, served from its overview (ingest.overview)."""
    yield from _big_rank(tmp_path, published=True)


@pytest.fixture()
def big_rank_without_overview(tmp_path):
    """A one-rank run whose rank is pending with nothing to show yet; its overview is ready to publish."""
    yield from _big_rank(tmp_path, published=False)


def test_a_big_rank_is_drawn_from_its_overview_with_every_lane(fresh_page, big_rank_half_way, artifacts_dir):
    page = fresh_page
    base, store, run_id, _, note = big_rank_half_way
    page.goto(f"{base}/runs/{run_id}/timeline?rank=0")
    page.wait_for_function(READY, timeout=20_000)
    page.wait_for_function(DRAWN, timeout=20_000)
    assert drawn_ranks(page) == {0}
    tracks = page.request.get(f"{base}/api/runs/{run_id}/timeline/tracks").json()
    drawn = {lane["track_id"] for lane in page.evaluate("() => window.__timeline.lanes()") if lane["track_id"]}
    # every lane of slices of the run (its counters come with the shard)
    assert drawn == {t["track_id"] for t in tracks["tracks"] if t["kind"] != "counter"}
    # each of them marked as an overview's lane (nothing on it can be selected yet)
    marked = [lane["overview"] for lane in page.evaluate("() => window.__timeline.lanes()") if lane["track_id"]]
    assert len(marked) == len(drawn) and all(flag is True for flag in marked)
    # the ruler shades the whole rank as still coming, and names it an overview
    coming = page.evaluate("() => JSON.parse(document.getElementById('tl-ruler').dataset.stillComing)")
    origin = int(tracks["origin_ns"])
    assert [(c["rank"], c["start"] + origin, c["end"] + origin, c["overview"]) for c in coming] == \
        [(0, note["start_ns"], note["end_ns"], True)]
    page.locator("#run-ingesting", has_text="Rank 0 is shown as an overview").wait_for(timeout=20_000)
    # its lanes are one row each (no depth), and a click on their busy time selects nothing
    busiest = max((t for t in tracks["tracks"] if t["slice_count"]), key=lambda t: t["slice_count"])
    lane = next(lane for lane in page.evaluate("() => window.__timeline.lanes()")
                if lane["track_id"] == busiest["track_id"])
    assert busiest["max_depth"] == 0
    rect = page.evaluate("() => window.__timeline.canvasRect")
    for fraction in (0.25, 0.5, 0.75):
        page.mouse.click(rect["left"] + rect["width"] * fraction, lane["top"] + lane["height"] / 2)
        assert page.evaluate("() => window.__timeline.selected") is None
    page.mouse.move(rect["left"] + rect["width"] / 2, lane["top"] + lane["height"] / 2)
    page.locator("#tl-tooltip", has_text="Overview").wait_for(timeout=5_000)
    page.screenshot(path=str(artifacts_dir / "progressive_overview.png"))
    # the whole shard is published: the ruler no longer shades anything once the page is reloaded
    pin(store.run_dir(run_id), [])
    store.set_status(run_id, "ready")
    page.reload()
    page.wait_for_function(READY, timeout=20_000)
    assert page.evaluate("() => document.getElementById('tl-ruler').dataset.stillComing") == "[]"
    assert not any(lane["overview"] for lane in page.evaluate("() => window.__timeline.lanes()"))



def test_a_page_on_a_pending_rank_shows_its_overview_once_published(fresh_page, big_rank_without_overview,
                                                                    artifacts_dir):
    """The user opened the big rank before its overview existed: once the worker announces it, the page reloads by
    itself and draws every lane from it (the overview is for this moment: not the rank's end, minutes later)."""
    from tests.overview_helpers import publish_overview

    page = fresh_page
    base, store, run_id, (src, ov, progress), _ = big_rank_without_overview
    page.goto(f"{base}/runs/{run_id}/timeline?rank=0")
    page.locator("#run-ingesting", has_text="Rank 0 is next in the queue").wait_for(timeout=20_000)
    page.wait_for_function(READY, timeout=20_000)
    assert not [lane for lane in page.evaluate("() => window.__timeline.lanes()") if lane["track_id"]]
    publish_overview(store.run_dir(run_id), src, ov, progress)
    page.wait_for_function("() => window.__timeline && window.__timeline.ready && window.__timeline.lanes()"
                           ".some((lane) => lane.track_id && lane.overview)", timeout=10_000)
    page.locator("#run-ingesting", has_text="Rank 0 is shown as an overview").wait_for(timeout=10_000)
    assert all(lane["overview"] for lane in page.evaluate("() => window.__timeline.lanes()") if lane["track_id"])
