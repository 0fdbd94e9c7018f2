"""The corpus of real public exports (``tests/corpus``, listed with their provenance in ``MANIFEST.json``): each is
ingested the way the server does it (``ingest_sharded`` into a run store), every GET route of every view answers
it below 500, and the figures its files state — kernel count and total per rank, trace events, profiler steps,
the cluster output's ranks — equal the API's. The figures come from the files through the standard library
(``tests/corpus_figures.py``), never through ascendscope's readers. What an export holds that is not supported
is asserted to be said to the user, with its reason. Runs without ``../shared``: the corpus is in the checkout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import corpus_figures as cf

CORPUS = Path(__file__).resolve().parent / "corpus"
EXPORTS = {e["name"]: e for e in json.loads((CORPUS / "MANIFEST.json").read_text(encoding="utf-8"))["exports"]}
TEXT_SQL = "SELECT 1"
STEPS_SQL = "SELECT step FROM steps ORDER BY step"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """``(client, {name: (run_id, ingest summary) or the ingest's error})``: every export ingested sharded into
    one store; an export that fails fails its own tests only."""
    from fastapi.testclient import TestClient

    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings
    from ascendscope.server.worker import nothing_loaded

    data_dir = tmp_path_factory.mktemp("corpus-data")
    store = RunStore(data_dir)
    runs: dict[str, tuple[str, dict] | str] = {}
    for name in EXPORTS:
        run = store.create_run(name, str(CORPUS / name))
        try:
            summary = ingest_sharded(CORPUS / name, store.run_dir(run.id), workers=1)
        except Exception as exc:  # noqa: BLE001 - the export's tests report it
            runs[name] = f"{type(exc).__name__}: {exc}"
            continue
        if (empty := nothing_loaded(summary)) and name != "msprof_db_2024_target_info":
            runs[name] = empty
            continue
        store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
        runs[name] = (run.id, summary)
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data_dir)))) as client:
        yield client, runs


def _run(corpus, name: str) -> tuple[str, dict]:
    """``(run id, ingest summary)`` of an export; fails with the ingest's error when it was refused."""
    got = corpus[1][name]
    assert not isinstance(got, str), f"{name} was not ingested: {got}"
    return got


def _get_routes(app) -> list[tuple[str, list[dict]]]:
    return [(path, ops["get"].get("parameters", [])) for path, ops in app.openapi()["paths"].items()
            if "get" in ops and path.startswith("/api/runs/{run_id}")]


def _values(client, rid: str) -> dict[str, list[str]]:
    """Valid values of the required parameters, taken from the run itself."""
    listing = client.get(f"/api/runs/{rid}/timeline/tracks").json()
    tracks = listing.get("tracks", [])
    ranks = [str(r) for r in listing.get("ranks", [])] or ["0"]
    slice_tracks = [t for t in tracks if t["kind"] != "counter" and t["slice_count"]]
    counter_tracks = [t for t in tracks if t["kind"] == "counter"]
    out = {"rank": ranks, "q": ["a"], "sql": [TEXT_SQL], "start_ns": ["0"], "end_ns": ["9223372036854775807"],
           "track_id": [str(t["track_id"]) for t in (slice_tracks[:1] + counter_tracks[:1])] or ["1"],
           "page_name": ["overall", "python", "cann", "hardware", "communication"],
           "name": ["steps", "kernels", "kernel_instances", "operators", "memory", "memory_allocations",
                    "communication", "communication_ops", "advice"], "fmt": ["csv", "parquet"]}
    slice_id, slice_name = "1", "a"
    if slice_tracks:
        rows = client.get(f"/api/runs/{rid}/timeline/slices",
                          params={"track_id": slice_tracks[0]["track_id"]}).json()
        found = rows.get("slices") or rows.get("rows") or []
        if found and isinstance(found, list) and isinstance(found[0], dict):
            slice_id, slice_name = str(found[0].get("slice_id", 1)), str(found[0].get("name", "a"))
    out["slice_id"], out["key"] = [slice_id], ["a"]
    out["name_instances"] = [slice_name]
    late = client.get(f"/api/runs/{rid}/late_arrivals/table").json()
    first = (late.get("rows") or [{}])[0] if isinstance(late, dict) else {}
    out["group_id"], out["op_name"] = [str(first.get("group_id", "g"))], [str(first.get("op_name", "op"))]
    return out


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_no_get_route_answers_5xx(corpus, name):
    client = corpus[0]
    rid = _run(corpus, name)[0]
    values = _values(client, rid)
    failures = []
    for path, params in _get_routes(client.app):
        required = [p for p in params if p.get("required") and p["name"] != "run_id"]
        choices = [[(p, v) for v in (values["name_instances"] if p["name"] == "name" and p["in"] == "query"
                                     else values.get(p["name"], ["1"]))] for p in required]
        combos = [[]]
        for options in choices:
            combos = [c + [o] for c in combos for o in options]
        for combo in combos:
            url, query = path.replace("{run_id}", rid), {}
            for p, v in combo:
                if p["in"] == "path":
                    url = url.replace(f"{{{p['name']}}}", v)
                else:
                    query[p["name"]] = v
            if any(p["name"] == "rank" for p in params):
                query.setdefault("rank", values["rank"][0])
            resp = client.get(url, params=query)
            if resp.status_code >= 500:
                failures.append((url, query, resp.status_code, resp.text[:200]))
    assert not failures, failures


@pytest.mark.parametrize("name", sorted(n for n, e in EXPORTS.items() if "kernels_csv" in e["checks"]))
def test_kernel_count_and_total_per_rank(corpus, name):
    stated = cf.kernel_csv_figures(CORPUS / name)
    got = corpus[0].get(f"/api/runs/{_run(corpus, name)[0]}/operators").json()["ranks"]
    assert {r["rank"]: (r["kernels"], r["kernel_total_ns"]) for r in got} == stated


@pytest.mark.parametrize("name", sorted(n for n, e in EXPORTS.items() if "msprof_db" in e["checks"]))
def test_msprof_db_compute_tasks(corpus, name):
    stated = cf.msprof_db_figures(next((CORPUS / name).glob("*.db")))
    got = corpus[0].get(f"/api/runs/{_run(corpus, name)[0]}/operators").json()["ranks"]
    assert [(r["kernels"], r["kernel_total_ns"]) for r in got] == [stated]


@pytest.mark.parametrize("name", sorted(n for n, e in EXPORTS.items() if "msprof_db" in e["checks"]))
def test_msprof_db_block_dim_and_cann_lane(corpus, name):
    """report_0.db / msprof_0.db of 2024: Block Dim comes from COMPUTE_TASK_INFO's ``block_dim`` column, the CANN
    lane from its API table (``API`` before it was named ``CANN_API``)."""
    client = corpus[0]
    rid, summary = _run(corpus, name)
    assert not [w for w in summary["warnings"] if "block_dim" in w["message"]]
    rows = client.get(f"/api/runs/{rid}/operators/instances", params={"rank": 0, "limit": 500}).json()["rows"]
    assert rows and all(r["block_dim"] is not None for r in rows)
    kinds = {t["kind"] for t in client.get(f"/api/runs/{rid}/timeline/tracks").json()["tracks"]}
    assert "cann" in kinds, kinds


def test_first_msprof_db_schema_is_reported_unsupported(corpus):
    summary = _run(corpus, "msprof_db_2024_target_info")[1]
    assert any(w["message"].startswith("not supported: the first msprof db schema") for w in summary["warnings"])


@pytest.mark.parametrize("name", sorted(n for n, e in EXPORTS.items() if "trace_events" in e["checks"]))
def test_every_trace_event_is_a_slice(corpus, name):
    events = cf.trace_events(CORPUS / name)
    stated = sum(1 for e in events if e.get("ph") in ("X", "i", "I"))  # an instant event is a slice of no length
    tracks = corpus[0].get(f"/api/runs/{_run(corpus, name)[0]}/timeline/tracks").json()["tracks"]
    assert sum(t["slice_count"] for t in tracks if not t["derived"] and t["kind"] != "counter") == stated


@pytest.mark.parametrize("name", sorted(n for n, e in EXPORTS.items() if "profiler_steps" in e["checks"]))
def test_profiler_steps(corpus, name):
    rid, summary = _run(corpus, name)
    stated = cf.profiler_steps(cf.trace_events(CORPUS / name))
    rows = corpus[0].get(f"/api/runs/{rid}/query", params={"sql": STEPS_SQL}).json()["rows"]
    assert [step for (step,) in rows] == sorted(stated)
    resp = corpus[0].get(f"/api/runs/{rid}/critical_path", params={"rank": summary["ranks"][0]})
    if cf.gpu_compute_union_ns(cf.trace_events(CORPUS / name)) or name.startswith("torch_npu"):
        assert resp.status_code == 200 and resp.json()["steps"] == sorted(stated), resp.text[:300]
    else:  # a CPU-only trace: no device work, and the user is told so
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "empty_step", resp.text[:300]


def test_cluster_output_alone_is_a_run(corpus):
    """A folder of msprof-analyze's cluster_analysis_output only: ingested, and the Cluster view reads its ranks."""
    stated = cf.cluster_step_ranks(CORPUS / "msprof_analyze_8rank_cluster_output")
    rid = _run(corpus, "msprof_analyze_8rank_cluster_output")[0]
    overview = corpus[0].get(f"/api/runs/{rid}/cluster/overview").json()
    assert overview["cluster_analysis"]["found"] and overview["cluster_analysis"]["ranks"] == len(stated) == 8


def test_kernels_without_step_ids_list_and_export(corpus):
    """kernel_details.csv written without a Step Id column: the instance lists and the export answer (they read the
    run's own kernels table, not another attached database's)."""
    client = corpus[0]
    rid = _run(corpus, "torch_npu_2023_kernels_no_step")[0]
    for path in ("operators/instances", "operators/instances.csv", "export/kernel_instances.csv"):
        resp = client.get(f"/api/runs/{rid}/{path}", params={"rank": 0})
        assert resp.status_code == 200, (path, resp.text[:300])
    rows = client.get(f"/api/runs/{rid}/operators/instances", params={"rank": 0, "limit": 500}).json()["rows"]
    assert len(rows) == 8 and all(r["step_id"] is None for r in rows)


COMPUTING_SQL = ("SELECT sum(s.dur_ns) AS n FROM slices s JOIN tracks t USING (track_id) "
                 "WHERE t.kind = 'overlap' AND s.name = 'Computing'")


@pytest.mark.parametrize("name", sorted(n for n, e in EXPORTS.items() if n.startswith("kineto_")
                                        and cf.gpu_compute_union_ns(cf.trace_events(CORPUS / n))))
def test_gpu_trace_gets_an_overlap_lane_and_step_breakdown(corpus, name):
    """A Kineto GPU trace has no Overlap Analysis lane: one is derived from its kernels (Computing = their union),
    so the Summary splits its steps."""
    client = corpus[0]
    rid = _run(corpus, name)[0]
    events = cf.trace_events(CORPUS / name)
    got = client.get(f"/api/runs/{rid}/query", params={"sql": COMPUTING_SQL}).json()["rows"][0][0]
    assert got == cf.gpu_compute_union_ns(events)
    if cf.profiler_steps(events):
        breakdown = client.get(f"/api/runs/{rid}/summary").json()["breakdown"]
        assert breakdown and {r["step"] for r in breakdown} <= set(cf.profiler_steps(events))


def _path_is_more_than_before(body: dict) -> None:
    kinds = {seg["kind"] for seg in body["path"]}
    assert "work" in kinds, body["path"][:3]
    before = sum(c["ns"] for c in body["categories"] if c["category"] == "before")
    assert before < body["step_ns"]
    assert not any(seg["name"].startswith(("ProfilerStep#", "Iteration ")) for seg in body["path"])


@pytest.mark.parametrize("name", sorted(n for n, e in EXPORTS.items() if n.startswith("kineto_")
                                        and cf.profiler_steps(cf.trace_events(CORPUS / n))
                                        and cf.gpu_compute_union_ns(cf.trace_events(CORPUS / n))))
def test_critical_path_of_a_gpu_trace_walks_its_kernels(corpus, name):
    """Not one "before the path" element over the whole step: the path runs through the GPU kernels (the step's
    own markers on the device lanes are not work)."""
    rid, summary = _run(corpus, name)
    for step in sorted(cf.profiler_steps(cf.trace_events(CORPUS / name))):
        resp = corpus[0].get(f"/api/runs/{rid}/critical_path", params={"rank": summary["ranks"][0], "step": step})
        if resp.status_code == 404 and resp.json()["error"]["code"] == "empty_step":
            continue  # a step with no device work (the ROCm trace's second step)
        assert resp.status_code == 200, resp.text[:300]
        _path_is_more_than_before(resp.json())


def test_critical_path_of_msprof_iterations(tmp_path):
    """msprof's older per-iteration layout (../shared: two devices, ten iterations): each iteration's path runs
    through its tasks, not the Step Trace marker, nor one "before the path" element."""
    from fastapi.testclient import TestClient

    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings
    from tests.samples import HAVE_REAL, REAL_ROOT

    src = REAL_ROOT / "mindinsight_msprof_2dev_2023"
    if not HAVE_REAL or not src.is_dir():
        pytest.skip(f"real sample {src} not found")
    store = RunStore(tmp_path)
    run = store.create_run("msprof", str(src))
    summary = ingest_sharded(src, store.run_dir(run.id), workers=1)
    store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(tmp_path)))) as client:
        for rank in (0, 1):
            body = client.get(f"/api/runs/{run.id}/critical_path", params={"rank": rank, "step": 3}).json()
            _path_is_more_than_before(body)


@pytest.mark.parametrize("name", sorted(n for n, e in EXPORTS.items() if "serving_trace" in e["checks"]))
def test_serving_trace_spans_on_the_timeline(corpus, name):
    """msServiceProfiler's chrome_tracing.json opened alone is a timeline: every batch's forming and model execution
    is a slice with the file's duration (µs in the file, ns here)."""
    rid, _ = _run(corpus, name)
    for span in ("BatchSchedule", "modelExec"):
        durs = [e["dur"] for e in cf.trace_events(CORPUS / name) if e.get("ph") == "X" and e.get("name") == span]
        sql = f"SELECT count(*), sum(dur_ns) FROM slices WHERE name = '{span}'"
        rows = corpus[0].get(f"/api/runs/{rid}/query", params={"sql": sql}).json()["rows"]
        assert rows[0][0] == len(durs) > 0
        assert abs(rows[0][1] - sum(durs) * 1000) <= len(durs)  # µs with fractions, rounded to whole ns


def test_expert_hotspot_dumps(corpus):
    """MindIE's hotspot dumps alone are a run: per phase, the layer × expert heat map holds each layer's latest
    counts (experts numbered by position: no deployment beside them), and the hottest expert of each layer."""
    name = "msinsight_expert_hotspot_2025"
    stated = cf.expert_hotspot_figures(CORPUS / name)
    client, rid = corpus[0], _run(corpus, name)[0]
    for phase, layers in stated.items():
        got = client.get(f"/api/runs/{rid}/strategy/experts", params={"phase": phase}).json()
        assert got["source"] == "dumps" and got["expert_from"] == "position" and sorted(got["phases"]) == sorted(stated)
        assert got["layers"] == sorted(layers) and got["experts"] == list(range(len(layers[0])))
        assert got["z"] == [layers[layer] for layer in got["layers"]]
        assert [p["hottest_expert"] for p in got["per_layer"]] == [
            max(range(len(row)), key=lambda e: (row[e], -e)) for row in (layers[layer] for layer in got["layers"])]


def test_expert_deployment(corpus):
    name = "msinsight_expert_deployment_2025"
    stated = cf.expert_deployment_figures(CORPUS / name / "prefill_global_deployment.json")
    got = corpus[0].get(f"/api/runs/{_run(corpus, name)[0]}/strategy/experts").json()
    assert got["source"] == "deployment" and got["phase"] == "prefill" and got["layers"] == sorted(stated)
    for i, layer in enumerate(got["layers"]):
        assert {e: c for e, c in zip(got["experts"], got["z"][i]) if c} == stated[layer]
    most = max(c for layer in stated.values() for c in layer.values())
    assert got["hottest"][0]["copies"] == most
