"""Constructed runs whose phases (mstx ranges) are known by construction: a pipeline-parallel run and an RL job.

``write_pp_run(out, stages=4, microbatches=8, ..., form="text"|"db") -> dict`` writes one rank folder per pipeline
stage, running one step of the 1F1B schedule: every stage's forward takes ``fwd_us`` (``slow_extra_us`` more on
``slow_stage``), every backward ``bwd_us``; a forward of microbatch i on stage s starts once stage s-1 finished it,
a backward once stage s+1 finished it, and each stage runs warm-up forwards, then one forward one backward, then
the cool-down backwards. Each microbatch is an mstx range whose message is what msprof-analyze's ``pp_chart``
documents (a Python ``str()`` of a dict: ``{'name': 'forward_step', 'current_microbatch': 3}``). The text form
writes the host range (on the ``MsprofTx`` process, 3 µs before) and the device range (on ``Ascend Hardware``,
linked by an ``MsTx`` flow) as a range started with a stream does; the db form writes ``MSTX_EVENTS`` rows at the
schedule's times (host ranges only). Either way ``ProfilerStep#1`` spans the step and the truth holds every
stage's busy and bubble time; the uniform schedule's bubble ratio is (p−1)/(m+p−1).

``write_rl_job(out, workers=4, iterations=2, form=...) -> dict`` writes an RL job as verl/MindSpeed-RL lay it
out: ``actor_rollout/`` holds ``workers`` colocated workers (ranks 0..W−1, roles from the range names) and
``ref/`` the reference workers (ranks W..2W−1, role from the folder). In each iteration k, every phase starts when
the previous one ended on every worker, plus ``GAP_US``: ``generate_sequences`` (rollout), then
``compute_log_prob`` (actor) and ``compute_ref_log_prob`` (ref) side by side, then ``update_actor`` (actor), then
``sync_weights`` (rollout). Worker durations are base + 3 µs × worker, except one straggler per phase and
iteration, ``STRAGGLER_US`` longer; so the chain that decides each iteration is the straggler of each phase.
Messages are verl's plain strings (host ranges only, as verl starts them without a stream).

``write_rl_discrete(out, workers=4, iterations=2, form="db"|"text") -> dict`` writes the same job (without the
weight sync) as verl's discrete mode does: every call of a worker method is a profiler session of its own, saved
under ``<save_path>/<folder>/{host}_{pid}_{ms}_ascend_pt`` (``DISCRETE_FOLDERS``: ``rollout_generate/``,
``actor_compute_log_prob/``, ``ref_compute_log_prob/``, ``actor_update/``), each holding the one range and
``profiler_info_{w}.json`` of worker w = 0..W−1 (the db export, as verl sets it, or the text one): every folder
numbers its workers from 0, and each holds one folder per worker and iteration. The truth names workers
``<folder>·<w>``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

T0_US = 1_736_408_883_000_000
PY_TID = 4242
HOST_LEAD_US = 3  # a host range opens this long before its device range (text form)
GAP_US = 20
STRAGGLER_US = 400
RL_PHASES = (  # name, role, base µs, runs after (the phases it waits for)
    ("generate_sequences", "rollout", 1000, ()),
    ("compute_log_prob", "actor", 300, ("generate_sequences",)),
    ("compute_ref_log_prob", "ref", 350, ("generate_sequences",)),
    ("update_actor", "actor", 800, ("compute_log_prob", "compute_ref_log_prob")),
    ("sync_weights", "rollout", 100, ("update_actor",)),
)
# verl's DistProfiler.annotate(role=...) of each worker method: the folder its discrete mode saves the call in
DISCRETE_FOLDERS = {"generate_sequences": "rollout_generate", "compute_log_prob": "actor_compute_log_prob",
                    "compute_ref_log_prob": "ref_compute_log_prob", "update_actor": "actor_update"}


def schedule_1f1b(stages: int, microbatches: int, fwd_us: list[int], bwd_us: list[int]) -> list[list[tuple]]:
    """Per stage, its (kind, microbatch, start µs, end µs) in run order."""
    order = []
    for s in range(stages):
        warm = min(stages - s - 1, microbatches)
        ops = [("F", i) for i in range(warm)]
        for i in range(microbatches - warm):
            ops += [("F", warm + i), ("B", i)]
        ops += [("B", i) for i in range(microbatches - warm, microbatches)]
        order.append(ops)
    done: dict[tuple, int] = {}
    out: list[list[tuple]] = [[] for _ in range(stages)]
    free = [0] * stages
    pos = [0] * stages
    while any(pos[s] < len(order[s]) for s in range(stages)):
        moved = False
        for s in range(stages):
            while pos[s] < len(order[s]):
                kind, i = order[s][pos[s]]
                dep = ("F", s - 1, i) if kind == "F" and s > 0 else ("B", s + 1, i) if kind == "B" and \
                    s < stages - 1 else None
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done.get(dep, 0))
                end = start + (fwd_us[s] if kind == "F" else bwd_us[s])
                done[(kind, s, i)] = end
                out[s].append((kind, i, start, end))
                free[s] = end
                pos[s] += 1
                moved = True
        if not moved:
            raise RuntimeError("1F1B schedule deadlocked")
    return out


def _ts(us: float) -> str:
    ns = round(us * 1000)
    return f"{ns // 1000}.{ns % 1000:03d}"


def _pids(rank: int) -> dict[str, int]:
    pid = 5000 + rank
    return {"py": pid, "tx": (pid << 10) | (6 << 5), "hw": (pid << 10) | (13 << 5)}


def _meta(p: dict[str, int], device: bool) -> list[dict]:
    ev = []
    names = (("py", "Python", PY_TID, f"Thread {PY_TID}"), ("tx", "MsprofTx", PY_TID, f"Thread {PY_TID}"))
    if device:
        names += (("hw", "Ascend Hardware", 2, "Stream 2"),)
    for key, proc, tid, thread in names:
        ev.append({"ph": "M", "name": "process_name", "pid": p[key], "tid": 0, "args": {"name": proc}})
        ev.append({"ph": "M", "name": "thread_name", "pid": p[key], "tid": tid, "args": {"name": thread}})
    return ev


def _x(name, pid, tid, start_us, dur_us, cat=None, **args) -> dict:
    e = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": _ts(T0_US + start_us), "dur": dur_us, "args": args}
    if cat:
        e["cat"] = cat
    return e


def _write_text(folder: Path, rank: int, steps: list[tuple[int, int]], ranges: list[tuple[str, int, int]],
                device: bool, metadata: dict | None) -> None:
    """One rank folder: ProfilerStep slices, host mstx ranges and (``device``) their device ranges with flows."""
    p = _pids(rank)
    ev = _meta(p, device)
    for k, (s, e) in enumerate(steps):
        ev.append(_x(f"ProfilerStep#{k + 1}", p["py"], PY_TID, s - 2 * HOST_LEAD_US, e - s + 4 * HOST_LEAD_US,
                     "cpu_op"))
    for n, (msg, s, e) in enumerate(ranges):
        if not device:
            ev.append(_x(msg, p["tx"], PY_TID, s, e - s, "MsTx"))
            continue
        host = _x(msg, p["tx"], PY_TID, s - HOST_LEAD_US, e - s, "MsTx")
        dev = _x(msg, p["hw"], 2, s, e - s, **{"Task Type": "MsTx"})
        fid = f"{rank}{n:06d}"
        ev += [host, dev,
               {"ph": "s", "bp": "e", "name": "MsTx", "cat": "MsTx", "id": fid, "pid": p["tx"], "tid": PY_TID,
                "ts": host["ts"]},
               {"ph": "f", "bp": "e", "name": "MsTx", "cat": "MsTx", "id": fid, "pid": p["hw"], "tid": 2,
                "ts": dev["ts"]}]
    out = folder / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    (folder / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}), encoding="utf-8")
    if metadata is not None:
        (folder / "profiler_metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    (out / "trace_view.json").write_text(json.dumps(ev), encoding="utf-8")


def _write_db(folder: Path, rank: int, steps: list[tuple[int, int]], ranges: list[tuple[str, int, int]],
              metadata: dict | None) -> None:
    """One rank folder of the db export: ProfilerStep rows in PYTORCH_API, the ranges in MSTX_EVENTS."""
    out = folder / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    (folder / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}), encoding="utf-8")
    if metadata is not None:
        (folder / "profiler_metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    db = out / f"ascend_pytorch_profiler_{rank}.db"
    db.unlink(missing_ok=True)
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE ENUM_API_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE ENUM_MSTX_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE PYTORCH_API (startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER, name INTEGER,
            sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER,
            callchainId INTEGER, type INTEGER);
        CREATE TABLE MSTX_EVENTS (startNs INTEGER, endNs INTEGER, eventType INTEGER, rangeId INTEGER,
            category INTEGER, message INTEGER, globalTid INTEGER, endGlobalTid INTEGER, domainId INTEGER,
            connectionId INTEGER);
    """)
    con.executemany("INSERT INTO ENUM_API_TYPE VALUES (?, ?)",
                    [(50001, "op"), (50002, "queue"), (50003, "trace"), (50004, "mstx")])
    con.executemany("INSERT INTO ENUM_MSTX_EVENT_TYPE VALUES (?, ?)",
                    list(enumerate(["marker", "push/pop", "start/end", "marker_ex"])))
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, (1 << 28) + len(strings))

    gtid = ((5000 + rank) << 32) | PY_TID
    t0 = T0_US * 1000
    con.executemany("INSERT INTO PYTORCH_API VALUES (?, ?, ?, NULL, ?, -1, 0, NULL, NULL, NULL, 50001)",
                    [(str(t0 + (s - 2 * HOST_LEAD_US) * 1000), str(t0 + (e + 2 * HOST_LEAD_US) * 1000), gtid,
                      sid(f"ProfilerStep#{k + 1}")) for k, (s, e) in enumerate(steps)])
    # torch_npu's torch op of each range_start (API type 50004, no message): not a phase
    con.executemany("INSERT INTO PYTORCH_API VALUES (?, ?, ?, NULL, ?, -1, 0, NULL, NULL, NULL, 50004)",
                    [(str(t0 + (s - HOST_LEAD_US) * 1000), str(t0 + (s - HOST_LEAD_US + 1) * 1000), gtid,
                      sid("mstx_range_push_op")) for _, s, _ in ranges])
    con.executemany("INSERT INTO MSTX_EVENTS VALUES (?, ?, 2, ?, NULL, ?, ?, ?, NULL, NULL)",
                    [(t0 + s * 1000, t0 + e * 1000, n, sid(msg), gtid, gtid)
                     for n, (msg, s, e) in enumerate(ranges)])
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(i, t) for t, i in strings.items()])
    con.commit()
    con.close()


def write_pp_run(out_dir, *, stages: int = 4, microbatches: int = 8, fwd_us: int = 100, bwd_us: int = 200,
                 slow_stage: int | None = None, slow_extra_us: int = 0, form: str = "text") -> dict:
    """Write the pipeline-parallel run (see the module note) and return its truth (times in ns)."""
    if form not in ("text", "db"):
        raise ValueError("form is 'text' or 'db'")
    fwd = [fwd_us + (slow_extra_us if s == slow_stage else 0) for s in range(stages)]
    sched = schedule_1f1b(stages, microbatches, fwd, [bwd_us] * stages)
    lo = min(op[2] for ops in sched for op in ops)
    hi = max(op[3] for ops in sched for op in ops)
    meta = {"pp_info": json.dumps({"pp_type": "1f1b", "microbatch_num": microbatches})}
    names = {"F": "forward_step", "B": "backward_step"}
    busy, bubble = [], []
    for s, ops in enumerate(sched):
        ranges = [(str({"name": names[k], "current_microbatch": i}), a, b) for k, i, a, b in ops]
        folder = Path(out_dir) / f"rank{s}_ascend_pt"
        if form == "text":
            _write_text(folder, s, [(lo, hi)], ranges, True, meta)
        else:
            _write_db(folder, s, [(lo, hi)], ranges, meta)
        b = sum(e - a for _, _, a, e in ops)
        busy.append(b * 1000)
        bubble.append((hi - lo - b) * 1000)
    span = (hi - lo) * 1000
    return {"stages": stages, "microbatches": microbatches, "step_ns": span, "busy_ns": busy, "bubble_ns": bubble,
            "bubble_ratio": [b / span for b in bubble], "theory_ratio": (stages - 1) / (microbatches + stages - 1),
            "setter": max(range(stages), key=lambda s: (busy[s], -s)), "t0_ns": T0_US * 1000 + lo * 1000,
            "schedule": sched}


def _rl_schedule(workers_of: dict[str, list], iterations: int, phases=RL_PHASES):
    """The RL job's phases per worker (each phase after the ones it waits for, plus ``GAP_US``; one straggler per
    phase and iteration) and per iteration its start, wall time and deciding chain of (phase, worker).
    ``workers_of``: the workers of each phase (keyed by its name) or role."""
    per_worker: dict = {w: [] for ws in workers_of.values() for w in ws}
    truth_iters = []
    t = 0
    for k in range(iterations):
        it_start = t
        chain: list[tuple[str, object]] = []
        finish: dict[str, tuple[int, int]] = {}  # phase -> (end µs of its slowest worker, its index)
        for n, (name, role, base, after) in enumerate(phases):
            start = max([finish[a][0] for a in after], default=it_start) + (GAP_US if after else 0)
            ws = workers_of[name] if name in workers_of else workers_of[role]
            straggler = (k * 3 + n) % len(ws)
            slowest = (0, -1)
            for i, w in enumerate(ws):
                dur = base + 3 * i + (STRAGGLER_US if i == straggler else 0)
                per_worker[w].append((name, start, start + dur))
                slowest = max(slowest, (start + dur, i))
            finish[name] = slowest
        # the deciding chain: from the last phase back through the latest-ending phase it waited for
        name = phases[-1][0]
        while True:
            role = next(p[1] for p in phases if p[0] == name)
            ws = workers_of[name] if name in workers_of else workers_of[role]
            chain.append((name, ws[finish[name][1]]))
            after = next(p[3] for p in phases if p[0] == name)
            if not after:
                break
            name = max(after, key=lambda a: finish[a][0])
        t = finish[phases[-1][0]][0]
        truth_iters.append({"iteration": k + 1, "start_ns": (T0_US + it_start) * 1000,
                            "wall_ns": (t - it_start) * 1000, "chain": chain[::-1]})
        t += 5 * GAP_US
    return per_worker, truth_iters


def write_rl_job(out_dir, *, workers: int = 4, iterations: int = 2, form: str = "text") -> dict:
    """Write the RL job (see the module note) and return its truth (times in ns)."""
    if form not in ("text", "db"):
        raise ValueError("form is 'text' or 'db'")
    ranks_of = {"rollout": list(range(workers)), "actor": list(range(workers)),
                "ref": list(range(workers, 2 * workers))}
    per_rank, truth_iters = _rl_schedule(ranks_of, iterations)
    for r, ranges in per_rank.items():
        group = "actor_rollout" if r < workers else "ref"
        steps = []
        for k in range(iterations):
            mine = [(s, e) for (_, s, e) in ranges[k * len(ranges) // iterations:(k + 1) * len(ranges) // iterations]]
            steps.append((min(s for s, _ in mine), max(e for _, e in mine)))
        folder = Path(out_dir) / group / f"worker{r}_ascend_pt"
        if form == "text":
            _write_text(folder, r, steps, ranges, False, None)
        else:
            _write_db(folder, r, steps, ranges, None)
    busy = {}
    for r, ranges in per_rank.items():
        for k in range(iterations):
            mine = ranges[k * len(ranges) // iterations:(k + 1) * len(ranges) // iterations]
            busy[(k + 1, r)] = _union_us(mine) * 1000
    return {"workers": workers, "iterations": truth_iters, "busy_ns": busy, "ranks_of": ranks_of}


def write_rl_discrete(out_dir, *, workers: int = 4, iterations: int = 2, form: str = "db") -> dict:
    """Write the RL job as verl's discrete mode does (see the module note) and return its truth (times in ns).
    ``form``: ``db`` (verl's export type) or ``text``."""
    if form not in ("text", "db"):
        raise ValueError("form is 'text' or 'db'")
    phases = RL_PHASES[:-1]  # verl profiles no weight sync on its own
    workers_of = {name: [f"{DISCRETE_FOLDERS[name]}·{w}" for w in range(workers)] for name, _, _, _ in phases}
    per_worker, truth_iters = _rl_schedule(workers_of, iterations, phases)
    busy = {}
    for label, ranges in per_worker.items():
        group, w = label.split("·")
        for k, (name, s, e) in enumerate(ranges):
            # one profiler per call: a folder named {host}_{pid}_{ms}_ascend_pt, no ProfilerStep, the host range
            folder = Path(out_dir) / group / f"node0_{1000 + int(w)}_{(T0_US + s) // 1000}_ascend_pt"
            if form == "text":
                _write_text(folder, int(w), [], [(name, s, e)], False, None)
            else:
                _write_db(folder, int(w), [], [(name, s, e)], None)
            busy[(k + 1, label)] = (e - s) * 1000
    return {"workers": workers, "iterations": truth_iters, "busy_ns": busy, "workers_of": workers_of}


def _union_us(ranges: list[tuple[str, int, int]]) -> int:
    total, end = 0, None
    for _, s, e in sorted(ranges, key=lambda x: x[1]):
        if end is None or s >= end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total
