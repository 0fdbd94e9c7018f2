"""Memory Group By (issue #13 item 5): the Overall / Stream / Component curves equal a plain pandas computation over
the source CSV rows of the real samples (level1 and the 4-rank st4), keep their exact peaks when down-sampled, and
the overview says which choice a rank has data for and, when it has none, which file would have fed it."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import PYTORCH_TEXT, VIEW_SAMPLES, needs_samples

pytestmark = needs_samples

OUTPUT = {
    "level1": PYTORCH_TEXT / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT",
    "st4": VIEW_SAMPLES["st4"] / "level2" / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT",
}
FULL = 50_000  # enough points for either sample: nothing is down-sampled


def get(client, view_runs, run, path, **params):
    r = client.get(f"/api/runs/{view_runs[run]}/{path}", params=params)
    assert r.status_code == 200, (path, r.text)
    return r.json()


def read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def ns(cell: str) -> int | None:
    """A torch_npu µs cell ("1736408883694624.810\\t") as integer ns, exactly."""
    cell = cell.strip()
    return None if not cell else int(Decimal(cell) * 1000)


def mb(cell: str) -> float | None:
    cell = cell.strip()
    return None if not cell else float(cell)


def stream_curves(path: Path) -> dict[str, list[tuple[int, float]]]:
    """Per stream (and "No stream" for GE's rows), the size of the blocks allocated and not yet released, and of
    those not yet returned to the allocator (active; streams only), stepping once per distinct time."""
    events: dict[tuple[str, str], dict[int, float]] = {}
    for _, row in read_csv(path).iterrows():
        stream, size = row["Stream Ptr"].strip() or None, float(row["Size(KB)"])
        name = f"Stream {stream}" if stream else "No stream"
        alloc, release, active_release = (ns(row["Allocation Time(us)"]), ns(row["Release Time(us)"]),
                                          ns(row["Active Release Time(us)"]))
        steps = [("Allocated", alloc, size), ("Allocated", release, -size)]
        if stream:
            steps += [("Active", alloc, size), ("Active", active_release, -size)]
        for measure, t, delta in steps:
            if t is not None:
                per = events.setdefault((name, measure), {})
                per[t] = per.get(t, 0.0) + delta
    out = {}
    for (name, measure), per in events.items():
        total, points = 0.0, []
        for t in sorted(per):
            total += per[t]
            points.append((t, total / 1024))
        out[f"{name} {measure}"] = points
    return out


@pytest.mark.parametrize("run", ["level1", "st4"])
def test_stream_curves_equal_the_operator_memory_rows(client, view_runs, run):
    want = stream_curves(OUTPUT[run] / "operator_memory.csv")
    got = get(client, view_runs, run, "memory/curves", rank=0, group="stream", max_points=FULL)
    assert got["group"] == "stream" and not got["downsampled"]
    origin = int(got["origin_ns"])
    series = {s["name"]: s for s in got["series"]}
    assert set(series) == set(want)
    for name, points in want.items():
        s = series[name]
        assert s["source"] == "operator_memory"
        # a stream's allocated and active share their times: each measure is drawn at every event of its stream,
        # holding its value where it did not change (the same step line)
        times = [origin + t for t in s["t_ns"]]
        assert times == sorted(set(times)) and {t for t, _ in points} <= set(times), name
        step = dict(points)
        held, expected = 0.0, []
        for t in times:
            held = step.get(t, held)
            expected.append(held)
        assert s["mb"] == pytest.approx(expected, abs=1e-9), name
        top = max(v for _, v in points)
        first = next(t for t, v in points if v == pytest.approx(top, abs=1e-9))
        assert s["peak"]["mb"] == pytest.approx(top, abs=1e-9) and origin + s["peak"]["t_ns"] == first


@pytest.mark.parametrize("run", ["level1", "st4"])
def test_component_curves_equal_the_csv_rows(client, view_runs, run):
    """Reserved per memory_record component (PTA+GE, their sum, is Overall's) and per CANN module that reserves
    anything, row for row."""
    records = read_csv(OUTPUT[run] / "memory_record.csv")
    modules = read_csv(OUTPUT[run] / "npu_module_mem.csv")
    want: dict[str, list] = {}
    for _, row in records.iterrows():
        if row["Component"] != "PTA+GE":
            want.setdefault(f"{row['Component']} Reserved", []).append(
                (ns(row["Timestamp(us)"]), mb(row["Total Reserved(MB)"])))
    reserving = {c for c, g in modules.groupby("Component") if g["Total Reserved(MB)"].astype(float).max() > 0}
    for _, row in modules.iterrows():
        if row["Component"] in reserving:
            want.setdefault(f"{row['Component']} (module) Reserved", []).append(
                (ns(row["Timestamp(us)"]), mb(row["Total Reserved(MB)"])))
    got = get(client, view_runs, run, "memory/curves", rank=0, group="component", max_points=FULL)
    assert not got["downsampled"] and got["source_points"] == sum(len(v) for v in want.values())
    origin = int(got["origin_ns"])
    series = {s["name"]: s for s in got["series"]}
    assert set(series) == set(want)
    for name, rows in want.items():
        s = series[name]
        source = "npu_module_mem" if "(module)" in name else "memory_record"
        assert s["measure"] == "reserved" and s["source"] == source
        assert sorted(zip((origin + t for t in s["t_ns"]), s["mb"])) == sorted(rows), name


def test_overall_is_the_allocator_totals(client, view_runs):
    got = get(client, view_runs, "level1", "memory/curves", rank=0, max_points=FULL)
    assert got["group"] == "overall"
    names = [s["name"] for s in got["series"]]
    assert names[:3] == ["PTA+GE Allocated", "PTA+GE Reserved", "PTA+GE Active"] and "APP Reserved" in names
    assert {s["source"] for s in got["series"]} == {"memory_record"}
    records = read_csv(OUTPUT["level1"] / "memory_record.csv")
    pta_ge = records[records["Component"] == "PTA+GE"]["Total Allocated(MB)"].astype(float)
    assert got["series"][0]["peak"]["mb"] == pta_ge.max()


@pytest.mark.parametrize("group", ["stream", "component"])
def test_group_peaks_survive_downsampling(client, view_runs, group):
    whole = get(client, view_runs, "st4", "memory/curves", rank=0, group=group, max_points=FULL)
    full = {s["name"]: s for s in whole["series"]}
    budget = max(16, min(200, whole["source_points"] // 3))  # the real sample has thousands, a twin hundreds
    small = get(client, view_runs, "st4", "memory/curves", rank=0, group=group, max_points=budget)
    assert small["downsampled"] and small["points"] < small["source_points"]
    for s in small["series"]:
        assert s["peak"] == full[s["name"]]["peak"], s["name"]
        assert (s["peak"]["t_ns"], s["peak"]["mb"]) in set(zip(s["t_ns"], s["mb"]))
        assert s["t_ns"][0] == full[s["name"]]["t_ns"][0] and s["t_ns"][-1] == full[s["name"]]["t_ns"][-1]


def test_group_window(client, view_runs):
    whole = get(client, view_runs, "level1", "memory/curves", rank=0, group="stream", max_points=FULL)
    origin = int(whole["origin_ns"])
    lo, hi = int(whole["start_ns"]), int(whole["end_ns"])
    mid = (lo + hi) // 2
    half = get(client, view_runs, "level1", "memory/curves", rank=0, group="stream", start_ns=lo, end_ns=mid,
               max_points=FULL)
    assert 0 < half["source_points"] < whole["source_points"]
    by_name = {s["name"]: dict(zip(s["t_ns"], s["mb"])) for s in whole["series"]}
    for s in half["series"]:
        assert all(lo <= origin + t <= mid for t in s["t_ns"])
        assert all(by_name[s["name"]][t] == v for t, v in zip(s["t_ns"], s["mb"]))  # the same running totals


def test_overview_says_which_groups_have_data(client, view_runs):
    level1 = get(client, view_runs, "level1", "memory", rank=0)["groups"]
    assert all(level1[g]["available"] and level1[g]["reason"] is None for g in ("overall", "stream", "component"))
    want: dict[str | None, int] = {}
    for cell in read_csv(OUTPUT["level1"] / "operator_memory.csv")["Stream Ptr"]:
        want[cell.strip() or None] = want.get(cell.strip() or None, 0) + 1
    assert {s["stream_ptr"]: s["allocations"] for s in level1["stream"]["streams"]} == want
    # the fixtures' rank 0 allocations carry no stream: the option says so
    fixtures = get(client, view_runs, "fixtures", "memory", rank=0)["groups"]
    assert fixtures["overall"]["available"] and not fixtures["stream"]["available"]
    assert fixtures["stream"]["reason"] == "rank 0's operator allocations have no Stream Ptr values"
    # st4's rank 1 kept no memory files: every choice names the file it lacks
    st4 = get(client, view_runs, "st4", "memory", rank=1)
    assert not any(st4["groups"][g]["available"] for g in ("overall", "stream", "component"))
    assert st4["groups"]["stream"]["reason"] == "operator_memory.csv was not in rank 1's output"
    assert "memory_record.csv was not in rank 1's output" in st4["groups"]["component"]["reason"]
    assert "npu_module_mem.csv was not in rank 1's output" in st4["groups"]["component"]["reason"]
    curves = get(client, view_runs, "st4", "memory/curves", rank=1, group="stream")
    assert curves["series"] == [] and curves["source_points"] == 0


def test_bad_group_is_refused(client, view_runs):
    r = client.get(f"/api/runs/{view_runs['level1']}/memory/curves", params={"group": "stream; DROP TABLE x"})
    assert r.status_code == 422
