"""Work a request no longer repeats (issue #18 item 3): run.json is parsed once while it is unchanged (and a
rewrite by any process is seen at once), counter answers are cached like slices, and Advice classifies a rank's
gaps with one query. Each test counts the work itself: reads of run.json, computed cache keys, SQL executions."""

from __future__ import annotations

import os
import time

import pytest
from fastapi.testclient import TestClient

from ascendscope.server.queries import advice as aq
from ascendscope.server.runs import RACY_S, RUN_FILE, RunStore
from tests.conftest import store_with_copy


@pytest.fixture(scope="module")
def store_app(generated_db, tmp_path_factory):
    """A store holding the generated run (ready), the crafted Advice run, and an app over it."""
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings
    from tests.advice_sample import add_crafted_run

    data = tmp_path_factory.mktemp("repeated")
    store, run_id = store_with_copy(generated_db, data)
    crafted_id, _, _ = add_crafted_run(data, tmp_path_factory.mktemp("crafted"))
    app = create_app(Settings.from_env(environ={}, data_dir=str(data)), store=store)
    time.sleep(RACY_S + 0.05)  # run.json files younger than this are read again on purpose (RecordCache)
    with TestClient(app) as client:
        yield store, app, client, run_id, crafted_id


def test_run_json_is_parsed_once_while_it_is_unchanged(store_app):
    store, _, client, run_id, _ = store_app
    assert client.get(f"/api/runs/{run_id}/timeline/tracks").status_code == 200
    before = store._records.reads
    for _ in range(20):
        assert client.get(f"/api/runs/{run_id}/timeline/tracks").status_code == 200
        assert client.get(f"/api/runs/{run_id}").status_code == 200
    assert store._records.reads == before  # 40 requests, each checked the file (a stat) and parsed nothing


def test_a_rewrite_by_another_process_is_seen_at_once(store_app, tmp_path):
    """Another store over the same folder stands for another server process: its rename, made within the same
    clock tick and with the same size, is never answered from the cache."""
    store, _, client, run_id, _ = store_app
    other = RunStore(store.data_dir)
    for name in ("aaaa", "bbbb", "cccc"):
        other.update(run_id, name=name)
        assert store.get(run_id).name == name
        assert client.get(f"/api/runs/{run_id}").json()["name"] == name
    other.update(run_id, name="generated")


def test_a_record_changed_behind_the_cache_with_the_same_size_and_stamp_is_read_again(tmp_path):
    """The racy case: a rewrite whose size and timestamps equal the cached file's (a coarse clock) is read again,
    because a file that changed less than RACY_S ago is never trusted."""
    store = RunStore(tmp_path)
    run = store.create_run("x", "x")
    path = store.run_dir(run.id) / RUN_FILE
    st = os.stat(path)
    assert store.get(run.id).name == "x"
    text = path.read_text().replace('"name": "x"', '"name": "y"')
    with open(path, "r+", encoding="utf-8") as f:  # in place: same inode and size
        f.write(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.get(run.id).name == "y"


def test_a_deleted_run_is_gone_for_every_store(store_app, tmp_path):
    from ascendscope.server.runs import RunNotFound

    first, second = RunStore(tmp_path), RunStore(tmp_path)
    run = first.create_run("doomed", "doomed")
    assert second.get(run.id).name == "doomed"
    first.delete(run.id)
    with pytest.raises(RunNotFound):
        second.get(run.id)
    assert run.id not in {r.id for r in second.list()}


def counter_tracks(client, run_id) -> list[int]:
    tracks = client.get(f"/api/runs/{run_id}/timeline/tracks").json()["tracks"]
    return [t["track_id"] for t in tracks if t["kind"] == "counter"]


def test_counter_answers_are_computed_once_and_then_cached(store_app):
    _, app, client, run_id, _ = store_app
    ids = counter_tracks(client, run_id)
    assert ids, "the generated run has counter tracks"
    pool = app.state.query_pool
    params = {"track_id": ids, "width_px": 777}
    computed = pool.counts["computed"]
    first = client.get(f"/api/runs/{run_id}/timeline/counters", params=params)
    assert first.status_code == 200
    assert pool.counts["computed"] - computed == len(ids)
    hits = pool.counts["hit"]
    again = client.get(f"/api/runs/{run_id}/timeline/counters", params=params)
    assert again.json() == first.json()
    assert pool.counts["computed"] - computed == len(ids)  # nothing computed the second time
    assert pool.counts["hit"] - hits == len(ids)


def test_advice_classifies_the_gaps_with_one_query(store_app, monkeypatch):
    """The crafted run has host-bound steps and every gap cause: the findings quote gap totals, the longest gaps
    and the causes of the host-bound steps' Free slices, all from one execution of the gap query."""
    from ascendscope.server.api import deps as api

    _, _, client, _, crafted_id = store_app
    executed = []
    real = api.query

    def counting(cur, sql, params=(), **kw):
        executed.append(sql)
        return real(cur, sql, params, **kw)

    monkeypatch.setattr(api, "query", counting)
    body = client.get(f"/api/runs/{crafted_id}/advice", params={"rank": 0}).json()
    categories = {f["category"] for f in body["findings"]}
    assert {"dispatch", "host_bound"} <= categories
    causes = [i.get("cause") for f in body["findings"] if f["category"] == "host_bound" for i in f["instances"]]
    assert any(causes), "the host-bound findings name the causes of their gaps"
    assert sum(sql.startswith(aq.GAPS_CTE) for sql in executed) == 1
