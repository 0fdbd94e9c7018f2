"""A generated 2-rank run crafted so that every advice check has something to find.

``sample_data.generate`` with seed 2 already gives host-bound steps, exposed communication, AI_CPU kernels
(NonZero), repeated runs of small kernels and dispatch gaps of every kind. On top of it this module writes:

* affinity-API sequences: a Python thread of rank 0 (``tid`` :data:`AFFINITY_TID`) running each rule of
  ``server.queries.advice.AFFINITY_RULES`` :data:`AFFINITY_REPEATS` times as top-level torch ops (one nested child
  per op, which must not count) plus a decoy that starts like RMSNorm and breaks off;
* a slow rank: rank 0's collectives wait half their elapse time (communication.json), so rank 1 is the one the
  others wait for;
* a slow link: rank 1's HCCS link to rank 0 takes :data:`SLOW_LINK_FACTOR` times longer in every per-op-type total
  of communication_matrix.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from ascendscope.sample_data.generate import generate_run

SEED, RANKS, STEPS, OPS_PER_STEP = 2, 2, 3, 200
AFFINITY_TID = 4242
AFFINITY_REPEATS = 2
SLOW_LINK_FACTOR = 4.0
OP_NS, GAP_NS = 3_000, 1_000


def _ts(ns: int) -> str:
    """torch_npu's trace time: epoch µs as a string with exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _op(pid: int, name: str, ts_ns: int, dur_ns: int) -> dict:
    return {"ph": "X", "name": name, "pid": pid, "tid": AFFINITY_TID, "ts": _ts(ts_ns), "dur": dur_ns / 1000,
            "cat": "cpu_op", "args": {"Sequence number": -1, "Fwd thread id": 0}}


def _affinity_events(pid: int, start_ns: int) -> list[dict]:
    from ascendscope.server.queries.advice import AFFINITY_RULES

    events = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": AFFINITY_TID,
               "args": {"name": f"Thread {AFFINITY_TID}"}}]
    t = start_ns
    sequences = [[p if isinstance(p, str) else p[-1] for p in seq] for _, seq, _, _ in AFFINITY_RULES]
    sequences = [s for s in sequences for _ in range(AFFINITY_REPEATS)]
    sequences.append(["aten::pow", "aten::mean", "aten::detach"])  # a decoy: RMSNorm's start, then something else
    for seq in sequences:
        for name in seq + ["aten::to"]:  # aten::to separates one sequence from the next
            events.append(_op(pid, name, t, OP_NS))
            events.append(_op(pid, "aten::empty", t + 100, OP_NS // 3))  # nested: not a top-level op
            t += OP_NS + GAP_NS
    return events


def craft_run(out_dir: Path) -> dict:
    """Write the run under ``out_dir``; returns the generator's ground truth."""
    truth = generate_run(out_dir, ranks=RANKS, steps=STEPS, ops_per_step=OPS_PER_STEP, seed=SEED)
    out = Path(out_dir)
    trace_path = out / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(trace_path.read_text())
    pid = next(e["pid"] for e in events if e.get("cat") == "cpu_op")
    events += _affinity_events(pid, truth["ranks"][0]["steps"][0]["host_start_ns"] + 50_000)
    trace_path.write_text(json.dumps(events))

    comm_path = out / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    comm = json.loads(comm_path.read_text())
    for step in comm.values():
        for kind in ("collective", "p2p"):
            for op in (step.get(kind) or {}).values():
                info = op["Communication Time Info"]
                info["Wait Time(ms)"] = round(info["Elapse Time(ms)"] / 2, 6)
    comm_path.write_text(json.dumps(comm))

    matrix_path = out / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    matrix = json.loads(matrix_path.read_text())
    for step in matrix.values():
        for key, links in (step.get("collective") or {}).items():
            link = links.get("1-0") if "-total@" in key else None
            if link:
                link["Transit Time(ms)"] = round(link["Transit Time(ms)"] * SLOW_LINK_FACTOR, 6)
                link["Bandwidth(GB/s)"] = round(link["Transit Size(MB)"] / link["Transit Time(ms)"], 4)
    matrix_path.write_text(json.dumps(matrix))
    return truth


def add_crafted_run(data_dir: Path, work_dir: Path) -> tuple[str, Path, Path]:
    """Craft the run in ``work_dir``, ingest it into the run store at ``data_dir`` as a ready run; returns
    ``(run_id, database, source folder)``."""
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.server.runs import RunStore

    src = Path(work_dir) / "crafted"
    craft_run(src)
    store = RunStore(data_dir)
    run = store.create_run("crafted", "crafted")
    ingest_path(src, store.db_path(run.id))
    store.set_status(run.id, "ready")
    return run.id, store.db_path(run.id), src
