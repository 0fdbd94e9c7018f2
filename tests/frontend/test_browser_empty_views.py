"""Issue #10 item 5 in chromium under the real CSP: every view section without data says which file or table would
have fed it, for the run's format — st4 (text export, partial ranks, no trace) and the db export's Level0 (no torch
ops, no communication tables). Screenshots go to tests/artifacts/."""

from __future__ import annotations

import pytest

from tests.conftest import REAL_SAMPLES, needs_samples

pytestmark = [needs_samples, pytest.mark.browser]

DB_LEVEL0 = REAL_SAMPLES / "msinsight_pytorch_2025" / "db" / "level0"


@pytest.fixture(scope="module")
def db0(runs, live_server) -> str:
    """The db export (Level0) ingested into the live server's store."""
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.server.runs import RunStore

    if not DB_LEVEL0.is_dir():
        pytest.skip(f"real sample {DB_LEVEL0} not found")
    store = RunStore(runs.data_dir)
    run = store.create_run("db0", str(DB_LEVEL0))
    ingest_path(DB_LEVEL0, store.db_path(run.id))
    store.set_status(run.id, "ready")
    return run.id


def open_view(page, base, run, view, query=""):
    page.goto(f"{base}/runs/{run}/{view}{query}")
    page.wait_for_selector(f"#{view}-view" if view != "timeline" else "#timeline")


def shot(page, artifacts_dir, name, whole=True):
    """A screenshot; ``whole``: the page scrolls inside #content, so let it grow for the picture (not for the
    timeline, which fills the window)."""
    if whole:
        page.evaluate("""() => { document.documentElement.style.height = 'auto'; document.body.style.height = 'auto';
            document.getElementById('content').style.overflow = 'visible'; }""")
    page.screenshot(path=str(artifacts_dir / f"empty_{name}.png"), full_page=whole)


def test_operator_st4_rank1(page, live_server, view_runs, artifacts_dir):
    open_view(page, live_server.base_url, view_runs["st4"], "operator", "?rank=1")
    why = page.locator("#op-kernels-why")
    why.wait_for()
    assert why.locator(".v-source-head").inner_text() == "No kernels for rank 1:"
    assert why.locator("li").all_inner_texts() == ["kernel_details.csv was not in rank 1's output"]
    assert "TASK + COMPUTE_TASK_INFO" in why.locator(".v-source-feeds").inner_text()
    empty = page.locator("#op-torch-table td.empty")
    empty.wait_for()
    assert empty.inner_text() == "No torch ops: operator_details.csv was not in rank 1's output"
    shot(page, artifacts_dir, "operator_st4_rank1")


def test_memory_st4_rank1(page, live_server, view_runs, artifacts_dir):
    open_view(page, live_server.base_url, view_runs["st4"], "memory", "?rank=1")
    page.locator("#mem-records-why").wait_for()
    assert page.locator("#mem-records-why li").all_inner_texts() == ["memory_record.csv was not in rank 1's output"]
    page.locator("#mem-modules-why .v-source-note").wait_for()
    assert "npu_module_mem.csv was not in rank 1's output" in page.locator("#mem-modules-why").inner_text()
    empty = page.locator("#mem-table td.empty")
    empty.wait_for()
    assert empty.inner_text() == "No operator allocations: operator_memory.csv was not in rank 1's output"
    assert all(page.locator(f"#mem-group-by option[value='{g}']").is_disabled()
               for g in ("overall", "stream", "component"))
    shot(page, artifacts_dir, "memory_st4_rank1")


def test_timeline_without_trace(page, live_server, view_runs, artifacts_dir):
    open_view(page, live_server.base_url, view_runs["st4"], "timeline")
    why = page.locator("#tl-notrace-why")
    why.wait_for()
    assert why.locator("li").all_inner_texts() == [f"trace_view.json was not in rank {r}'s output" for r in range(4)]
    assert why.locator(".v-source-head").inner_text() == "No timeline for ranks 0, 1, 2, 3:"
    shot(page, artifacts_dir, "timeline_st4", whole=False)


def test_summary_names_missing_sources(page, live_server, view_runs, artifacts_dir):
    open_view(page, live_server.base_url, view_runs["st4"], "summary", "?rank=1")
    top = page.locator("#sum-top-why")
    top.wait_for()
    assert top.locator("li").all_inner_texts() == ["kernel_details.csv was not in rank 1's output"]
    assert page.locator("#sum-breakdown-why").count() == 0  # every rank has step_trace_time.csv
    page.select_option("#sum-source-select", "overlap")
    page.locator("#sum-breakdown-why").wait_for()
    assert page.locator("#sum-breakdown-why li").all_inner_texts() == [
        f"trace_view.json was not in rank {r}'s output" for r in range(4)]
    shot(page, artifacts_dir, "summary_st4_overlap")


def test_db_export_names_its_tables(page, live_server, db0, artifacts_dir):
    open_view(page, live_server.base_url, db0, "communication")
    note = page.locator("#comm-from-trace")  # analysis.db has no CommAnalyzerTime: the ops come from the trace
    note.wait_for()
    assert note.inner_text().startswith("Ranks 0, 1: no CommAnalyzerTime (analysis.db) (a Level0 export writes none)")
    assert page.locator("#comm-empty").count() == 0
    shot(page, artifacts_dir, "communication_db0")
    open_view(page, live_server.base_url, db0, "operator", "?rank=0")
    empty = page.locator("#op-torch-table td.empty")
    empty.wait_for()
    assert empty.inner_text() == ("No torch ops: rank 0 was read from the db export (ascend_pytorch_profiler_0.db), "
                                  "which has no torch ops (operator_details.csv has no db counterpart)")
    assert page.locator("#op-kernels-why").count() == 0  # the db's TASK table gave kernels
