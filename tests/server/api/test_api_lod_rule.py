"""The level-of-detail rule is written once (``server.queries.timeline``) and the tracks answer hands it to the
client (``slices_per_px``), which quantises its requests by it (tests/frontend/test_browser_lod_rule.py)."""

from __future__ import annotations

import pytest

from ascendscope.server.queries.timeline import SLICES_PER_PX, lod_target_ns, max_rows, viewport_bucket_ns
from tests.conftest import needs_samples


@needs_samples
def test_the_tracks_answer_carries_the_rule(client, runs):
    answer = client.get(f"/api/runs/{runs.ids['level1']}/timeline/tracks").json()
    assert answer["slices_per_px"] == SLICES_PER_PX


@pytest.mark.parametrize("span, px", [(1, 1), (4096, 1024), (4097, 1024), (10**9, 1600), (2**40 + 1, 1000)])
def test_the_bucket_is_the_smallest_power_of_two_at_least_the_target(span, px):
    bucket, target = viewport_bucket_ns(span, px), lod_target_ns(span, px)
    assert bucket & (bucket - 1) == 0 and bucket >= target and (bucket == 1 or bucket / 2 < target)
    assert max_rows(px) == SLICES_PER_PX * px and target == span / max_rows(px)
