"""Every profiler format opens in every view in the browser (issue #10): a db export, msprof PROF_* output and a
GPU Kineto trace, ingested from the real samples into the live server's store.

Each page must load under the real Content-Security-Policy with no console error, and show what the format holds:
the timeline draws lanes, and a view section either has rows or says which file or table would have fed it.
"""

from __future__ import annotations

import pytest

from tests.browser_helpers import poll
from tests.conftest import DB_SAMPLES, REAL_SAMPLES, ingest_ready

pytestmark = pytest.mark.browser

FORMATS = {
    "db-level1": REAL_SAMPLES / "msinsight_pytorch_2025" / "db" / "level1",  # (the session's db_runs has it)
    "msprof-2dev": REAL_SAMPLES / "mindinsight_msprof_2dev_2023",
    "kineto": REAL_SAMPLES / "hta_gpu_kineto_nonascend" / "trace_filter",
}
VIEWS = ("operator", "memory", "summary", "communication", "advice")
LOAD_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def format_runs(runs, db_runs) -> dict[str, str]:
    """``{format: run_id}`` in the store ``live_server`` serves (it reads the store on every request)."""
    assert DB_SAMPLES["db_level1"] == FORMATS["db-level1"]
    return {"db-level1": db_runs["db_level1"],
            **ingest_ready(runs.data_dir, {k: v for k, v in FORMATS.items() if k != "db-level1"})}


READY = ("() => window.__timeline && (window.__timeline.ready || window.__timeline.error)"
         " && window.__timeline.pending() === 0")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_the_timeline_draws_lanes(live_server, format_runs, page, fmt):
    page.goto(f"{live_server.base_url}/runs/{format_runs[fmt]}/timeline")
    page.wait_for_function(READY, timeout=LOAD_TIMEOUT_MS)
    assert page.evaluate("() => window.__timeline.error") is None
    lanes = page.evaluate("() => window.__timeline.lanes()")
    assert any(lane["track_id"] is not None for lane in lanes), "a format with a trace has slice lanes"
    # the frame after the last answer arrives draws them (a frame may be pending when the data is)
    assert poll(page, "() => window.__timeline.stats.slices", timeout_s=10), "the first screen draws slices"


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_view_opens(live_server, format_runs, page, fmt, view):
    page.goto(f"{live_server.base_url}/runs/{format_runs[fmt]}/{view}")
    page.wait_for_selector(f"#{view}-view")
    # loaded: no table still loading, and the page has content (rows, a chart, or a note naming the source)
    page.wait_for_function("() => !document.querySelector('main .loading') && document.querySelector("
                           "'main tbody tr, main .js-plotly-plot, main .v-note, main .v-empty')",
                           timeout=LOAD_TIMEOUT_MS)
    errors = page.locator("main .v-error")
    assert errors.count() == 0, errors.first.inner_text()
