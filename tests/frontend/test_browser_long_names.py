"""A slice named with 2,000,000 characters, selected on the timeline in chromium (under the page's real policy):
Slice Detail shows the name cut at 2,000 characters and a link to the whole name, which answers it all."""

from __future__ import annotations

import httpx
import pytest

from tests.server.api.test_api_long_names import CHARS, CUT, served  # noqa: F401 - a fixture

pytestmark = pytest.mark.browser
READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"


def test_slice_detail_shows_the_cut_name_and_links_the_whole(page, served):  # noqa: F811
    base, run = served
    slice_id = httpx.get(f"{base}/api/runs/{run['id']}/timeline/search", params={"q": "LLLL"},
                         timeout=30).json()["hits"]["slice_id"][0]
    page.goto(f"{base}/runs/{run['id']}/timeline?slice={slice_id}")
    page.wait_for_function(READY)
    title = page.locator("#tl-detail .title")
    title.wait_for()
    link = title.locator("a.full-name")
    assert link.text_content().strip() == f"the whole name: {CHARS:,} characters"
    assert title.text_content().startswith(CUT)
    whole = page.request.get(link.evaluate("a => a.href"))  # (as the browser resolves it)
    assert whole.ok and len(whole.text()) == CHARS
