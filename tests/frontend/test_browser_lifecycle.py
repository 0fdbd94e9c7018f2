"""A run's life in Chromium, under the server's Content-Security-Policy: one uploaded file shows its progress, then
opens on its timeline when ready, where a dismissible banner lists its ingest warnings; the same file uploaded again
opens the run it already made; a failed run shows its ingest log and is retried from the runs page; a ready run's
warnings unfold in the list. Screenshots: tests/artifacts/run_warnings_banner.png and
runs_failed_log_and_warnings.png."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.archives import zip_folder
from tests.conftest import PYTORCH_TEXT, needs_samples
from tests.conftest import ingesting_server as server

pytestmark = [pytest.mark.browser, needs_samples]
INGEST_TIMEOUT_MS = 90_000
LEVEL0_WARNING = "bound to no slice"  # two of level0's warnings: flows whose CANN lane is not exported
LEVEL0_WARNINGS = 4  # those and, per rank, its communication ops taken from the trace (no communication.json)


@pytest.fixture(scope="module")
def level0_zip(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("zips") / "level0.zip"
    path.write_bytes(zip_folder(PYTORCH_TEXT / "level0"))
    return path


def leave(page) -> None:
    """Navigate away while the server still runs (a view stopped mid-request by the server's exit would log)."""
    page.goto("about:blank")


def row(page, run_id: str):
    return page.locator(f"#runs-body tr[data-run-id='{run_id}']")


def test_one_upload_shows_its_progress_then_opens_with_its_warnings(tmp_path, level0_zip, page, artifacts_dir):
    from playwright.sync_api import expect

    with server(tmp_path, start_queue=False) as (base, store, queue):
        page.goto(f"{base}/")
        page.set_input_files("#upload-input", str(level0_zip))
        card = page.locator(".upload-card")
        expect(card).to_have_attribute("data-state", "queued")
        expect(card.locator(".upload-detail")).to_have_text("waiting for a worker")
        run_id = card.get_attribute("data-run-id")
        store.set_status(run_id, "ingesting", progress={  # what a worker reports while it reads
            "phase": "reading", "text": "reading rank 0: trace_view.json", "done_bytes": 48_200_000,
            "total_bytes": 107_000_000, "files_done": 3, "ranks": 2, "percent": 45.0, "mb_per_s": 11.3,
            "eta_s": 5.0, "elapsed_s": 4.3})
        expect(card).to_have_attribute("data-state", "ingesting")
        expect(card.locator(".upload-detail")).to_contain_text("reading rank 0: trace_view.json · 45% · ")
        expect(card.locator(".upload-detail")).to_contain_text("11.3 MB/s · ETA ")
        expect(card.locator("progress")).to_have_js_property("value", 45)

        queue.start(resume=False)  # a worker takes the queued run; the page opens it once it is ready
        page.wait_for_url(f"**/runs/{run_id}/timeline", timeout=INGEST_TIMEOUT_MS)
        banner = page.locator("#run-warnings")
        expect(banner).to_be_visible()
        expect(banner.locator(".warn-title")).to_have_text(f"{LEVEL0_WARNINGS} ingest warnings")
        expect(banner.locator(".warn-list li")).to_have_count(3)  # the first three, the rest behind "Show all"
        expect(banner.locator("#run-warnings-more")).to_have_text(f"Show all {LEVEL0_WARNINGS}")
        banner.locator("#run-warnings-more").click()
        expect(banner.locator(".warn-list li")).to_have_count(LEVEL0_WARNINGS)
        expect(banner.locator(".warn-list li", has_text=LEVEL0_WARNING)).to_have_count(2)
        expect(page.locator("#rank-select option:not([value=''])")).to_have_count(2)
        page.screenshot(path=str(artifacts_dir / "run_warnings_banner.png"))
        banner.locator("#run-warnings-close").click()
        expect(banner).to_be_hidden()
        page.locator("#view-tabs a[data-view='summary']").click()  # dismissed for this run on every view
        page.wait_for_url(f"**/runs/{run_id}/summary**")
        expect(page.locator("#rank-select")).to_be_visible()
        expect(page.locator("#run-warnings")).to_be_hidden()

        # the same file uploaded again opens the run it made
        page.goto(f"{base}/")
        expect(row(page, run_id)).to_have_attribute("data-status", "ready")
        page.set_input_files("#upload-input", str(level0_zip))
        card = page.locator(".upload-card")
        expect(card).to_have_attribute("data-run-id", run_id)
        expect(card.locator(".upload-detail")).to_contain_text("the same file as the run “level0” uploaded before")
        page.wait_for_url(f"**/runs/{run_id}/timeline")
        assert len(store.list()) == 1
        leave(page)


def test_a_failed_run_shows_its_log_and_is_retried(tmp_path, level0_db, page, artifacts_dir):
    from playwright.sync_api import expect

    from ascendscope.sample_data.generate import generate_run

    later = tmp_path / "copied-later"
    with server(tmp_path / "data") as (base, store, queue):
        failed = store.create_run("later", str(later))  # its folder is not there yet: the ingest fails
        queue.enqueue(failed.id)
        assert queue.wait_idle(60) and store.get(failed.id).status == "failed"
        warned = store.create_run("warned", str(PYTORCH_TEXT / "level0"))
        shutil.copy(level0_db, store.db_path(warned.id))
        store.set_status(warned.id, "ready", summary={"ranks": [0, 1], "warning_count": LEVEL0_WARNINGS})

        page.goto(f"{base}/")
        bad = row(page, failed.id)
        expect(bad.locator(".run-error")).to_contain_text("no such file or folder")
        bad.get_by_role("button", name="Log").click()
        expect(bad.locator(".run-log")).to_contain_text("Traceback")
        expect(bad.locator(".run-log")).to_contain_text("no such file or folder")

        good = row(page, warned.id)
        good.get_by_role("button", name=f"{LEVEL0_WARNINGS} warnings").click()
        expect(good.locator(".run-warnings li")).to_have_count(LEVEL0_WARNINGS)
        expect(good.locator(".run-warnings li", has_text=LEVEL0_WARNING)).to_have_count(2)
        page.screenshot(path=str(artifacts_dir / "runs_failed_log_and_warnings.png"))

        generate_run(later, ranks=1, steps=1, ops_per_step=5)  # the folder is there now (a small run will do)
        bad.get_by_role("button", name="Retry").click()
        expect(bad).to_have_attribute("data-status", "ready", timeout=INGEST_TIMEOUT_MS)
        expect(bad.get_by_role("link", name="Open")).to_be_visible()
        expect(bad.locator(".run-log")).to_have_count(0)
        expect(good.locator(".run-warnings li")).to_have_count(LEVEL0_WARNINGS)  # still unfolded after refreshes
