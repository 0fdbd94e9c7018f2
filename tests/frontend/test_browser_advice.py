"""The Advice page in Debian's chromium (Playwright, headless), under the real Content-Security-Policy: categories on
the left, findings and instances fill from the API, and an instance's "Show in timeline" opens the timeline with
that slice selected and in view; back on the Advice page the same finding is open again. Screenshots go to
tests/artifacts/."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from tests.conftest import needs_samples
from tests.samples import STEP

pytestmark = [needs_samples, pytest.mark.browser]

ADVICE_READY = "() => document.getElementById('advice-view')?.dataset.ready === 'true'"
TIMELINE_READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"


@pytest.fixture(scope="module")
def crafted(runs, tmp_path_factory) -> str:
    from tests.advice_sample import add_crafted_run

    return add_crafted_run(runs.data_dir, tmp_path_factory.mktemp("advice-browser"))[0]


def first_rows(page, table_id: str):
    page.wait_for_function(
        "(id) => { const t = document.getElementById(id); return t && !t.classList.contains('loading') &&"
        " t.querySelectorAll('tbody tr').length > 0 && !t.querySelector('tbody td.empty'); }", arg=table_id)
    return page.locator(f"#{table_id} tbody tr")


def open_advice(page, base_url, run_id, query="?rank=0"):
    page.goto(f"{base_url}/runs/{run_id}/advice{query}")
    page.wait_for_function(ADVICE_READY)


def follow_first_instance(page, base_url, run_id, category: str, artifacts_dir, name: str) -> dict:
    """Pick ``category``, then follow its first finding's first instance; returns that instance from the API."""
    page.click(f'.adv-cat[data-category="{category}"]')
    first_rows(page, "adv-findings-table").first.click()
    rows = first_rows(page, "adv-instances-table")
    page.screenshot(path=str(artifacts_dir / f"advice_{name}.png"), full_page=True)
    finding_id = parse_qs(urlparse(page.url).query)["finding"][0]
    body = httpx.get(f"{base_url}/api/runs/{run_id}/advice", params={"rank": 0}).json()
    finding = next(f for f in body["findings"] if f["id"] == finding_id)
    inst = finding["instances"][0]
    assert rows.first.locator("td").nth(1).inner_text() == inst["name"]
    rows.first.locator("a.tl-link").click()
    page.wait_for_url(re.compile(rf"/runs/{re.escape(run_id)}/timeline\?"))
    page.wait_for_function(TIMELINE_READY)
    page.wait_for_function("(id) => window.__timeline.selected === id", arg=inst["slice_id"])
    page.screenshot(path=str(artifacts_dir / f"advice_{name}_timeline.png"))
    return inst


def assert_in_view(page, inst: dict):
    view = page.evaluate("() => window.__timeline.view")
    start = int(inst["ts_ns"])
    assert int(view["start_ns"]) <= start and int(view["end_ns"]) >= start + inst["dur_ns"]
    assert page.locator("#tl-detail").inner_text().count(inst["name"]) >= 1


def test_a_dispatch_gap_opens_on_the_timeline(page, live_server, artifacts_dir):
    run_id = live_server.runs["level1"]
    open_advice(page, live_server.base_url, run_id)
    labels = page.locator(".adv-cat .adv-cat-label").all_inner_texts()
    assert labels == ["Host-bound steps", "Exposed communication", "Slow rank / slow link", "AICPU operators",
                      "Affinity APIs", "Fusible op sequences", "Dispatch gaps"]
    assert page.locator("#adv-text").inner_text().startswith(f"Rank 0, step {STEP}: the device was free")
    inst = follow_first_instance(page, live_server.base_url, run_id, "dispatch", artifacts_dir, "level1_dispatch")
    assert inst["name"] == "Free"
    assert_in_view(page, inst)
    # back: the same category and finding are open again
    page.go_back()
    page.wait_for_function(ADVICE_READY)
    assert page.locator(".adv-cat.active").get_attribute("data-category") == "dispatch"
    assert page.locator("#adv-findings-table tbody tr.selected").count() == 1


def test_an_affinity_match_opens_on_the_timeline(page, live_server, crafted, artifacts_dir):
    open_advice(page, live_server.base_url, crafted)
    inst = follow_first_instance(page, live_server.base_url, crafted, "affinity_api", artifacts_dir,
                                 "crafted_affinity")
    assert inst["name"] == "aten::mul" and len(inst["slice_ids"]) == 7  # rotary embedding comes first
    assert_in_view(page, inst)


def test_rank_switch_reloads_the_findings(page, live_server, crafted):
    open_advice(page, live_server.base_url, crafted)
    page.click('.adv-cat[data-category="aicpu"]')
    assert first_rows(page, "adv-findings-table").first.locator("td").nth(1).inner_text().startswith("Rank 0:")
    page.select_option("#rank-select", "1")
    page.wait_for_function("() => new URL(location.href).searchParams.get('rank') === '1'")
    page.wait_for_function(ADVICE_READY)
    page.wait_for_function("() => document.querySelector('#adv-findings-table tbody td:nth-child(2)')"
                           "?.textContent.startsWith('Rank 1:')")
