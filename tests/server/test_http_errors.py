"""Errors the client caused answer 4xx, the server's own failures a generic 500, in the one error shape:

* every integer parameter of every API route (found in the OpenAPI schema) refuses values beyond int64, floats
  and words with 422 ``invalid_parameter`` naming it, never a database error; and each one, and each text
  parameter that carries integers, at a value that passes but overflows where it is used (an INTEGER cast, a sum
  with a timestamp) answers 4xx, or an answer, never 500;
* profiler metadata nested absurdly deep does not take the summary down;
* a full disk answers 507 ``insufficient_storage``;
* a 500 names an error id, not the exception (paths, SQL), and the keep-alive connection survives it;
* a client that is not on the server's machine sees no absolute server path (runs, run, summary, pages, errors).
"""

from __future__ import annotations

import errno
import http.client
import io
import json
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import duckdb
import pytest
from fastapi.testclient import TestClient

from tests.archives import zip_folder
from tests.conftest import PYTORCH_TEXT, needs_samples, serving

pytestmark = needs_samples

OUT_OF_RANGE = ("9223372036854775808", "-9223372036854775809", "1e400", "abc", "1.5")
IN_RANGE_EXTREMES = ("9223372036854775807", "-9223372036854775808")
SQL_WORDS = ("SELECT", " FROM ", "Conversion Error", "Binder Error", "Catalog Error", "Parser Error", "_duckdb",
             "Traceback")
EXPECTED_INT_PARAMS = {"rank", "step", "offset", "limit", "track_id", "start_ns", "end_ns", "at_ns", "slice_id"}


def make_client(data_dir: Path, **kwargs) -> TestClient:
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    return TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data_dir))), **kwargs)


def is_integer(param: dict) -> bool:
    schema = param.get("schema", {})
    return any(s.get("type") == "integer" or s.get("items", {}).get("type") == "integer"
               for s in schema.get("anyOf", [schema]))


def first_choice(param: dict) -> str:
    """A valid value for a non-integer parameter: the first of its allowed values (enum), else any text."""
    schema = param.get("schema", {})
    for s in schema.get("anyOf", [schema]):
        if s.get("enum"):
            return str(s["enum"][0])
    return "a"


def integer_params(app):
    """(method, path template, the integer parameter, all the route's parameters) for every API route."""
    for path, operations in app.openapi()["paths"].items():
        for method, op in operations.items():
            params = op.get("parameters", [])
            for p in params:
                if is_integer(p):
                    yield method, path, p, params


def request_with(method: str, path: str, target: dict, value: str, params: list[dict], run_id: str,
                 valid: dict[str, str]) -> tuple[str, str, dict]:
    """The route called with ``target`` set to ``value`` and every other required parameter valid."""
    url, query = path.replace("{run_id}", run_id), {}
    for p in params:
        given = value if p is target else valid.get(p["name"], "1" if is_integer(p) else first_choice(p))
        if p["in"] == "path" and p["name"] != "run_id":
            url = url.replace(f"{{{p['name']}}}", given)
        elif p["in"] == "query" and (p is target or p.get("required")):
            query[p["name"]] = given
    return method.upper(), url, query


def assert_error_shape(resp, status: int | None = None) -> dict:
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert {"code", "message", "status"} <= set(err) <= {"code", "message", "status", "details"}, err
    assert err["status"] == resp.status_code and isinstance(err["message"], str) and err["message"]
    assert status is None or resp.status_code == status, (resp.status_code, err)
    assert not any(word in resp.text for word in SQL_WORDS), resp.text
    return err


# -- integer parameters ---------------------------------------------------------------------------------------------
def test_every_integer_parameter_refuses_what_is_not_an_int64(app, client, runs):
    run = runs.ids["level1"]
    tracks = client.get(f"/api/runs/{run}/timeline/tracks").json()["tracks"]
    valid = {"track_id": str(next(t["track_id"] for t in tracks if t["kind"] != "counter")),
             "a": run, "b": run}  # the two runs of a comparison
    seen = set()
    for method, path, param, params in integer_params(app):
        seen.add(param["name"])
        for value in OUT_OF_RANGE:
            method_, url, query = request_with(method, path, param, value, params, run, valid)
            resp = client.request(method_, url, params=query)
            where = (method, path, param["name"], value)
            assert 400 <= resp.status_code < 500, (where, resp.text[:300])
            err = assert_error_shape(resp, 422)
            assert err["code"] == "invalid_parameter" and param["name"] in err["message"], (where, err)
        for value in IN_RANGE_EXTREMES:  # legal, if absurd: an answer or a 4xx, never a database failure
            method_, url, query = request_with(method, path, param, value, params, run, valid)
            resp = client.request(method_, url, params=query)
            assert resp.status_code < 500, ((method, path, param["name"], value), resp.text[:300])
    assert EXPECTED_INT_PARAMS <= seen, seen  # the walk really covered the routes


# values that pass as integers (int64, or digits in a text parameter) but overflow where they are used: past 32
# bits (an INTEGER cast), at the int64 ends (a sum with a timestamp), and a sum of two of them
OVERFLOW_LATER = ("2147483648", "3000000000", "-2147483649", "9223372036854775807", "-9223372036854775808",
                  "4611686018427387904")
# text parameters that carry integers, with the forms they take
INTEGER_TEXTS = {"waiters": ("{v}", "0,{v}"), "ranks": ("{v}", "0,{v}"), "after": ("{v}:1", "1:{v}"),
                 "before": ("{v}:1", "1:{v}"), "step": ("{v}",), "step_a": ("{v}",), "step_b": ("{v}",),
                 "key": ("{v}",), "group": ("{v}",), "preferred": ("{v}",)}


def realistic_values(client, run: str) -> dict[str, str]:
    """A valid, ordinary value for each parameter the routes share: the run's own window, a slice, a track."""
    detail = client.get(f"/api/runs/{run}").json()
    tracks = client.get(f"/api/runs/{run}/timeline/tracks").json()["tracks"]
    track = next(t for t in tracks if t["kind"] != "counter" and t["slice_count"])
    start, end = int(detail["start_ns"]), int(detail["end_ns"])
    window = client.get(f"/api/runs/{run}/timeline/slices", params={"track_id": track["track_id"]}).json()
    return {"a": run, "b": run, "run_id": run, "start_ns": str(start), "end_ns": str(end), "at_ns": str(start),
            "track_id": str(track["track_id"]), "slice_id": str(window["tracks"][0]["slice_id"][0]), "rank": "0",
            "offset_rank": "0", "offset_ns": "0", "offset": "0", "limit": "10", "seq": "0", "waiters": "1",
            "ranks": "0,1"}


def test_integers_that_validate_but_overflow_later_are_4xx(app, client, runs):
    """Each integer parameter (and each text parameter that carries integers) at a value the route accepts as a
    number but that overflows where it is used, the route's other parameters ordinary (and, for a time, the
    window's other bounds left to their defaults): a 4xx or an answer, never a database failure."""
    run = runs.ids["level1"]
    ordinary = realistic_values(client, run)
    no_window = {k: v for k, v in ordinary.items() if not k.endswith("_ns")}
    failures, tried = [], 0
    for method, path, target, params in every_parameter(app):
        forms = ("{v}",) if is_integer(target) else INTEGER_TEXTS.get(target["name"], ())
        for form, value, others in ((f, v, o) for f in forms for v in OVERFLOW_LATER
                                    for o in ((ordinary, no_window) if target["name"].endswith("_ns") else
                                              (ordinary,))):
            url, query = path.replace("{run_id}", run), {}
            for p in params:
                given = (form.format(v=value) if p is target
                         else others.get(p["name"], "1" if is_integer(p) else first_choice(p)))
                if p["in"] == "path" and p["name"] != "run_id":
                    url = url.replace(f"{{{p['name']}}}", given)
                elif p["in"] == "query" and (p is target or p.get("required") or p["name"] in others):
                    query[p["name"]] = given
            resp = client.request(method.upper(), url, params=query)
            tried += 1
            if resp.status_code >= 500:
                failures.append((method, path, query, resp.status_code))
            else:
                assert not any(w in resp.text for w in SQL_WORDS[2:]), (path, query, resp.text[:300])
    assert tried > 500
    if failures:
        pytest.fail("answered 500:\n" + "\n".join(" ".join(map(str, f)) for f in failures))


def every_parameter(app):
    """(method, path template, a parameter, all the route's parameters) for every API route."""
    for path, operations in app.openapi()["paths"].items():
        for method, op in operations.items():
            params = op.get("parameters", [])
            for p in params:
                yield method, path, p, params


def test_a_search_cursor_beyond_int64_is_a_400(client, runs):
    run = runs.ids["level1"]
    for cursor in ("9223372036854775808:1", "1:-9223372036854775809", "1e400:1"):
        resp = client.get(f"/api/runs/{run}/timeline/search", params={"q": "a", "after": cursor})
        assert assert_error_shape(resp, 400)["code"] == "invalid_cursor"


# -- metadata nested too deep -----------------------------------------------------------------------------------------
@pytest.fixture()
def deep_metadata_run(tmp_path, runs):
    """A copy of level1 whose rank 0 profiler_info nests 100k lists and rank 1 metadata nests 300 levels (parseable,
    but deeper than any encoder allows)."""
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    run = store.create_run("deep", str(PYTORCH_TEXT / "level1"))
    shutil.copy(runs.dbs["level1"], store.db_path(run.id))
    with duckdb.connect(str(store.db_path(run.id))) as con:
        con.execute("UPDATE ranks SET profiler_info = ? WHERE rank = 0", ["[" * 100_000 + "]" * 100_000])
        con.execute("UPDATE ranks SET profiler_metadata = ? WHERE rank = 1", ['{"a":' * 300 + "1" + "}" * 300])
    store.set_status(run.id, "ready")
    return tmp_path, run.id


def test_deeply_nested_metadata_is_reported_not_fatal(deep_metadata_run):
    data_dir, run_id = deep_metadata_run
    with make_client(data_dir) as c:
        resp = c.get(f"/api/runs/{run_id}/summary")
        assert resp.status_code == 200, resp.text[:300]
        ranks = {r["rank"]: r for r in resp.json()["ranks"]}
        assert ranks[0]["extra_metadata"]["profiler_info"] == "unreadable: nested deeper than 64 levels"
        assert ranks[1]["extra_metadata"]["profiler_metadata"] == "unreadable: nested deeper than 64 levels"
        assert ranks[1]["common_config"]  # the other file of the same rank still reads
        assert c.get(f"/runs/{run_id}/summary").status_code == 200


# -- a full disk ---------------------------------------------------------------------------------------------------
class FullDisk(io.RawIOBase):
    def __init__(self, path, code):
        self.path, self.code = path, code

    def writable(self):
        return True

    def write(self, data):
        raise OSError(self.code, "No space left on device", str(self.path))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_during_an_upload_is_a_507(tmp_path, monkeypatch, code):
    from ascendscope.server import uploads

    monkeypatch.setattr(uploads, "open", lambda path, mode: FullDisk(path, code), raising=False)
    with make_client(tmp_path) as c:
        resp = c.post("/api/runs", files={"file": ("level1.zip", zip_folder(PYTORCH_TEXT / "level1"))})
        err = assert_error_shape(resp, 507)
        assert err["code"] == "insufficient_storage" and "disk" in err["message"]
        assert str(tmp_path) not in resp.text
        assert c.get("/api/runs").json()["runs"] == []
    assert not any(p.name.startswith(".upload-") for p in (tmp_path / "runs").iterdir())


def test_a_full_disk_on_rename_is_a_507(tmp_path, monkeypatch):
    from ascendscope.server.runs import RunStore

    run = RunStore(tmp_path).create_run("r", "somewhere")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "runs" / run.id / "run.json"))

    monkeypatch.setattr(RunStore, "update", full)
    with make_client(tmp_path) as c:
        resp = c.patch(f"/api/runs/{run.id}", json={"name": "new"})
        assert assert_error_shape(resp, 507)["code"] == "insufficient_storage"
        assert str(tmp_path) not in resp.text


# -- 500s ----------------------------------------------------------------------------------------------------------
def failing_summary(*args, **kwargs):
    raise duckdb.BinderException("Binder Error: SELECT x FROM '/srv/secret/run.duckdb' failed")


def test_a_500_names_an_error_id_and_keeps_the_connection(runs, monkeypatch, caplog):
    from ascendscope.server.app import create_app
    from ascendscope.server.queries import summary as sq
    from ascendscope.server.settings import Settings

    monkeypatch.setattr(sq, "summary", failing_summary)
    run = runs.ids["level1"]
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(runs.data_dir)))) as base:
        url = urlsplit(base)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        try:
            conn.request("GET", f"/api/runs/{run}/summary")
            failed = conn.getresponse()
            body = json.loads(failed.read())
            sock = conn.sock
            assert sock is not None and failed.getheader("connection") != "close"
            conn.request("GET", f"/api/runs/{run}")
            after = conn.getresponse()
            after.read()
            assert conn.sock is sock  # answered on the same connection, not a new one
        finally:
            conn.close()
    assert failed.status == 500 and after.status == 200
    err = body["error"]
    assert err["code"] == "internal_error" and err["details"]["error_id"] in err["message"]
    assert "/srv/secret" not in json.dumps(body) and "SELECT" not in json.dumps(body)
    logged = [r for r in caplog.records if err["details"]["error_id"] in r.getMessage()]
    assert logged and "Binder Error" in str(logged[0].exc_info[1])  # the details stay in the server log


def test_a_500_page_is_generic_too(client, runs, monkeypatch):
    from ascendscope.server import pages

    def broken(*args, **kwargs):
        raise RuntimeError(f"cannot read {runs.data_dir}/runs")

    monkeypatch.setattr(pages, "_context", broken)
    resp = client.get(f"/runs/{runs.ids['level1']}/summary", headers={"accept": "text/html"})
    assert resp.status_code == 500 and resp.headers["content-type"].startswith("text/html")
    assert str(runs.data_dir) not in resp.text and "internal error" in resp.text


# -- server paths ----------------------------------------------------------------------------------------------------
def server_paths(runs) -> tuple[str, ...]:
    return str(runs.data_dir), str(runs.data_dir.resolve()), str(PYTORCH_TEXT), str(PYTORCH_TEXT.resolve())


def test_remote_clients_see_no_server_paths(client, runs):
    run = runs.ids["level1"]
    listing = client.get("/api/runs")
    detail = client.get(f"/api/runs/{run}")
    summary = client.get(f"/api/runs/{run}/summary")
    page = client.get(f"/runs/{run}/summary")
    for resp in (listing, detail, summary, page):
        assert resp.status_code == 200
        assert not any(p in resp.text for p in server_paths(runs)), resp.request.url
    assert {r["id"]: r["source"] for r in listing.json()["runs"]}[run] == "level1"
    assert detail.json()["source"] == "level1" and detail.json()["meta"]["source_path"] == "level1"
    assert summary.json()["base"]["source_path"] == "level1"


def test_a_local_client_sees_the_paths_it_served(app, runs):
    run = runs.ids["level1"]
    source = str(PYTORCH_TEXT / "level1")
    with TestClient(app, client=("127.0.0.1", 50000)) as local:
        assert local.get(f"/api/runs/{run}").json()["source"] == source
        assert local.get(f"/api/runs/{run}/summary").json()["base"]["source_path"].endswith("level1")
        # a reverse proxy on the same machine forwards remote clients from loopback
        proxied = local.get(f"/api/runs/{run}", headers={"x-forwarded-for": "203.0.113.9"}).json()
        assert proxied["source"] == "level1"


def test_error_texts_carry_no_server_paths(tmp_path):
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    source = "/srv/profiles/job-17/rank0_ascend_pt"
    failed = store.create_run("failed", source)
    store.set_status(failed.id, "failed", error=f"cannot read {source}/trace_view.json; spill in {tmp_path}/runs")
    broken = store.create_run("broken", source)
    store.db_path(broken.id).write_bytes(b"not a database at all" * 5000)
    store.set_status(broken.id, "ready")
    with make_client(tmp_path) as c:
        listed = c.get("/api/runs")
        shown = c.get(f"/api/runs/{failed.id}").json()["error"]
        unreadable = c.get(f"/api/runs/{broken.id}/summary")
        page = c.get(f"/runs/{failed.id}/timeline")
    assert shown == "cannot read rank0_ascend_pt/trace_view.json; spill in <data dir>/runs"
    assert unreadable.status_code in (409, 500)  # a damaged run (409) or a database that cannot be opened (500)
    assert_error_shape(unreadable)
    for resp in (listed, unreadable, page):
        assert str(tmp_path) not in resp.text and "/srv/profiles" not in resp.text, resp.text[:300]
