"""API values equal the source rows of the real samples, re-read here with the csv and json modules.

Kernel totals per type vs kernel_details.csv, torch ops vs operator_details.csv, comm ops, bandwidth and the matrix
vs communication(_matrix).json, memory points vs memory_record.csv, allocations vs operator_memory.csv, modules vs
npu_module_mem.csv, and the step breakdown vs step_trace_time.csv — including the breakdown *derived* from the
Overlap Analysis lane, which must agree with the profiler's own CSV within 0.1%.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import PYTORCH_TEXT, REAL_SAMPLES, needs_samples
from tests.ingest_helpers import us_text_to_ns

pytestmark = needs_samples

OUT = "ASCEND_PROFILER_OUTPUT"
FOLDERS = {
    ("level1", 0): PYTORCH_TEXT / "level1" / "rank0_ascend_pt" / OUT,
    ("level1", 1): PYTORCH_TEXT / "level1" / "rank1_ascend_pt" / OUT,
    ("level2", 0): PYTORCH_TEXT / "level2" / "rank0_ascend_pt" / OUT,
    ("level2", 1): PYTORCH_TEXT / "level2" / "rank1_ascend_pt" / OUT,
    **{("st4", r): REAL_SAMPLES / "msinsight_st_4rank_2025q4" / "level2" / f"rank_{r}_ascend_pt" / OUT
       for r in range(4)},
    ("fixtures", 0): REAL_SAMPLES / "msinsight_server_fixtures" / "test_rank_0" / OUT,
    ("fixtures", 1): REAL_SAMPLES / "msinsight_server_fixtures" / "test_rank_1" / OUT,
}
KERNEL_RANKS = [("level1", 0), ("level1", 1), ("st4", 0), ("st4", 2), ("fixtures", 0), ("fixtures", 1)]
COMM_RANKS = [("level1", 0), ("level1", 1), *[("st4", r) for r in range(4)], ("fixtures", 0), ("fixtures", 1)]
STEP_TRACE_COLUMNS = {
    "Computing": "computing_ns", "Communication(Not Overlapped)": "communication_not_overlapped_ns",
    "Overlapped": "overlapped_ns", "Communication": "communication_ns", "Free": "free_ns", "Stage": "stage_ns",
    "Bubble": "bubble_ns", "Communication(Not Overlapped and Exclude Receive)":
        "communication_not_overlapped_and_exclude_receive_ns", "Preparing": "preparing_ns",
}


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def ns(text: str | None) -> int | None:
    text = (text or "").strip()
    return None if text in ("", "N/A") else us_text_to_ns(text)


def ms_ns(value) -> int:
    return round(float(value) * 1e6)


def api(client, view_runs, run, path, **params):
    r = client.get(f"/api/runs/{view_runs[run]}/{path}", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def all_rows(client, view_runs, run, path, **params):
    """Every row of a paged endpoint, page by page (as the UI would)."""
    rows, offset = [], 0
    while True:
        page = api(client, view_runs, run, path, offset=offset, limit=500, **params)
        rows += page["rows"]
        offset += len(page["rows"])
        if not page["truncated"]:
            return rows


@pytest.mark.parametrize("run, rank", KERNEL_RANKS)
def test_kernel_totals_per_type_equal_kernel_details(client, view_runs, run, rank):
    expected = defaultdict(lambda: [0, 0])
    for row in read_csv(FOLDERS[run, rank] / "kernel_details.csv"):
        expected[row["Type"]][0] += 1
        expected[row["Type"]][1] += ns(row["Duration(us)"])
    got = defaultdict(lambda: [0, 0])
    for g in all_rows(client, view_runs, run, "operators/groups", rank=rank, group_by="type", kind="all"):
        got[g["type"]][0] += g["count"]
        got[g["type"]][1] += g["total_ns"]
    assert set(got) == set(expected)
    for t, (count, total) in expected.items():
        assert got[t][0] == count, t
        assert abs(got[t][1] - total) <= count, t  # each µs value is rounded to the ns once
    ov = api(client, view_runs, run, "operators", rank=rank, kind="all")
    assert ov["kernel_count"] == sum(c for c, _ in expected.values())


@pytest.mark.parametrize("run, rank", [("level1", 0), ("st4", 2)])
def test_kernel_groups_by_name_equal_kernel_details(client, view_runs, run, rank):
    durations = defaultdict(list)
    for row in read_csv(FOLDERS[run, rank] / "kernel_details.csv"):
        durations[row["Name"], row["Type"], row["Accelerator Core"]].append(ns(row["Duration(us)"]))
    groups = {(g["name"], g["type"], g["accelerator_core"]): g
              for g in all_rows(client, view_runs, run, "operators/groups", rank=rank, group_by="name", kind="all")}
    assert set(groups) == set(durations)
    for key, ds in durations.items():
        g = groups[key]
        assert g["count"] == len(ds), key
        assert (g["max_ns"], g["min_ns"]) == (max(ds), min(ds))
        assert g["avg_ns"] == pytest.approx(sum(ds) / len(ds))


def test_kernel_instances_equal_kernel_details_rows(client, view_runs):
    rows = read_csv(FOLDERS["level1", 0] / "kernel_details.csv")
    conv = [r for r in rows if r["Type"] == "Conv2D"]
    group = next(g for g in all_rows(client, view_runs, "level1", "operators/groups", rank=0, group_by="type",
                                     kind="all") if g["type"] == "Conv2D")
    inst = all_rows(client, view_runs, "level1", "operators/instances", rank=0, group_by="type", kind="all",
                    group_key=group["group_key"], sort="start", order="asc")
    assert [int(i["start_ns"]) for i in inst] == sorted(ns(r["Start Time(us)"]) for r in conv)
    by_start = {ns(r["Start Time(us)"]): r for r in conv}
    for i in inst:
        src = by_start[int(i["start_ns"])]
        assert i["duration_ns"] == ns(src["Duration(us)"]) and i["name"] == src["Name"]
        assert i["input_shapes"] == src["Input Shapes"] and i["block_dim"] == int(src["Block Dim"])


@pytest.mark.parametrize("run, rank", [("level1", 0), ("level1", 1), ("fixtures", 1)])
def test_torch_ops_equal_operator_details(client, view_runs, run, rank):
    expected = defaultdict(lambda: [0, 0, 0])
    for row in read_csv(FOLDERS[run, rank] / "operator_details.csv"):
        e = expected[row["Name"]]
        e[0] += 1
        e[1] += ns(row["Host Self Duration(us)"]) or 0
        e[2] += ns(row["Device Total Duration(us)"]) or 0
    got = {r["name"]: r for r in all_rows(client, view_runs, run, "operators/torch", rank=rank, group_by="name")}
    assert set(got) == set(expected)
    for name, (count, host_self, dev_total) in expected.items():
        assert got[name]["count"] == count
        assert abs(got[name]["host_self_duration_ns"] - host_self) <= count
        assert abs(got[name]["device_total_duration_ns"] - dev_total) <= count


def comm_json(run, rank) -> dict:
    return json.loads((FOLDERS[run, rank] / "communication.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("run, rank", COMM_RANKS)
def test_comm_ops_equal_communication_json(client, view_runs, run, rank):
    expected = {}
    totals = {}
    for step, kinds in comm_json(run, rank).items():
        for comm_type, ops in kinds.items():
            for key, info in (ops or {}).items():
                t = info["Communication Time Info"]
                if key == "Total Op Info":
                    totals[step, comm_type] = t
                else:
                    expected[step, key.split("@")[0]] = t
    rows = all_rows(client, view_runs, run, "communication/ops", rank=rank)
    assert len(rows) == len(expected)
    for r in rows:
        t = expected[r["step"], r["op_name"]]
        assert abs(r["elapse_time_ns"] - ms_ns(t["Elapse Time(ms)"])) <= 1
        assert abs(r["wait_time_ns"] - ms_ns(t["Wait Time(ms)"])) <= 1
        assert abs(r["transit_time_ns"] - ms_ns(t["Transit Time(ms)"])) <= 1
        assert abs(r["synchronization_time_ns"] - ms_ns(t["Synchronization Time(ms)"])) <= 1
        assert abs(r["idle_time_ns"] - ms_ns(t["Idle Time(ms)"])) <= 1
        assert r["wait_time_ratio"] == pytest.approx(t["Wait Time Ratio"])
        assert r["synchronization_time_ratio"] == pytest.approx(t["Synchronization Time Ratio"])
        assert abs(int(r["start_ns"]) - round(t["Start Timestamp(us)"] * 1000)) <= 1_000  # a float µs in the source
    # the per-rank totals (summed from the ops) equal the source's "Total Op Info" rows summed
    steps = {s for s, _ in totals}
    for step in steps:
        rows = api(client, view_runs, run, "communication/ranks", step=step)["rows"]
        got = next(x for x in rows if x["rank"] == rank)
        src = [t for (s, _), t in totals.items() if s == step]
        n = sum(1 for (s, _) in expected if s == step)
        assert abs(got["elapse_time_ns"] - sum(ms_ns(t["Elapse Time(ms)"]) for t in src)) <= n + 1
        assert abs(got["wait_time_ns"] - sum(ms_ns(t["Wait Time(ms)"]) for t in src)) <= n + 1
        if len(src) == 1:
            assert got["wait_time_ratio"] == pytest.approx(src[0]["Wait Time Ratio"], abs=1e-4)
            assert got["synchronization_time_ratio"] == pytest.approx(src[0]["Synchronization Time Ratio"], abs=1e-4)


@pytest.mark.parametrize("run, rank", [("level1", 0), ("st4", 1), ("fixtures", 0)])
def test_op_bandwidth_equals_communication_json(client, view_runs, run, rank):
    for step, kinds in comm_json(run, rank).items():
        for ops in kinds.values():
            for key, info in list((ops or {}).items())[:6]:
                if key == "Total Op Info":
                    continue
                op, _, group = key.partition("@")
                got = {t["transport"]: t for t in api(client, view_runs, run, "communication/bandwidth", rank=rank,
                                                       step=step, group=group, op=op)["transports"]}
                for transport, b in info["Communication Bandwidth Info"].items():
                    g = got[transport]
                    assert g["transit_size_mb"] == pytest.approx(b["Transit Size(MB)"])
                    assert abs(g["transit_time_ns"] - ms_ns(b["Transit Time(ms)"])) <= 1
                    assert (g["bandwidth_gbps"] or 0) == pytest.approx(b["Bandwidth(GB/s)"])
                    assert (g["large_packet_ratio"] or 0) == pytest.approx(b["Large Packet Ratio"])


@pytest.mark.parametrize("run, rank", [("level1", 0), ("st4", 0)])
def test_matrix_cells_equal_communication_matrix_json(client, view_runs, run, rank):
    data = json.loads((FOLDERS[run, rank] / "communication_matrix.json").read_text(encoding="utf-8"))
    checked = 0
    for step, kinds in data.items():
        for comm_type, keys in kinds.items():
            for key, links in list((keys or {}).items())[:4]:
                head, _, group = key.partition("@")
                op_type, _, slot = head.rpartition("-")
                cells = api(client, view_runs, run, "communication/matrix", step=step, group=group, op_type=op_type,
                            slot=slot, comm_type=comm_type)["cells"]
                by = {(c["src_rank"], c["dst_rank"]): c for c in cells}
                for link, v in links.items():
                    src, dst = (int(x) for x in link.split("-"))
                    if src != rank:  # a link another rank's file also carries: that file wins
                        continue
                    c = by[src, dst]
                    assert c["transport_type"] == v["Transport Type"]
                    assert c["transit_size_mb"] == pytest.approx(v["Transit Size(MB)"])
                    assert c["bandwidth_gbps"] == pytest.approx(v["Bandwidth(GB/s)"])
                    assert abs(c["transit_time_ns"] - ms_ns(v["Transit Time(ms)"])) <= 1
                    checked += 1
    assert checked > 0


@pytest.mark.parametrize("run, rank", [("level1", 0), ("level1", 1), ("st4", 0)])
def test_memory_points_equal_memory_record(client, view_runs, run, rank):
    expected = defaultdict(list)
    for row in read_csv(FOLDERS[run, rank] / "memory_record.csv"):
        def f(k, row=row):
            return float(row[k]) if row.get(k, "").strip() else None
        expected[row["Component"]].append((ns(row["Timestamp(us)"]), f("Total Allocated(MB)"),
                                           f("Total Reserved(MB)"), f("Total Active(MB)")))
    curves = api(client, view_runs, run, "memory/curves", rank=rank, max_points=50_000)
    assert not curves["downsampled"] and curves["source_points"] == sum(len(v) for v in expected.values())
    origin = int(curves["origin_ns"])
    got = defaultdict(dict)
    for s in curves["series"]:
        got[s["component"]][s["measure"]] = list(zip((origin + t for t in s["t_ns"]), s["mb"]))
    assert set(got) == set(expected)
    for comp, pts in expected.items():
        pts.sort(key=lambda p: p[0])  # stable: rows of one timestamp keep their file order, as the API does
        for i, measure in enumerate(("allocated", "reserved", "active"), start=1):
            values = [(p[0], p[i]) for p in pts]
            if all(v is None for _, v in values):
                assert measure not in got[comp]
                continue
            assert [t for t, _ in got[comp][measure]] == [t for t, _ in values]
            assert [v for _, v in got[comp][measure]] == pytest.approx([v for _, v in values])


@pytest.mark.parametrize("run, rank", [("level1", 0), ("st4", 2)])
def test_allocations_equal_operator_memory(client, view_runs, run, rank):
    src = read_csv(FOLDERS[run, rank] / "operator_memory.csv")
    rows = all_rows(client, view_runs, run, "memory/allocations", rank=rank, sort="src_row", order="asc")
    assert len(rows) == len(src)
    for r, s in zip(rows, src):
        assert r["name"] == s["Name"] and r["size_kb"] == pytest.approx(float(s["Size(KB)"]))
        assert int(r["allocation_time_ns"]) == ns(s["Allocation Time(us)"])
        assert (r["release_time_ns"] and int(r["release_time_ns"])) == (ns(s["Release Time(us)"]) or None)
        assert r["duration_ns"] == ns(s["Duration(us)"])
    peak = max(range(len(src)), key=lambda i: float(src[i]["Allocation Total Allocated(MB)"] or 0))
    assert [r["src_row"] for r in rows if r["is_peak"]] == [peak + 1]


@pytest.mark.parametrize("run, rank", [("level1", 0), ("st4", 0)])
def test_module_memory_equals_npu_module_mem(client, view_runs, run, rank):
    peaks = defaultdict(float)
    for row in read_csv(FOLDERS[run, rank] / "npu_module_mem.csv"):
        peaks[row["Component"]] = max(peaks[row["Component"]], float(row["Total Reserved(MB)"]))
    mods = api(client, view_runs, run, "memory/modules", rank=rank)
    assert {s["component"]: s["peak_mb"] for s in mods["series"]} == \
        pytest.approx({k: v for k, v in peaks.items() if v > 0})
    for s in mods["series"]:
        assert max(s["mb"]) == pytest.approx(s["peak_mb"])


def step_trace_csv(run, rank) -> dict:
    rows = read_csv(FOLDERS[run, rank] / "step_trace_time.csv")
    return {int(r["Step"]): {STEP_TRACE_COLUMNS[k]: ns(v) for k, v in r.items() if k in STEP_TRACE_COLUMNS}
            for r in rows}


@pytest.mark.parametrize("run, ranks", [("level1", [0, 1]), ("st4", [0, 1, 2, 3]), ("fixtures", [0, 1])])
def test_step_trace_rows_equal_step_trace_time(client, view_runs, run, ranks):
    got = api(client, view_runs, run, "summary", source="step_trace")["breakdown"]
    assert sorted(r["rank"] for r in got) == ranks
    for r in got:
        expected = step_trace_csv(run, r["rank"])[r["step"]]
        for k, v in expected.items():
            assert abs(r[k] - v) <= 1, k


@pytest.mark.parametrize("run", ["level1", "level2"])
def test_overlap_derived_breakdown_equals_step_trace_time(client, view_runs, run):
    """FORMATS.md §6.1 applied to the Overlap Analysis slices gives the profiler's step_trace_time.csv (±0.1%)."""
    derived = api(client, view_runs, run, "summary", source="overlap")["breakdown"]
    assert sorted(r["rank"] for r in derived) == [0, 1]
    for r in derived:
        assert r["source"] == "overlap"
        expected = step_trace_csv(run, r["rank"])[r["step"]]
        for k, v in expected.items():
            assert r[k] == pytest.approx(v, rel=1e-3, abs=1_000), (r["rank"], k)


def test_summary_top_operators_equal_kernel_details(client, view_runs):
    totals = defaultdict(int)
    for row in read_csv(FOLDERS["st4", 2] / "kernel_details.csv"):
        totals[row["Type"], row["Accelerator Core"]] += ns(row["Duration(us)"])
    top = api(client, view_runs, "st4", "summary", rank=2)["top_operators"]
    assert top["rank"] == 2
    best = sorted(totals.items(), key=lambda kv: -kv[1])[:len(top["rows"])]
    assert [(r["type"], r["accelerator_core"]) for r in top["rows"]] == [k for k, _ in best]
    for r, (_, v) in zip(top["rows"], best):
        assert abs(r["total_ns"] - v) <= 3000
