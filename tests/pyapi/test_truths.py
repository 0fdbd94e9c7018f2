"""The Python API's DataFrames and the ``compare --fail-if`` metrics against the profiler's own files, read here with
the csv module (not through any ascendscope query): the real Level1 sample (or its twin) and a generated run, both
opened by ``ascendscope.open`` as a user does (the sharded ingest)."""

from __future__ import annotations

import csv
import re
import statistics
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

import ascendscope
from ascendscope.metrics import compute
from tests.samples import PYTORCH_TEXT

COMM_CORES = {"HCCL"}


def _ns(text: str) -> int:
    """A µs cell (with the CSVs' trailing TAB) as integer ns, exactly."""
    return int((Decimal(text.strip()) * 1000).to_integral_value())


def _rows(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return list(csv.DictReader(fh))


def _ranks(src: Path) -> dict[int, Path]:
    """``{rank: ASCEND_PROFILER_OUTPUT}`` by the ``profiler_info_{rank}.json`` beside each output folder."""
    out = {}
    for info in src.rglob("profiler_info_*.json"):
        out[int(re.search(r"profiler_info_(\d+)\.json", info.name).group(1))] = info.parent / "ASCEND_PROFILER_OUTPUT"
    return dict(sorted(out.items()))


def truth(src: Path) -> dict:
    """What the files say: computing kernels per rank and name, step rows, the highest reserved memory."""
    kernels: dict[int, dict[str, list[int]]] = {}
    steps: dict[tuple[int, int], dict[str, int]] = {}
    peak = None
    for rank, out in _ranks(src).items():
        per_name: dict[str, list[int]] = defaultdict(list)
        for row in _rows(out / "kernel_details.csv"):
            if row["Accelerator Core"] not in COMM_CORES:
                per_name[row["Name"]].append(_ns(row["Duration(us)"]))
        kernels[rank] = dict(per_name)
        for row in _rows(out / "step_trace_time.csv"):
            steps[rank, int(row["Step"])] = {
                "computing_ns": _ns(row["Computing"]), "free_ns": _ns(row["Free"]),
                "communication_not_overlapped_ns": _ns(row["Communication(Not Overlapped)"])}
        for row in _rows(out / "memory_record.csv"):
            if row["Total Reserved(MB)"].strip():
                value = float(row["Total Reserved(MB)"])
                peak = value if peak is None else max(peak, value)
    return {"kernels": kernels, "steps": steps, "peak_reserved_mb": peak}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    from ascendscope.sample_data.generate import generate_run

    generated = tmp_path_factory.mktemp("truth-src") / "run"
    generate_run(generated, ranks=2, steps=3, ops_per_step=60, seed=5)
    out = {"generated": generated}
    if (PYTORCH_TEXT / "level1").is_dir():
        out["level1"] = PYTORCH_TEXT / "level1"
    return out


@pytest.fixture(scope="module")
def opened(sources, tmp_path_factory):
    data = tmp_path_factory.mktemp("truth-data")
    runs = {name: ascendscope.open(src, data_dir=data, quiet=True) for name, src in sources.items()}
    yield runs
    for run in runs.values():
        run.close()


NAMES = ["generated", "level1"]


def _case(sources, opened, name):
    if name not in sources:
        pytest.skip(f"no {name} sample")
    return opened[name], truth(sources[name])


@pytest.mark.parametrize("name", NAMES)
def test_kernels_frame_equals_kernel_details(sources, opened, name):
    run, want = _case(sources, opened, name)
    assert run.ranks == sorted(want["kernels"])
    for rank, per_name in want["kernels"].items():
        frame = run.kernels(rank=rank, group_by="name", kind="computing")
        got = {r["name"]: (int(r["count"]), int(r["total_ns"]), int(r["max_ns"])) for r in frame.to_dict("records")}
        assert got == {n: (len(d), sum(d), max(d)) for n, d in per_name.items()}, rank


@pytest.mark.parametrize("name", NAMES)
def test_steps_frame_equals_step_trace_time(sources, opened, name):
    run, want = _case(sources, opened, name)
    frame = run.steps(source="step_trace")
    got = {(int(r["rank"]), int(r["step"])): r for r in frame.to_dict("records")}
    assert set(got) == set(want["steps"])
    for key, cells in want["steps"].items():
        assert {c: int(got[key][c]) for c in cells} == cells, key
        assert int(got[key]["e2e_ns"]) == sum(cells.values()), key


@pytest.mark.parametrize("name", NAMES)
def test_compare_metrics_equal_the_files(sources, opened, name):
    run, want = _case(sources, opened, name)
    got = compute(run)
    steps = want["steps"]
    by_step = defaultdict(list)
    for (_, step), cells in steps.items():
        by_step[step].append(sum(cells.values()))
    assert got["steps"] == len(by_step)
    assert got["step_time"] == pytest.approx(statistics.mean(max(v) for v in by_step.values()))
    assert got["computing"] == pytest.approx(statistics.mean(c["computing_ns"] for c in steps.values()))
    assert got["free"] == pytest.approx(statistics.mean(c["free_ns"] for c in steps.values()))
    assert got["exposed_comm"] == pytest.approx(
        statistics.mean(c["communication_not_overlapped_ns"] for c in steps.values()))
    kernels = want["kernels"]
    ranks = len([r for r, per in kernels.items() if per])
    totals: dict[str, int] = defaultdict(int)
    for per in kernels.values():
        for n, durs in per.items():
            totals[n] += sum(durs)
    assert got["kernel_time"] == pytest.approx(sum(totals.values()) / ranks)
    top = max(totals, key=totals.get)
    assert got["top_kernel_name"] == top and got["top_kernel"] == pytest.approx(totals[top] / ranks)
    assert got["peak_reserved_mb"] == pytest.approx(want["peak_reserved_mb"])
