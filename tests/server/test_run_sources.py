"""One answer to "is this a run?" (``ingest.runsource``), through the paths users take: ``ascendscope serve PATH``
(a real server process) and an upload over HTTP open msServiceProfiler's output alone (its CSVs only, its
profiler.db only: no chrome_tracing.json), msprof-analyze's ``cluster_analysis_output`` alone, and a single trace
file (``.json`` and ``.json.gz``); each ends ready, with its data on its view."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import httpx
import pytest

from tests.archives import zip_folder
from tests.conftest import REAL_SAMPLES, ingesting_server, needs_samples
from tests.server.test_cli_serve import ONE_PROCESS, start_serve, stop, wait_for

pytestmark = needs_samples

CLUSTER_OUTPUT = REAL_SAMPLES / "msinsight_server_fixtures" / "cluster_analysis_output"
KINETO_TRACE = REAL_SAMPLES / "hta_gpu_kineto_nonascend" / "trace_filter" / "sampled_rank-0.json.gz"


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """Serving output as ``--format`` can give it (the CSVs alone, the database alone), and the cluster output."""
    from ascendscope.sample_data.serving import burst, write_serving

    work = tmp_path_factory.mktemp("run-sources")
    write_serving(work / "serving_csv", burst(), "ms")
    for name in ("chrome_tracing.json", "profiler.db"):
        (work / "serving_csv" / name).unlink()
    write_serving(work / "serving_db", burst(), "db")
    (work / "serving_db" / "chrome_tracing.json").unlink()
    shutil.copytree(CLUSTER_OUTPUT, work / "cluster_analysis_output")
    return {"serving_csv": work / "serving_csv", "serving_db": work / "serving_db",
            "cluster": work / "cluster_analysis_output"}


def check_run(base: str, run_id: str, kind: str) -> None:
    """The ready run's own view has its data."""
    run = wait_for(lambda: (r := httpx.get(f"{base}/api/runs/{run_id}", timeout=10).json())["status"]
                   in ("ready", "failed") and r, timeout_s=240)
    assert run["status"] == "ready", run
    if kind.startswith("serving"):
        summary = httpx.get(f"{base}/api/runs/{run_id}/serving/summary", timeout=30).json()
        assert summary["has_serving"] and summary["counts"]["requests"] == 8, summary
    elif kind == "cluster":
        overview = httpx.get(f"{base}/api/runs/{run_id}/cluster/overview?source=cluster_analysis",
                             timeout=30).json()
        assert overview["cluster_analysis"]["found"] and overview["cluster_analysis"]["ranks"] > 0, overview
        assert overview["steps"] and overview["per_rank"]["rank"], overview
    else:
        assert run["rank_count"] == 1, run
        tracks = httpx.get(f"{base}/api/runs/{run_id}/timeline/tracks", timeout=30).json()
        assert tracks["tracks"], tracks


def test_serve_opens_serving_and_cluster_output_alone(tmp_path, sources):
    proc, base = start_serve(tmp_path / "data", *sources.values(), flags=ONE_PROCESS)
    try:
        wait_for(lambda: httpx.get(f"{base}/api/health", timeout=5).status_code == 200, proc=proc)
        runs = {r["source"]: r["id"] for r in httpx.get(f"{base}/api/runs", timeout=10).json()["runs"]}
        assert set(runs) == {str(p) for p in sources.values()}, runs
        for kind, path in sources.items():
            check_run(base, runs[str(path)], kind)
    finally:
        output = stop(proc)
    assert "error" not in output, output


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ingesting_server(tmp_path_factory.mktemp("run-sources-data")) as (base, _, _):
        yield base


def post(base: str, filename: str, data: bytes) -> httpx.Response:
    return httpx.post(f"{base}/api/runs", files={"file": (filename, data, "application/octet-stream")}, timeout=60)


@pytest.mark.parametrize("kind", ["serving_csv", "serving_db", "cluster"])
def test_a_zip_of_serving_or_cluster_output_alone_uploads(server, sources, kind):
    resp = post(server, f"{kind}.zip", zip_folder(sources[kind]))
    assert resp.status_code == 202, resp.text
    check_run(server, resp.json()["id"], kind)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_a_single_trace_file_uploads(server, suffix):
    data = KINETO_TRACE.read_bytes()
    resp = post(server, f"sampled_rank-0{suffix}", data if suffix == ".json.gz" else gzip.decompress(data))
    assert resp.status_code == 202, resp.text
    check_run(server, resp.json()["id"], "trace")
