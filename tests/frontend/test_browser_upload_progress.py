"""An upload's card and its run's row in the table show one progress, and each size says what it is (issue #44:
the card read 65 % while the row read 76 %, beside three unlabelled sizes). The runs list is answered here with a
snapshot taken at 45 %, so only the card's own polls of the run bring 76 %: the row must show what the card shows,
not wait for the list."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.archives import zip_folder
from tests.conftest import ingesting_server

pytestmark = pytest.mark.browser
BUNDLED = Path(__file__).resolve().parents[2] / "sample_data" / "bundled"


def progress(percent: float, done: int) -> dict:
    return {"phase": "reading", "text": "reading rank 0: trace_view.json", "done_bytes": done,
            "total_bytes": 107_000_000, "files_done": 3, "ranks": 2, "percent": percent, "mb_per_s": 11.3,
            "eta_s": 5.0, "elapsed_s": 4.3}


def format_bytes(n: int) -> str:
    """common/format.js's formatBytes."""
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v >= 100 else f"{v:.1f} {unit}"
    return f"{n} B"


def test_the_card_and_the_row_show_one_progress_with_labelled_sizes(tmp_path, page):
    from playwright.sync_api import expect

    archive = tmp_path / "bundled.zip"
    archive.write_bytes(zip_folder(BUNDLED))
    with ingesting_server(tmp_path / "data", start_queue=False) as (base, store, _):
        page.goto(f"{base}/")
        expect(page.locator("#runs-table th", has_text="On disk")).to_have_count(1)
        page.set_input_files("#upload-input", str(archive))
        card = page.locator(".upload-card")
        expect(card).to_have_attribute("data-state", "queued")
        expect(card.locator(".upload-size")).to_have_text(f"{format_bytes(archive.stat().st_size)} file")
        run_id = card.get_attribute("data-run-id")
        store.set_status(run_id, "ingesting", progress=progress(45.0, 48_200_000))
        stale = httpx.get(f"{base}/api/runs", timeout=10).text  # the list, as it was at 45 %

        def old_list(route):
            if route.request.method == "GET":
                route.fulfill(status=200, content_type="application/json", body=stale)
            else:
                route.continue_()

        page.route("**/api/runs", old_list)
        row = page.locator(f"#runs-body tr[data-run-id='{run_id}']")
        expect(row.locator(".run-progress")).to_contain_text("45% · 48.2 MB of 107 MB read")
        store.set_status(run_id, "ingesting", progress=progress(76.0, 81_300_000))
        expect(card.locator(".upload-detail")).to_contain_text("76% · 81.3 MB of 107 MB read")
        expect(row.locator(".run-progress")).to_contain_text("76% · 81.3 MB of 107 MB read", timeout=1500)
        assert row.locator(".run-progress").inner_text() == card.locator(".upload-detail").inner_text()
        expect(row.locator("progress")).to_have_js_property("value", 76)
        page.unroute("**/api/runs")
        page.goto("about:blank")
