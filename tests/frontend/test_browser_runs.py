"""The runs page in Chromium, under the server's Content-Security-Policy: the three real samples uploaded through
the file input show live progress and open as ready runs; a file that is not an archive is refused on its card;
rename and delete from the table. Screenshots: tests/artifacts/runs_upload_progress.png and runs_after_upload.png.
"""

from __future__ import annotations

import pytest

from tests.archives import zip_folder
from tests.conftest import PYTORCH_TEXT, REAL_SAMPLES, ingesting_server, needs_samples

pytestmark = [pytest.mark.browser, needs_samples]
SAMPLES = {"level1": (PYTORCH_TEXT / "level1", 2), "level0": (PYTORCH_TEXT / "level0", 2),
           "st4": (REAL_SAMPLES / "msinsight_st_4rank_2025q4", 4)}
INGEST_TIMEOUT_MS = 90_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ingesting_server(tmp_path_factory.mktemp("browser-runs"), ingest_workers=2) as (base, store, queue):
        yield base, store


@pytest.fixture(scope="module")
def zips(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("zips")
    out = {}
    for name, (src, _) in SAMPLES.items():
        (folder / f"{name}.zip").write_bytes(zip_folder(src))
        out[name] = str(folder / f"{name}.zip")
    (folder / "notes.zip").write_bytes(b"not an archive at all\n" * 20)
    out["bad"] = str(folder / "notes.zip")
    return out


def row(page, name: str):
    return page.locator("#runs-body tr", has=page.locator(".run-name-link", has_text=name))


def test_upload_the_samples_watch_them_ingest_and_open(server, zips, page, artifacts_dir):
    from playwright.sync_api import expect

    base, store = server
    page.goto(f"{base}/")
    expect(page.locator("#runs-hint")).to_be_visible()
    page.set_input_files("#upload-input", [zips["level1"], zips["level0"], zips["st4"]])
    cards = page.locator(".upload-card")
    expect(cards).to_have_count(3)
    page.screenshot(path=str(artifacts_dir / "runs_upload_progress.png"))
    # how far each card gets between two polls depends on the machine: its end state is what is certain (the
    # progress line of a card mid-ingest: tests/frontend/test_browser_lifecycle.py, with the progress held still)
    expect(page.locator(".upload-card[data-state='ready']")).to_have_count(3, timeout=INGEST_TIMEOUT_MS)
    for name, (_, ranks) in SAMPLES.items():
        card = page.locator(".upload-card", has=page.locator(".upload-name", has_text=name))
        expect(card.locator(".upload-detail")).to_contain_text(f"{ranks} ranks · ")
        expect(card.get_by_role("link", name="Open")).to_be_visible()
    expect(page.locator("#runs-body tr[data-status='ready']")).to_have_count(3)
    page.wait_for_timeout(300)
    page.screenshot(path=str(artifacts_dir / "runs_after_upload.png"))
    for name, (_, ranks) in SAMPLES.items():
        expect(row(page, name).locator("td").nth(1)).to_have_text(str(ranks))

    row(page, "level0").get_by_role("button", name="Rename").click()
    page.locator(".rename-input").fill("level0 renamed")
    page.locator(".rename-input").press("Enter")
    expect(row(page, "level0 renamed")).to_have_count(1)

    st4 = row(page, "st4")
    run_id = st4.get_attribute("data-run-id")
    st4.get_by_role("button", name="Delete").click()
    st4.locator(".confirm").get_by_role("button", name="Delete").click()
    expect(page.locator(f"#runs-body tr[data-run-id='{run_id}']")).to_have_count(0)
    assert not store.run_dir(run_id).exists()

    page.locator(".upload-card", has_text="level1").get_by_role("link", name="Open").click()
    expect(page.locator("#rank-select option:not([value=''])")).to_have_count(2)  # ranks 0 and 1 (and "All")
    assert page.url.endswith("/timeline")


def test_a_refused_upload_shows_why(server, zips, browser):
    from playwright.sync_api import expect

    base, store = server
    before = sorted(p.name for p in store.runs_dir.iterdir())
    context = browser.new_context()  # the 415 is logged as a console error: this page does not fail on it
    try:
        page = context.new_page()
        page.goto(f"{base}/")
        page.set_input_files("#upload-input", zips["bad"])
        card = page.locator(".upload-card[data-state='failed']")
        expect(card).to_contain_text("not a .zip or .tar.gz archive")
        expect(card).to_contain_text("HTTP 415")
        card.locator(".upload-close").click()
        expect(page.locator(".upload-card")).to_have_count(0)
    finally:
        context.close()
    assert sorted(p.name for p in store.runs_dir.iterdir()) == before
