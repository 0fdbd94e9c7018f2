"""The level-of-detail rule is the server's: the client's bucket function (geometry.js, run in chromium) gives what
``server.queries.timeline.viewport_bucket_ns`` gives, and the timeline page quantises its requests by the
``slices_per_px`` the tracks answer carries, not by a number of its own."""

from __future__ import annotations

import math
from urllib.parse import parse_qs, urlsplit

import pytest

from ascendscope.server.queries.timeline import SLICES_PER_PX, viewport_bucket_ns
from tests.conftest import needs_samples

pytestmark = [needs_samples, pytest.mark.browser]

READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"
# (span ns, width px, slices per px): exact powers, just above and below them, tiny and huge spans, odd widths
CASES = [(span, px, spp) for spp in (SLICES_PER_PX, 1, 3)
         for span, px in ((1, 4), (7, 5), (4096, 1024), (4097, 1024), (4095, 1024), (10**9, 1600), (123_456_789, 777),
                          (3 * 10**12, 1920), (2**40, 2**10), (2**40 + 1, 2**10), (86_400 * 10**9, 333))]


def test_the_client_bucket_is_the_servers(page, live_server):
    page.goto(f"{live_server.base_url}/")
    client = page.evaluate("""async (cases) => {
        const g = await import('/static/js/timeline/geometry.js');
        return cases.map(([span, px, spp]) => [g.viewportBucket(span, px, spp), g.quantize(0, span, px, spp).bucket]);
    }""", CASES)
    server = [viewport_bucket_ns(span, px, spp) for span, px, spp in CASES]
    assert [bucket for bucket, _ in client] == server
    assert [quantized for _, quantized in client] == server


def test_the_page_quantises_by_the_servers_slices_per_px(page, live_server):
    """The tracks answer says 3 slices per pixel: every slices request asks for one bucket per third of a pixel,
    which a client that kept its own 2 would not."""
    def three_per_px(route):
        answer = route.fetch().json()
        route.fulfill(json=answer | {"slices_per_px": 3})

    asked = []
    page.route("**/timeline/tracks", three_per_px)
    page.on("request", lambda r: asked.append(r.url) if "/timeline/slices?" in r.url else None)
    with page.expect_request(lambda r: "/timeline/slices?" in r.url):
        page.goto(f"{live_server.base_url}/runs/{live_server.runs['level1']}/timeline")
    page.wait_for_function(READY)
    for url in asked:
        query = parse_qs(urlsplit(url).query)
        span = int(query["end_ns"][0]) - int(query["start_ns"][0])
        per_bucket = math.log2(span / (3 * int(query["width_px"][0])))
        assert abs(per_bucket - round(per_bucket)) < 0.02, url
