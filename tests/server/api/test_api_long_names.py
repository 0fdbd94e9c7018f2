"""A slice named with 2,000,000 characters (20 times the largest answer these tests allow, so an answer that
carried it whole would fail them), ingested as the server does, does not go whole into the views' answers: the
timeline's slices (JSON and typed arrays), search, range statistics and their instances, and slice detail answer
it cut at 2,000 characters with "…"; ``…/slices/{id}/name`` gives it whole."""

from __future__ import annotations

import httpx
import pytest

from ascendscope.sample_data.hostile import LONG_NAME_CHAR, long_name_rank
from ascendscope.server import columns
from ascendscope.server.queries import MAX_NAME_CHARS
from tests.conftest import ingesting_server
from tests.server.test_upload import wait_done

CHARS = 2_000_000
SMALL_BYTES = 100_000  # any answer here is far below this once the name is cut
CUT = LONG_NAME_CHAR * MAX_NAME_CHARS + "…"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The run opened as ``serve PATH`` opens it (a zip of it would be refused: 20 MB of one letter compresses
    past the zip-bomb ratio)."""
    source = long_name_rank(tmp_path_factory.mktemp("long") / "long_run", CHARS)
    with ingesting_server(tmp_path_factory.mktemp("long-data")) as (base, store, queue):
        queue.enqueue(store.create_run_from_path(source).id)
        run = wait_done(base, store.list()[0].id)
        assert run["status"] == "ready", run
        yield base, run


def get(base: str, path: str, **params) -> httpx.Response:
    resp = httpx.get(f"{base}{path}", params=params, timeout=60)
    assert resp.status_code == 200, resp.text[:300]
    assert len(resp.content) < SMALL_BYTES, (path, len(resp.content))
    return resp


def test_the_timeline_slices_answer_the_name_cut(served):
    base, run = served
    api = f"/api/runs/{run['id']}/timeline"
    track = next(t for t in get(base, f"{api}/tracks").json()["tracks"] if t["slice_count"] == 3)
    answer = get(base, f"{api}/slices", track_id=track["track_id"]).json()
    assert sorted(answer["names"]) == sorted(["a", "b", CUT])
    typed = httpx.get(f"{base}{api}/slices", params={"track_id": track["track_id"]}, timeout=60,
                      headers={"accept": columns.MEDIA_TYPE})
    assert len(typed.content) < SMALL_BYTES and CUT in columns.decode(typed.content)["names"]


def test_search_range_stats_and_detail_answer_it_cut_and_the_whole_name_on_request(served):
    base, run = served
    api = f"/api/runs/{run['id']}/timeline"
    hits = get(base, f"{api}/search", q="LLLL").json()["hits"]
    assert hits["name"] == [CUT] and hits["slice_id"]
    slice_id = hits["slice_id"][0]
    stats = get(base, f"{api}/range_stats").json()
    assert CUT in stats["name"] and stats["totals"]["names"] == 3
    instances = get(base, f"{api}/range_instances", name=CUT).json()  # the cut name, sent back as answered
    assert instances["total"] == 1 and instances["slice_id"] == [slice_id]
    detail = get(base, f"{api}/slices/{slice_id}").json()
    assert detail["name"] == CUT and detail["name_truncated"] and detail["name_chars"] == CHARS
    whole = httpx.get(f"{base}{api}/slices/{slice_id}/name", timeout=60)
    assert whole.status_code == 200 and whole.headers["content-type"].startswith("text/plain")
    assert whole.text == LONG_NAME_CHAR * CHARS
    short = get(base, f"{api}/search", q="b").json()["hits"]
    assert short["name"] == ["b"]
    detail = get(base, f"{api}/slices/{short['slice_id'][0]}").json()
    assert (detail["name"], detail["name_truncated"], detail["name_chars"]) == ("b", False, 1)
