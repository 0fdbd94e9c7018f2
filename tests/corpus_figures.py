"""The figures a real export states about itself, read straight from its files with the standard library
(csv, json, gzip, sqlite3), never through ascendscope's readers: what tests/test_corpus.py holds the API to."""

from __future__ import annotations

import csv
import functools
import gzip
import json
import re
import sqlite3
from decimal import Decimal
from pathlib import Path

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


def _us_to_ns(text: str) -> int:
    return int((Decimal(text.strip()) * 1000).to_integral_value())


def kernel_csv_figures(folder: Path) -> dict[int, tuple[int, int]]:
    """``{rank: (kernel count, total duration ns)}`` of every ``rank<N>…/ASCEND_PROFILER_OUTPUT/kernel_details.csv``."""
    out = {}
    for path in sorted(folder.glob("*/ASCEND_PROFILER_OUTPUT/kernel_details.csv")):
        rank = int(re.search(r"(\d+)", path.parent.parent.name).group(1))
        with path.open(newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
        out[rank] = (len(rows), sum(_us_to_ns(r["Duration(us)"]) for r in rows))
    return out


@functools.cache
def trace_events(folder: Path) -> list[dict]:
    """The events of the export's one trace file (a JSON array or ``{"traceEvents": …}``, gzipped or not); read
    once per process (the tests' parameters and several tests ask for it; none changes it)."""
    files = [p for p in folder.rglob("*") if p.name.endswith((".json", ".json.gz"))]
    assert len(files) == 1, files
    opener = gzip.open if files[0].name.endswith(".gz") else open
    with opener(files[0], "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    return data["traceEvents"] if isinstance(data, dict) else data


def complete_events(events: list[dict]) -> int:
    """Complete events (``ph`` X) the trace holds."""
    return sum(1 for e in events if e.get("ph") == "X")


def profiler_steps(events: list[dict]) -> dict[int, int]:
    """``{N: duration ns}`` of the ``ProfilerStep#N`` complete events."""
    out = {}
    for e in events:
        m = STEP_NAME.match(str(e.get("name", "")))
        if m and e.get("ph") == "X":
            out[int(m.group(1))] = _us_to_ns(str(e["dur"]))
    return out


def msprof_db_figures(path: Path) -> tuple[int, int]:
    """(compute task count, their total duration ns): TASK rows that COMPUTE_TASK_INFO describes."""
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        n, total = con.execute("SELECT count(*), sum(t.endNs - t.startNs) FROM TASK t "
                               "JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId").fetchone()
    finally:
        con.close()
    return n, int(total or 0)


def cluster_step_ranks(folder: Path) -> dict[int, int]:
    """``{rank: Computing ns}`` of ``cluster_step_trace_time.csv``'s rank rows."""
    path = next(folder.rglob("cluster_step_trace_time.csv"))
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return {int(r["Index"]): _us_to_ns(r["Computing"]) for r in csv.DictReader(fh) if r["Type"] == "rank"}


GPU_KERNEL_CATS = ("kernel", "Kernel")


def gpu_compute_union_ns(events: list[dict]) -> int:
    """Length of the union of a GPU trace's compute kernels (NCCL's kernels communicate, so they are left out)."""
    spans = sorted((_us_to_ns(str(e["ts"])), _us_to_ns(str(e["ts"])) + _us_to_ns(str(e["dur"])))
                   for e in events if e.get("ph") == "X" and e.get("cat") in GPU_KERNEL_CATS
                   and not str(e.get("name", "")).lower().startswith("nccl"))
    total, reach_start, reach_end = 0, None, None
    for s, e in spans:
        if reach_end is None or s > reach_end:
            total += (reach_end - reach_start) if reach_end is not None else 0
            reach_start, reach_end = s, e
        else:
            reach_end = max(reach_end, e)
    return total + ((reach_end - reach_start) if reach_end is not None else 0)


def snapshot_dict(folder: Path) -> dict:
    """The export's memory snapshot pickle as the dict it holds, read with the standard library's ``pickle`` only
    once ``pickletools`` has shown it asks for no global and builds no object (these are fixed, public files; the
    product never does this with a user's bytes)."""
    import pickle
    import pickletools

    files = sorted(folder.glob("*.pkl")) + sorted(folder.glob("*.pickle"))
    assert len(files) == 1, files
    data = files[0].read_bytes()
    building = {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "PERSID",
                "BINPERSID", "EXT1", "EXT2", "EXT4"}
    assert not {op.name for op, _, _ in pickletools.genops(data)} & building
    return pickle.loads(data)  # checked above: plain data only


def snapshot_totals(snap: dict) -> dict[int, tuple[int, int, int]]:
    """``{device: (reserved, allocated, active)}``: the segments' own totals at the dump."""
    out: dict[int, list[int]] = {}
    for s in snap["segments"]:
        t = out.setdefault(s.get("device", 0), [0, 0, 0])
        t[0] += s["total_size"]
        t[1] += s["allocated_size"]
        t[2] += s["active_size"]
    return {d: tuple(v) for d, v in out.items()}


def replay_backwards(snap: dict, device: int) -> dict:
    """The trace of ``device`` read from its last entry to its first, from the state at the dump: a block is live
    from its alloc to its free_completed, reserved bytes change at the segment entries. Returns the lowest
    reserved and active (requested) bytes met, and the entries that would make a block life negative (an alloc of
    a block not live after it, a free of one already live) or a segment's size negative."""
    active = {b["address"]: b["requested_size"] for s in snap["segments"] if s.get("device", 0) == device
              for b in s["blocks"] if b["state"] != "inactive"}
    reserved = sum(s["total_size"] for s in snap["segments"] if s.get("device", 0) == device)
    low_reserved, low_active = reserved, sum(active.values())
    bad = []
    for i, e in reversed(list(enumerate(snap["device_traces"][device]))):
        a = e["action"]
        if a == "alloc":
            if e["addr"] not in active:
                bad.append((i, "alloc of a block not live after it"))
            active.pop(e["addr"], None)
        elif a == "free_completed":
            if e["addr"] in active:
                bad.append((i, "free of a block live after it"))
            active[e["addr"]] = e["size"]
        elif a in ("segment_alloc", "segment_map"):
            reserved -= e["size"]
        elif a in ("segment_free", "segment_unmap"):
            reserved += e["size"]
        if reserved < 0:
            bad.append((i, "reserved below zero"))
        low_reserved = min(low_reserved, reserved)
        low_active = min(low_active, sum(active.values()))
    return {"low_reserved": low_reserved, "low_active": low_active, "bad": bad}


def expert_hotspot_figures(folder: Path) -> dict[str, dict[int, list[int]]]:
    """``{phase: {layer: [tokens per slot]}}`` of the ``{phase}_0.csv`` dumps: their last ``num_moe_layers`` rows
    (the latest collection), layer 0 first."""
    keep = json.loads((folder / "model_gen_config.json").read_text(encoding="utf-8"))["num_moe_layers"]
    out = {}
    for path in sorted(folder.glob("*_0.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            rows = [[int(v) for v in row] for row in csv.reader(fh) if row]
        out[path.name.split("_")[0]] = dict(enumerate(rows[-keep:]))
    return out


def expert_deployment_figures(path: Path) -> dict[int, dict[int, int]]:
    """``{layer: {expert: copies}}`` of a ``*_global_deployment.json``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out: dict[int, dict[int, int]] = {}
    for layer in data["layer_list"]:
        copies = out.setdefault(layer["layer_id"], {})
        for dev in layer["device_list"]:
            for e in dev["device_expert"]:
                copies[e] = copies.get(e, 0) + 1
    return out
