"""Issue #37 item 1: MindSpore's profiler output opens on every view, through the sharded path the server uses,
with the numbers of its own CSVs.

Generated twins (``sample_data._mindspore``): MindSpore 2.3+ ``*_ascend_ms`` folders in PyNative mode (steps from
``Python::PythonObserved::ProfilerStep#N``) at Level1 and Level0, in graph mode (no step markers: one step 0), and
MindSpore 2.2's ``profiler`` folder (read from its ``PROF_*`` output). Each is a two-rank cluster.
"""

from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from ascendscope import open as open_run
from ascendscope.ingest.discover import discover
from ascendscope.sample_data.generate import generate_mindspore
from tests.samples import REAL_SAMPLES

TWINS = {  # name -> generate_mindspore arguments
    "pynative": {"mode": "pynative"},
    "graph": {"mode": "graph"},
    "level0": {"mode": "pynative", "level": "Level0"},
    "old": {"layout": "profiler"},
    "db": {"mode": "pynative", "export": "db"},  # the same run as "pynative", as MindSpore's db export
    "raw": {"layout": "profiler", "exported": False},  # 2.0-2.1: PROF_* holds raw data only
}
NEW_LAYOUT = ("pynative", "graph", "level0")
CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "mindspore_profiler_2023"
MSPROF_SAMPLE = REAL_SAMPLES / "mindinsight_msprof_2dev_2023"


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """``{name: (source folder, run id)}`` ingested sharded into one store; a TestClient over it."""
    from fastapi.testclient import TestClient

    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    base = tmp_path_factory.mktemp("mindspore")
    store = RunStore(base / "data")
    runs = {}
    for i, (name, kw) in enumerate(TWINS.items()):
        src = base / name
        generate_mindspore(src, ranks=2, steps=2, ops_per_step=40, seed=30 if name == "db" else 30 + i, **kw)
        run = store.create_run(name, str(src))
        # a shard per rank for one twin (a large run's layout), the server's grouping of small ranks for the rest
        summary = ingest_sharded(src, store.run_dir(run.id), workers=1, group_bytes=0 if name == "pynative" else None)
        store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
        runs[name] = (src, run.id)
    app = create_app(Settings.from_env(environ={}, data_dir=str(base / "data")))
    with TestClient(app) as client:
        yield runs, client, app, store


def _sql(run, query: str):
    """``run.sql`` in this process (its limits lifted): these tests read their runs, the bounds are
    tests/pyapi/test_sql_bounds.py's, and a bounded query starts a worker process of its own for each run."""
    return run.sql(query, timeout_s=None, memory_limit=None)


def _csv(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _ns(us: str) -> int:
    return int(Decimal(us.strip()) * 1000)


def _rank_dirs(src: Path) -> dict[int, Path]:
    return {int(p.name.split("_")[0].split("-")[1]): p / "ASCEND_PROFILER_OUTPUT" for p in src.glob("*_ascend_ms")}


def _get(client, run_id, path, **params):
    r = client.get(f"/api/runs/{run_id}/{path}", params=params)
    assert r.status_code == 200, (path, r.text[:300])
    return r.json()


def test_discovery_takes_ascend_ms_as_ranks_and_warns_on_an_unparsed_one(tmp_path):
    generate_mindspore(tmp_path / "run", ranks=2, steps=1, ops_per_step=20, seed=7)
    (tmp_path / "run" / "worker-9_1_20250101000000000_ascend_ms" / "FRAMEWORK").mkdir(parents=True)
    disc = discover(tmp_path / "run")
    assert [(s.rank, s.rank_source) for s in disc.ranks] == [(0, "profiler_info_file"), (1, "profiler_info_file")]
    assert "trace_view" in disc.ranks[0].files and "kernel_details" in disc.ranks[0].files
    (msg,) = [m for _, f, m in disc.warnings if f.startswith("worker-9")]
    assert "without ASCEND_PROFILER_OUTPUT" in msg and "not parsed" in msg


@pytest.mark.parametrize("name", NEW_LAYOUT)
def test_kernels_steps_and_communication_equal_the_csvs(twins, name):
    runs, client, _, _ = twins
    src, run_id = runs[name]
    ops = _get(client, run_id, "operators")
    comm = {row["rank"]: row for row in _get(client, run_id, "communication")["totals"]["rows"]}
    summary = _get(client, run_id, "summary")
    for rank, out in sorted(_rank_dirs(src).items()):
        kernels = _csv(out / "kernel_details.csv")
        (got,) = [r for r in ops["ranks"] if r["rank"] == rank]
        assert got["kernels"] == len(kernels)
        assert got["kernel_total_ns"] == sum(_ns(k["Duration(us)"]) for k in kernels)
        steps = {int(r["Step"]): r for r in _csv(out / "step_trace_time.csv")}
        shown = {b["step"]: b for b in summary["breakdown"] if b["rank"] == rank}
        assert set(shown) == set(steps)
        for step, row in steps.items():
            for col, key in (("Computing", "computing_ns"), ("Communication", "communication_ns"),
                             ("Free", "free_ns"), ("Stage", "stage_ns")):
                assert shown[step][key] == _ns(row[col]), (rank, step, col)
        if not (out / "communication.json").is_file():  # Level0 writes none
            continue
        ops_json = json.loads((out / "communication.json").read_text())
        elapse = sum(Decimal(str(op["Communication Time Info"]["Elapse Time(ms)"]))
                     for step in ops_json.values() for kind in step.values()
                     for op_name, op in kind.items() if op_name != "Total Op Info")
        assert comm[rank]["elapse_time_ns"] == int(elapse * 1_000_000)
        assert comm[rank]["ops"] == sum(len([o for o in kind if o != "Total Op Info"])
                                        for step in ops_json.values() for kind in step.values())


@pytest.mark.parametrize("name", NEW_LAYOUT)
def test_the_mindspore_lane_is_the_framework_lane_with_its_steps(twins, name):
    runs, client, _, _ = twins
    src, run_id = runs[name]
    tracks = _get(client, run_id, "timeline/tracks")["tracks"]
    kinds = {}
    for t in tracks:
        kinds.setdefault(t["process_name"], set()).add(t["kind"])
    assert kinds["MindSpore"] == {"python"}
    # PyNative's host-CPU operators are framework work too; graph mode's Scope Layer redraws device tasks by scope
    assert kinds.get("CPU OP") == ({"python"} if name != "graph" else None)
    assert kinds.get("Scope Layer") == ({"other"} if name == "graph" else None)
    with open_run(twins[3].run_dir(run_id)) as run:
        steps = _sql(run, "SELECT rank, step, host_start_ns, host_end_ns FROM steps ORDER BY ALL").values.tolist()
        names = _sql(run, "SELECT DISTINCT s.name FROM slices s JOIN tracks t USING (track_id) "
                        "WHERE t.process_name = 'MindSpore' AND s.name LIKE '%Default/network-%' LIMIT 1")
    expected = []
    for rank, out in sorted(_rank_dirs(src).items()):
        for e in json.loads((out / "trace_view.json").read_text()):
            if e.get("ph") == "X" and e["name"].startswith("Python::PythonObserved::ProfilerStep#"):
                start = int(Decimal(e["ts"]) * 1000)
                expected.append([rank, int(e["name"].rsplit("#", 1)[1]), start, start + round(e["dur"] * 1000)])
    assert steps == sorted(expected)
    assert (len(expected) == 4) == (name != "graph")  # graph mode writes no step markers
    assert len(names) == 1  # op names keep their graph scopes


@pytest.mark.parametrize("name", NEW_LAYOUT)
def test_a_cluster_of_mindspore_ranks_opens_in_the_cluster_view(twins, name):
    runs, client, _, _ = twins
    src, run_id = runs[name]
    overview = _get(client, run_id, "cluster/overview")
    assert overview["rank_count"] == 2 and overview["ranks"]["has_trace"] == [True, True]
    outs = _rank_dirs(src)
    kernels = [len(_csv(outs[r] / "kernel_details.csv")) for r in (0, 1)]
    assert overview["ranks"]["kernel_count"] == kernels
    stage = [sum(_ns(row["Stage"]) for row in _csv(outs[r] / "step_trace_time.csv")) for r in (0, 1)]
    assert overview["per_rank"]["total_step_ns"] == stage
    for view in ("cluster/heatmap", "cluster/matrix"):
        _get(client, run_id, view)


def test_the_db_export_opens_with_the_text_exports_kernels(twins):
    """ascend_mindspore_profiler_{rank}.db (CANN's msprof db under MindSpore's name) of the PyNative twin's run."""
    runs, client, _, _ = twins
    src, run_id = runs["db"]
    assert sorted(p.name for p in src.glob("*/ASCEND_PROFILER_OUTPUT/*")) == \
        ["ascend_mindspore_profiler_0.db", "ascend_mindspore_profiler_1.db"]
    ops = _get(client, run_id, "operators")
    for rank, out in sorted(_rank_dirs(runs["pynative"][0]).items()):
        kernels = _csv(out / "kernel_details.csv")
        (got,) = [r for r in ops["ranks"] if r["rank"] == rank]
        assert (got["kernels"], got["kernel_total_ns"]) == (len(kernels), sum(_ns(k["Duration(us)"]) for k in kernels))


def test_the_older_profiler_folder_opens_from_its_prof_output(twins):
    runs, client, _, _ = twins
    src, run_id = runs["old"]
    ranks = _get(client, run_id, "cluster/overview")
    assert ranks["rank_count"] == 2 and ranks["ranks"]["has_trace"] == [True, True]
    with open_run(twins[3].run_dir(run_id)) as run:
        notes = _sql(run, "SELECT rank, file, message FROM warnings WHERE file = 'profiler' ORDER BY rank").values
        kernels = _sql(run, "SELECT rank, count(*) FROM kernels GROUP BY rank ORDER BY rank").values.tolist()
    assert [r for r, _, _ in notes] == [0, 1]
    assert all("MindSpore's own summaries are not read" in m and "PROF_*" in m for _, _, m in notes)
    assert "ascend_timeline_display_0.json" in notes[0][2] and "ascend_timeline_display_1.json" in notes[1][2]
    # the kernels are the msprof output's, the same tasks MindSpore's own timeline shows
    for rank, count in kernels:
        shown = json.loads((src / "profiler" / f"ascend_timeline_display_{rank}.json").read_text())
        assert count == sum(1 for e in shown if e.get("ph") == "X" and e["pid"] in (rank, 10000) and e["tid"] != 100000)


def test_the_older_profiler_folder_without_msprof_output_opens_from_mindspores_own_timeline(twins):
    runs, client, _, store = twins
    src, run_id = runs["raw"]
    ops = _get(client, run_id, "operators")
    overview = _get(client, run_id, "cluster/overview")
    assert overview["rank_count"] == 2
    with open_run(store.run_dir(run_id)) as run:
        kinds = dict(_sql(run, "SELECT DISTINCT process_name, kind FROM tracks").values.tolist())
        steps = _sql(run, "SELECT rank, step, host_start_ns, host_end_ns FROM steps ORDER BY ALL").values.tolist()
        overlap = _sql(run, "SELECT DISTINCT thread_name FROM tracks WHERE kind = 'overlap' ORDER BY 1").values
    assert kinds == {"AICORE OP": "hardware", "Communication Op": "communication", "Overlap Analysis": "overlap",
                     "Steps": "other"}
    assert sorted(t for (t,) in overlap) == ["Communication", "Communication(Not Overlapped)", "Computing", "Free"]
    expected_steps = []
    for rank in (0, 1):
        events = json.loads((src / "profiler" / f"ascend_timeline_display_{rank}.json").read_text())
        tasks = [e for e in events if e.get("ph") == "X" and e["pid"] in (rank, 10000) and e["tid"] != 100000]
        (got,) = [r for r in ops["ranks"] if r["rank"] == rank]
        assert got["kernels"] == len(tasks)
        assert got["kernel_total_ns"] == sum(round(Decimal(str(e["dur"])) * 1000) for e in tasks)
        for e in events:
            if e.get("ph") == "X" and e["tid"] == 100000:
                start = round(Decimal(str(e["ts"])) * 1000)
                expected_steps.append([rank, int(e["name"]), start, start + round(Decimal(str(e["dur"])) * 1000)])
    assert steps == sorted(expected_steps) and len(steps) == 4


@pytest.mark.parametrize("name", list(TWINS))
def test_every_view_answers(twins, name):
    """Every GET route of the API, its required parameters filled from the run: no 5xx."""
    runs, client, app, store = twins
    _every_view_answers(client, app, store, runs[name][1])


def _ingest(store, name: str, src: Path) -> str:
    from ascendscope.ingest.shards import ingest_sharded

    run = store.create_run(name, str(src))
    summary = ingest_sharded(src, store.run_dir(run.id), workers=1)
    store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    return run.id


def test_mindspores_own_real_timeline_opens_without_msprof_output(twins, tmp_path):
    """The real ascend_timeline_display_0.json of tests/corpus (no metadata at all): its lanes are labelled by
    MindSpore's pid numbering and its tasks are the rank's kernels."""
    runs, client, app, store = twins
    shutil.copytree(CORPUS, tmp_path / "run")
    run_id = _ingest(store, "real-own", tmp_path / "run")
    with open_run(store.run_dir(run_id)) as run:
        ranks = _sql(run, "SELECT rank, rank_source FROM ranks").values.tolist()
        lanes = _sql(run, "SELECT process_name, thread_name, kind, slice_count FROM tracks ORDER BY ALL"
                     ).values.tolist()
        kernels = _sql(run, "SELECT name, accelerator_core, duration_ns FROM kernels ORDER BY start_ns"
                       ).values.tolist()
        notes = [m for (m,) in _sql(run, "SELECT message FROM warnings").values.tolist()]
    assert ranks == [[0, "file_name"]]
    assert lanes == [["AICORE OP", "Thread 519", "hardware", 1], ["AICPU OP", "Thread 0", "hardware", 2]]
    assert kernels == [["InitData", "AI_CPU", 160000], ["GetNext", "AI_CPU", 518000],
                       ["AssignAdd-op142", "AI_CORE", 3100]]
    assert any("no process_labels for pid 1, 9000" in m and "1 AICORE OP" in m for m in notes)
    assert any("aicore_intermediate_1_type.csv" in m for m in notes) is False  # rank 1's file: not this rank's
    _every_view_answers(client, app, store, run_id)


def test_the_real_profiler_folder_reads_its_prof_output(twins, tmp_path):
    """mindinsight's profiler folder whole: the corpus files beside its PROF_* folders (the real sample, or its
    twin without ../shared): the ranks are the PROF_* output's, MindSpore's timeline is named as not read."""
    runs, client, app, store = twins
    prof = sorted(MSPROF_SAMPLE.glob("PROF_*"))
    if not prof:
        pytest.skip(f"no PROF_* folders at {MSPROF_SAMPLE}")
    shutil.copytree(CORPUS, tmp_path / "run")
    for folder in prof:
        shutil.copytree(folder, tmp_path / "run" / "profiler" / folder.name)
    run_id = _ingest(store, "real-prof", tmp_path / "run")
    with open_run(store.run_dir(run_id)) as run:
        ranks = _sql(run, "SELECT rank, rank_source FROM ranks ORDER BY rank").values.tolist()
        lanes = set(_sql(run, "SELECT DISTINCT process_name FROM tracks").values.ravel().tolist())
        notes = _sql(run, "SELECT rank, message FROM warnings WHERE file = 'profiler' ORDER BY rank").values.tolist()
    assert [r for r, _ in ranks] == [0, 1] and {s for _, s in ranks} == {"msprof_info"}
    assert "Ascend Hardware" in lanes and "AICPU OP" not in lanes
    assert [r for r, _ in notes] == [0, 1]
    assert "ascend_timeline_display_0.json" in notes[0][1] and "aicore_intermediate_1_type.csv" in notes[1][1]
    _every_view_answers(client, app, store, run_id)


def _every_view_answers(client, app, store, run_id: str) -> None:
    with open_run(store.run_dir(run_id)) as run:
        track_id, slice_id, slice_name = _sql(
            run, "SELECT t.track_id, s.slice_id, s.name FROM slices s JOIN tracks t USING (track_id) "
            "WHERE t.kind = 'hardware' ORDER BY s.slice_id LIMIT 1").values[0].tolist()
        comm = _sql(run, "SELECT group_id, op_name FROM comm_ops ORDER BY ALL LIMIT 1").values.tolist()
        group_id, op_name = comm[0] if comm else ("0", "x")
    values = {"run_id": run_id, "track_id": track_id, "slice_id": slice_id, "rank": 0, "q": "op",
              "name": slice_name, "page_name": "python", "key": slice_name, "group_id": group_id, "op_name": op_name,
              "start_ns": 0, "end_ns": 1 << 62, "sql": "SELECT count(*) FROM slices", "a": run_id, "b": run_id,
              "fmt": "csv"}
    seen = ok = 0
    for path, ops in app.openapi()["paths"].items():
        if "get" not in ops or "{run_id}" not in path and not path.startswith("/api/compare"):
            continue
        params = {p["name"]: p for p in ops["get"].get("parameters", [])}
        url = path
        for pname, p in params.items():
            if p["in"] == "path":
                value = "kernels" if pname == "name" else values.get(pname, "x")
                url = url.replace("{" + pname + "}", str(value))
        query = {k: values[k] for k, p in params.items() if p["in"] == "query" and p.get("required") and k in values}
        resp = client.get(url, params=query)
        assert resp.status_code < 500, (url, resp.status_code, resp.text[:300])
        if path.startswith("/api/runs/{run_id}/memory/snapshot"):  # these runs have no memory snapshot
            assert resp.status_code in (404, 422), (url, resp.status_code, resp.text[:300])
            continue
        seen += 1
        ok += resp.status_code == 200
    assert seen >= 50 and ok >= seen - 5, (seen, ok)  # the walk filled the parameters: nearly all answer
