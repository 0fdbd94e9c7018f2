"""The compact binary answer of slices, counters and flows (``server.columns``, issue #18 item 2): asked for with
``Accept``, it decodes to exactly the JSON answer, on a generated run and on the real level1 sample, over windows
that are answered exactly and from the level of detail; JSON stays the default."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ascendscope.server import columns
from tests.conftest import PYTORCH_TEXT, store_with_copy

BINARY = {"Accept": columns.MEDIA_TYPE}


@pytest.fixture(scope="module")
def generated_client(generated_db, tmp_path_factory):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data = tmp_path_factory.mktemp("columns")
    store, run_id = store_with_copy(generated_db, data)
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data)), store=store)) as client:
        yield client, run_id


@pytest.fixture(params=["generated", "level1"])
def run_client(request, generated_client):
    if request.param == "generated":
        return generated_client
    if not PYTORCH_TEXT.is_dir():
        pytest.skip(f"real samples not found at {PYTORCH_TEXT}")
    return request.getfixturevalue("client"), request.getfixturevalue("runs").ids["level1"]


def windows(meta: dict) -> list[dict]:
    """The whole run, a tenth, and a narrow window near the middle (LOD, then exact answers)."""
    t0, t1 = int(meta["start_ns"]), int(meta["end_ns"])
    span = t1 - t0
    mid = t0 + span // 2
    return [{}, {"start_ns": mid, "end_ns": mid + span // 10}, {"start_ns": mid, "end_ns": mid + span // 2000 + 1}]


def both(client, url: str, params: dict):
    as_json = client.get(url, params=params)
    as_binary = client.get(url, params=params, headers=BINARY)
    assert as_json.status_code == as_binary.status_code == 200, (as_json.text, as_binary.content[:200])
    assert as_json.headers["content-type"].startswith("application/json")
    assert as_binary.headers["content-type"] == columns.MEDIA_TYPE
    for answer in (as_json, as_binary):  # the format follows Accept (and the compression Accept-Encoding)
        assert "Accept" in [v.strip() for v in answer.headers["vary"].split(",")]
    return as_json, as_binary


def test_binary_answers_decode_to_the_json_answers(run_client):
    client, run_id = run_client
    base = f"/api/runs/{run_id}/timeline"
    meta = client.get(f"{base}/tracks").json()
    slice_tracks = [t["track_id"] for t in meta["tracks"] if t["kind"] != "counter" and t["slice_count"]]
    counter_tracks = [t["track_id"] for t in meta["tracks"] if t["kind"] == "counter"]
    assert slice_tracks and counter_tracks
    seen_lod, json_bytes, binary_bytes = set(), 0, 0
    for window in windows(meta):
        for i in range(0, len(slice_tracks), 4):
            for width_px in (1600, 40):  # narrow: dense tracks are answered from the level of detail
                as_json, as_binary = both(client, f"{base}/slices",
                                          {"track_id": slice_tracks[i:i + 4], "width_px": width_px, **window})
                assert columns.decode(as_binary.content, as_lists=True) == as_json.json()
                seen_lod |= {t["lod"] for t in as_json.json()["tracks"]}
                json_bytes, binary_bytes = json_bytes + len(as_json.content), binary_bytes + len(as_binary.content)
        as_json, as_binary = both(client, f"{base}/counters", {"track_id": counter_tracks, "width_px": 800, **window})
        assert columns.decode(as_binary.content, as_lists=True) == as_json.json()
        as_json, as_binary = both(client, f"{base}/flows", window)
        assert columns.decode(as_binary.content, as_lists=True) == as_json.json()
        assert as_json.json()["count"] >= 0
    assert seen_lod == {True, False}
    assert binary_bytes < json_bytes  # smaller, not only different (names, as JSON in both, weigh most here)


def test_json_stays_the_default_and_errors_stay_json(generated_client):
    client, run_id = generated_client
    assert client.get(f"/api/runs/{run_id}/timeline/flows").headers["content-type"].startswith("application/json")
    bad = client.get(f"/api/runs/{run_id}/timeline/slices", params={"track_id": 2**40}, headers=BINARY)
    assert bad.status_code == 404 and bad.json()["error"]["code"] == "track_not_found"


def test_the_openapi_documents_both_answers(generated_client):
    client, _ = generated_client
    paths = client.get("/openapi.json").json()["paths"]
    for name in ("slices", "counters", "flows"):
        op = paths[f"/api/runs/{{run_id}}/timeline/{name}"]["get"]
        assert set(op["responses"]["200"]["content"]) == {"application/json", columns.MEDIA_TYPE}
        assert any(p["name"] == "accept" and p["in"] == "header" for p in op["parameters"])


@pytest.mark.parametrize("accept, wanted", [
    (None, False), ("application/json", False), (columns.MEDIA_TYPE, True),
    (f"{columns.MEDIA_TYPE}, application/json;q=0.5", True), (f"application/json, {columns.MEDIA_TYPE}", False),
    ("*/*", False), (f"{columns.MEDIA_TYPE}x", False)])
def test_accept_negotiation(accept, wanted):
    assert columns.wants_columns(accept) is wanted


def test_each_column_type_round_trips():
    answer = {"i8": np.array([-128, 0, 127]), "i16": np.array([-(2**15), 2**15 - 1]), "i32": np.array([2**31 - 1]),
              "int53": np.array([2**53, -(2**53), 1_700_000_000_000_000]), "i64": np.array([2**62, -3]),
              "f64": np.array([1.5, np.nan, -0.0]), "empty": np.array([], dtype=np.int64),
              "names": np.array(["a", None, "b", "a"], dtype=object), "nested": [{"x": np.arange(3)}],
              "scalar": np.int64(7), "text": "ünïcode", "none": None, "flags": np.array([True, False])}
    data = columns.encode(answer)
    header_types = {kind for kind, _, _ in __import__("json").loads(data[8:8 + int.from_bytes(data[4:8], "little")])
                    ["columns"]}
    assert {"i8", "i16", "i32", "int53", "i64", "f64"} <= header_types
    back = columns.decode(data, as_lists=True)
    assert back == {"i8": [-128, 0, 127], "i16": [-(2**15), 2**15 - 1], "i32": [2**31 - 1],
                    "int53": [2**53, -(2**53), 1_700_000_000_000_000], "i64": [2**62, -3], "f64": [1.5, None, -0.0],
                    "empty": [], "names": ["a", None, "b", "a"], "nested": [{"x": [0, 1, 2]}], "scalar": 7,
                    "text": "ünïcode", "none": None, "flags": [True, False]}
    arrays = columns.decode(data)
    assert arrays["int53"].dtype == np.int64 and arrays["int53"][0] == 2**53
    with pytest.raises(ValueError):
        columns.decode(b"JSON" + data[4:])
