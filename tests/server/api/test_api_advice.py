"""``/api/runs/{id}/advice`` on the real level1 sample and on a generated run crafted to hold every pattern
(tests/advice_sample.py): each finding's numbers equal a plain computation over the source rows (the profiler's
CSV / JSON files where the finding comes from them, the trace's slices otherwise), and each instance's slice exists
with the stated name and times, behind a timeline link that selects it."""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from decimal import Decimal
from urllib.parse import parse_qs, urlparse

import duckdb
import pytest

from ascendscope.server.queries import advice as aq
from tests.conftest import PYTORCH_TEXT, needs_samples
from tests.samples import HAVE_REAL, needs_real

pytestmark = needs_samples

LEVEL1 = PYTORCH_TEXT / "level1"


@pytest.fixture(scope="module")
def advice_runs(runs, tmp_path_factory) -> dict:
    """``{name: (run_id, db_path, source_dir)}``: level1 from ``runs`` and the crafted run, added to its store."""
    from tests.advice_sample import add_crafted_run

    return {"level1": (runs.ids["level1"], runs.dbs["level1"], LEVEL1),
            "crafted": add_crafted_run(runs.data_dir, tmp_path_factory.mktemp("advice"))}


def advice(client, advice_runs, name, rank):
    r = client.get(f"/api/runs/{advice_runs[name][0]}/advice", params={"rank": rank})
    assert r.status_code == 200, r.text
    return r.json()


def connect(advice_runs, name):
    return duckdb.connect(str(advice_runs[name][1]), read_only=True)


def by_category(body, category):
    return [f for f in body["findings"] if f["category"] == category]


def us_to_ns(text: str) -> int:
    return int((Decimal(text.strip()) * 1000).to_integral_value())


def ms_to_ns(value) -> int:
    return int((Decimal(str(value)) * 1_000_000).to_integral_value())


CASES = [("level1", 0), ("level1", 1), ("crafted", 0), ("crafted", 1)]


# ---- shape ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, rank", CASES)
def test_shape_and_bounds(client, advice_runs, name, rank):
    body = advice(client, advice_runs, name, rank)
    assert body["rank"] == rank and body["ranks"] == [0, 1]
    assert [c["id"] for c in body["categories"]] == [c for c, _, _ in aq.CATEGORIES if c != "serving"]  # no serving
    assert sum(c["count"] for c in body["categories"]) == len(body["findings"]) <= aq.MAX_FINDINGS
    ids = [f["id"] for f in body["findings"]]
    assert len(ids) == len(set(ids))
    for f in body["findings"]:
        assert f["severity"] in ("critical", "warning", "info")
        assert f["rank"] in (rank, None) and f["title"] and f["text"]
        assert len(f["instances"]) <= aq.MAX_INSTANCES
        assert f["instance_count"] >= len(f["instances"])
        assert f["instances_truncated"] == (f["instance_count"] > len(f["instances"]))


def test_every_category_is_found_in_the_crafted_run(client, advice_runs):
    body = advice(client, advice_runs, "crafted", 0)
    npu = {c for c, _, _ in aq.CATEGORIES} - {"serving"}  # serving's rules: tests/server/api/test_api_serving.py
    assert {c["id"]: c["count"] > 0 for c in body["categories"] if c["id"] in npu} == {c: True for c in npu}
    assert {f["metrics"]["rule"] for f in by_category(body, "affinity_api")} == {r[0] for r in aq.AFFINITY_RULES}
    assert {f["id"] for f in by_category(body, "slow_rank")} == {"slow_rank:all:wait", "slow_rank:all:link-HCCS"}


def test_the_finding_ids_are_stable(client, advice_runs):
    """A finding's id (kept in the page URL) must not change between requests or server processes."""
    first = [f["id"] for f in advice(client, advice_runs, "level1", 0)["findings"]]
    assert first == [f["id"] for f in advice(client, advice_runs, "level1", 0)["findings"]]
    fusible = [i for i in first if i.startswith("fusible:")]
    assert all(re.fullmatch(r"fusible:0:[0-9a-f]{12}", i) for i in fusible)
    assert fusible or not HAVE_REAL  # the real sample repeats small-kernel runs


@pytest.mark.parametrize("name, rank", CASES)
def test_instances_are_the_slices_they_name(client, advice_runs, name, rank):
    body = advice(client, advice_runs, name, rank)
    run_id = advice_runs[name][0]
    with connect(advice_runs, name) as db:
        seen = 0
        for f in body["findings"]:
            for inst in f["instances"]:
                assert inst["slice_id"] is not None, (f["id"], inst)
                row = db.execute("SELECT rank, name, ts_ns, dur_ns FROM slices WHERE slice_id = ?",
                                 [inst["slice_id"]]).fetchone()
                assert row == (inst["rank"], inst["name"], int(inst["ts_ns"]), inst["dur_ns"]), (f["id"], inst)
                url = urlparse(inst["timeline_url"])
                assert url.path == f"/runs/{run_id}/timeline"
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                assert int(q["slice"]) == inst["slice_id"] and int(q["rank"]) == inst["rank"]
                end = int(inst["ts_ns"]) + (inst.get("span_ns") or inst["dur_ns"])
                assert int(q["start_ns"]) < int(inst["ts_ns"]) and int(q["end_ns"]) > end
                seen += 1
    assert seen


# ---- host-bound steps and exposed communication: step_trace_time.csv -----------------------------------------------
def step_trace(rank: int) -> list[tuple[int, dict]]:
    path = LEVEL1 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    with open(path, newline="") as fh:
        return list(enumerate(csv.DictReader(fh), start=1))


@pytest.mark.parametrize("rank", [0, 1])
def test_step_findings_equal_step_trace_time_csv(client, advice_runs, rank):
    body = advice(client, advice_runs, "level1", rank)
    rows = step_trace(rank)
    assert rows
    with connect(advice_runs, "level1") as db:
        for src_row, row in rows:
            step = int(row["Step"])
            comp, cno, free = (us_to_ns(row[k]) for k in ("Computing", "Communication(Not Overlapped)", "Free"))
            e2e = comp + cno + free
            for category, part, lane in (("host_bound", free, "Free"),
                                         ("exposed_communication", cno, "Communication(Not Overlapped)")):
                threshold = aq.HOST_BOUND_RATIO if category == "host_bound" else aq.EXPOSED_COMM_RATIO
                found = [f for f in by_category(body, category) if f["step"] == step]
                assert len(found) == (1 if part / e2e > threshold else 0), category
                if not found:
                    continue
                f = found[0]
                assert f["source"] == {"table": "step_trace", "file": "step_trace_time.csv", "src_row": src_row}
                assert f["metrics"]["e2e_ns"] == e2e
                assert f["metrics"]["free_ns"] == free
                assert f["metrics"]["communication_not_overlapped_ns"] == cno
                assert f"{100 * part / e2e:.1f}%" in f["text"]
                # the instances are the lane's slices of the step, and they add up to the CSV's number
                lo, hi = db.execute("SELECT device_start_ns, device_end_ns FROM steps WHERE rank = ? AND step = ?",
                                    [rank, step]).fetchone()
                want = db.execute(
                    "SELECT s.slice_id FROM slices s JOIN tracks t USING (track_id) WHERE s.rank = ? AND "
                    "t.kind = 'overlap' AND s.name = ? AND s.ts_ns >= ? AND s.ts_ns < ?",
                    [rank, lane, lo, hi]).fetchall()
                assert not f["instances_truncated"]
                assert sorted(i["slice_id"] for i in f["instances"]) == sorted(r[0] for r in want)
                assert sum(i["dur_ns"] for i in f["instances"]) == part
                durations = [i["dur_ns"] for i in f["instances"]]
                assert durations == sorted(durations, reverse=True)


# ---- slow rank: communication.json ---------------------------------------------------------------------------------
def comm_waits(source_dir, rank: int) -> dict:
    path = source_dir / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    ops = {}
    for step in json.loads(path.read_text()).values():
        for kind in ("collective", "p2p"):
            for key, op in (step.get(kind) or {}).items():
                if key == "Total Op Info":
                    continue
                info = op["Communication Time Info"]
                ops[key.split("@")[0]] = (ms_to_ns(info["Wait Time(ms)"]), ms_to_ns(info["Synchronization Time(ms)"]),
                                         ms_to_ns(info["Elapse Time(ms)"]))
    return ops


@pytest.mark.parametrize("name", ["level1", "crafted"])
def test_slow_rank_equals_communication_json(client, advice_runs, name):
    source = advice_runs[name][2]
    per_rank = {r: comm_waits(source, r) for r in (0, 1)}
    waits = {r: sum(w + s for w, s, _ in ops.values()) for r, ops in per_rank.items()}
    most, least = max(waits, key=waits.get), min(waits, key=waits.get)
    elapse = sum(e for _, _, e in per_rank[most].values())
    found = [f for f in by_category(advice(client, advice_runs, name, 0), "slow_rank") if f["id"].endswith(":wait")]
    assert len(found) == (1 if waits[most] - waits[least] > aq.SLOW_RANK_SPREAD * elapse else 0)
    if not found:
        return
    f = found[0]
    tolerance = 2 * len(per_rank[most])  # the ingest rounds each ms float to whole ns
    assert f["metrics"]["waiting_rank"] == most and f["metrics"]["slow_rank"] == least
    assert abs(f["metrics"]["spread_ns"] - (waits[most] - waits[least])) <= tolerance
    # the instances are the waiting rank's ops, most waiting first
    order = sorted(per_rank[most], key=lambda k: -(per_rank[most][k][0] + per_rank[most][k][1]))
    assert [i["name"] for i in f["instances"]] == order
    assert {i["rank"] for i in f["instances"]} == {most}


def test_slow_link_equals_communication_matrix_json(client, advice_runs):
    from tests.advice_sample import SLOW_LINK_FACTOR

    source = advice_runs["crafted"][2]
    size = time_ms = 0.0
    matrix_path = source / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    matrix = json.loads(matrix_path.read_text())
    for step in matrix.values():
        for key, cells in step["collective"].items():
            if "-total@" in key and "1-0" in cells:
                size += cells["1-0"]["Transit Size(MB)"]
                time_ms += cells["1-0"]["Transit Time(ms)"]
    bandwidth = size / time_ms  # MB/ms is GB/s
    f = next(f for f in by_category(advice(client, advice_runs, "crafted", 1), "slow_rank")
             if f["id"] == "slow_rank:all:link-HCCS")
    m = f["metrics"]
    assert (m["src_rank"], m["dst_rank"]) == (1, 0)
    assert m["bandwidth_gbps"] == pytest.approx(bandwidth, rel=1e-6)
    assert m["bandwidth_gbps"] < aq.SLOW_LINK_RATIO * m["median_gbps"]
    assert m["median_gbps"] == pytest.approx(bandwidth * SLOW_LINK_FACTOR, rel=0.2)  # the other direction, untouched
    assert f"{bandwidth:.2f} GB/s" in f["title"]
    assert f["instances"] and {i["rank"] for i in f["instances"]} == {1}


# ---- AICPU: kernel_details.csv -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, rank", CASES)
def test_aicpu_equals_kernel_details_csv(client, advice_runs, name, rank):
    path = advice_runs[name][2] / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with open(path, newline="") as fh:
        rows = [(i, r) for i, r in enumerate(csv.DictReader(fh), start=1) if r["Accelerator Core"] == "AI_CPU"]
    found = by_category(advice(client, advice_runs, name, rank), "aicpu")
    assert len(found) == (1 if rows else 0)
    if name == "crafted":
        assert rows, "the crafted run's NonZero kernels run on the AI CPU"
    if not rows:
        return
    f = found[0]
    durations = {i: us_to_ns(r["Duration(us)"]) for i, r in rows}
    assert f["metrics"]["count"] == len(rows)
    assert f["metrics"]["total_ns"] == sum(durations.values())
    assert sorted(i["src_row"] for i in f["instances"]) == sorted(durations)
    for inst in f["instances"]:
        assert inst["dur_ns"] == durations[inst["src_row"]]
        assert int(inst["ts_ns"]) == us_to_ns(dict(rows)[inst["src_row"]]["Start Time(us)"])


# ---- affinity APIs: the Python lane's top-level torch ops ------------------------------------------------------------
def plain_affinity(db, rank: int) -> dict[str, list[list[int]]]:
    """Rule id → the slice ids of each match, found by walking every Python thread's aten:: ops in time order."""
    rows = db.execute("SELECT s.track_id, s.slice_id, s.name, s.ts_ns, s.dur_ns FROM slices s JOIN tracks t "
                      "USING (track_id) WHERE s.rank = ? AND t.kind = 'python' AND s.name LIKE 'aten::%'",
                      [rank]).fetchall()
    threads = defaultdict(list)
    for track, sid, name, ts, dur in rows:
        threads[track].append((ts, -dur, sid, name, ts + dur))
    rules = sorted(((rid, [(p,) if isinstance(p, str) else p for p in seq]) for rid, seq, _, _ in aq.AFFINITY_RULES),
                   key=lambda r: -len(r[1]))
    found = defaultdict(list)
    for ops in threads.values():
        ops.sort()
        top, end = [], None
        for ts, _, sid, name, stop in ops:
            if end is None or end <= ts:
                top.append((sid, name))
            end = stop if end is None else max(end, stop)
        i = 0
        while i < len(top):
            for rid, seq in rules:
                window = top[i:i + len(seq)]
                if len(window) == len(seq) and all(n in alts for (_, n), alts in zip(window, seq)):
                    found[rid].append([sid for sid, _ in window])
                    i += len(seq)
                    break
            else:
                i += 1
    return found


@pytest.mark.parametrize("name, rank", CASES)
def test_affinity_equals_a_walk_over_the_python_lane(client, advice_runs, name, rank):
    body = advice(client, advice_runs, name, rank)
    with connect(advice_runs, name) as db:
        plain = plain_affinity(db, rank)
    got = {f["metrics"]["rule"]: [i["slice_ids"] for i in f["instances"]] for f in by_category(body, "affinity_api")}
    assert got == dict(plain)
    for f in by_category(body, "affinity_api"):
        assert f["metrics"]["count"] == len(f["instances"])
        assert f["metrics"]["host_span_ns"] == sum(i["span_ns"] for i in f["instances"])


def test_affinity_finds_the_injected_sequences_only(client, advice_runs):
    from tests.advice_sample import AFFINITY_REPEATS, AFFINITY_TID

    with connect(advice_runs, "crafted") as db:
        injected = {r[0] for r in db.execute("SELECT s.slice_id FROM slices s JOIN tracks t USING (track_id) "
                                             "WHERE s.rank = 0 AND t.tid = ?", [AFFINITY_TID]).fetchall()}
    body = advice(client, advice_runs, "crafted", 0)
    per_rule = defaultdict(int)
    for f in by_category(body, "affinity_api"):
        for inst in f["instances"]:
            if set(inst["slice_ids"]) <= injected:
                per_rule[f["metrics"]["rule"]] += 1
    # each rule's sequence was written AFFINITY_REPEATS times; the decoy (pow, mean, detach) matched nothing
    assert dict(per_rule) == {r[0]: AFFINITY_REPEATS for r in aq.AFFINITY_RULES}


# ---- fusible runs: the Ascend Hardware lane --------------------------------------------------------------------------
def normalise(name: str) -> str:
    return re.sub(r"([A-Za-z])[0-9]+_", r"\1_", re.sub(r"_[0-9]+$", "", name))


def plain_fusible(db, rank: int) -> dict:
    rows = db.execute("SELECT s.track_id, s.slice_id, s.name, s.ts_ns, s.dur_ns, "
                      "json_extract_string(s.args, '$.\"Task Type\"') FROM slices s JOIN tracks t USING (track_id) "
                      "WHERE s.rank = ? AND t.kind = 'hardware' AND s.depth = 0", [rank]).fetchall()
    streams = defaultdict(list)
    for track, sid, name, ts, dur, task_type in rows:
        if task_type in aq.COMPUTE_TASK_TYPES:
            streams[track].append((ts, sid, normalise(name), dur))
    runs = []
    for tasks in streams.values():
        tasks.sort()
        current = []
        for task in tasks + [None]:
            if task is not None and task[3] < aq.SMALL_KERNEL_NS:
                current.append(task)
                continue
            if len(current) >= aq.MIN_FUSE_KERNELS:
                runs.append(current)
            current = []
    groups = defaultdict(list)
    for run in runs:
        groups[(tuple(t[2] for t in run[:aq.MAX_FUSE_NAMES]), len(run))].append(run)
    return {key: {"occurrences": len(rs), "busy_ns": sum(t[3] for r in rs for t in r),
                  "first_ids": sorted(r[0][1] for r in rs)}
            for key, rs in groups.items() if len(rs) >= aq.MIN_FUSE_REPEATS}


@pytest.mark.parametrize("name, rank", CASES)
def test_fusible_equals_a_walk_over_the_streams(client, advice_runs, name, rank):
    with connect(advice_runs, name) as db:
        plain = plain_fusible(db, rank)
    assert len(plain) <= aq.MAX_FUSE_FINDINGS  # so every group is reported, whatever the order among equals
    got = {(tuple(f["metrics"]["names"]), f["metrics"]["kernels"]):
           {"occurrences": f["metrics"]["occurrences"], "busy_ns": f["metrics"]["busy_ns"],
            "first_ids": sorted(i["slice_id"] for i in f["instances"])}
           for f in by_category(advice(client, advice_runs, name, rank), "fusible")}
    assert got == plain
    if name == "level1" and HAVE_REAL:
        assert plain, "the real sample repeats small-kernel runs"


# ---- dispatch gaps: Free slices against the CANN lane and the device's wait tasks ------------------------------------
def plain_gaps(db, rank: int) -> dict[int, tuple]:
    """Free slice id → (cause, step, dur_ns), by the rules of server/queries/advice.py written out by hand."""
    gaps = db.execute("SELECT s.slice_id, s.ts_ns, s.dur_ns FROM slices s JOIN tracks t USING (track_id) "
                      "WHERE s.rank = ? AND t.kind = 'overlap' AND s.name = 'Free' AND s.dur_ns >= ?",
                      [rank, aq.MIN_GAP_NS]).fetchall()
    steps = db.execute("SELECT step, device_start_ns, device_end_ns FROM steps WHERE rank = ?", [rank]).fetchall()
    host = []
    for track, kind, name, depth, ts, dur, task_type in db.execute(
            "SELECT s.track_id, t.kind, s.name, s.depth, s.ts_ns, s.dur_ns, "
            "json_extract_string(s.args, '$.\"Task Type\"') FROM slices s JOIN tracks t USING (track_id) "
            "WHERE s.rank = ? AND t.kind IN ('cann', 'hardware') AND s.dur_ns > 0", [rank]).fetchall():
        sync = aq.SYNC_API_MARKER in name
        if kind == "hardware" and task_type in aq.WAIT_TASK_TYPES:
            host.append(("device_wait", track, ts, ts + dur))
        elif kind == "cann" and (depth == 0 or sync):
            host.append(("sync" if sync else "cann", track, ts, ts + dur))
    has_cann = db.execute("SELECT count(*) FROM tracks WHERE rank = ? AND kind = 'cann'", [rank]).fetchone()[0] > 0
    out = {}
    for sid, ts, dur in gaps:
        cover = defaultdict(int)
        for kind, track, a, b in host:
            if a < ts + dur and b > ts:
                cover[(kind, track)] += min(ts + dur, b) - max(ts, a)
        best = {k: max([v for (kind, _), v in cover.items() if kind == k], default=0)
                for k in ("sync", "device_wait", "cann")}
        if best["sync"] > 0 or 2 * best["device_wait"] >= dur:
            cause = "waiting"
        elif not has_cann:
            cause = "unattributed"
        else:
            cause = "launch" if 2 * best["cann"] >= dur else "queue"
        step = next((s for s, lo, hi in steps if lo <= ts < hi), None)
        out[sid] = (cause, step, dur)
    return out


@pytest.mark.parametrize("name, rank", CASES)
def test_dispatch_gaps_equal_a_plain_attribution(client, advice_runs, name, rank):
    body = advice(client, advice_runs, name, rank)
    with connect(advice_runs, name) as db:
        plain = plain_gaps(db, rank)
    totals = defaultdict(lambda: [0, 0])
    for cause, _, dur in plain.values():
        totals[cause][0] += 1
        totals[cause][1] += dur
    found = {f["id"].split(":")[-1]: f for f in by_category(body, "dispatch")}
    assert set(found) == set(totals)
    for cause, f in found.items():
        assert [f["metrics"]["count"], f["metrics"]["total_ns"]] == totals[cause]
        assert all(plain[i["slice_id"]][0] == cause for i in f["instances"])
        assert len(f["instances"]) == min(totals[cause][0], aq.MAX_INSTANCES)
    # the host-bound text splits a step's free time by the same causes
    for f in by_category(body, "host_bound"):
        per_cause = defaultdict(lambda: {"count": 0, "total_ns": 0})
        for cause, step, dur in plain.values():
            if step == f["step"]:
                per_cause[cause]["count"] += 1
                per_cause[cause]["total_ns"] += dur
        assert f["metrics"]["gaps"] == dict(per_cause)
        for inst in f["instances"]:
            assert inst["cause"] == (plain[inst["slice_id"]][0] if inst["slice_id"] in plain else None)


@needs_real
def test_the_real_sample_has_each_cause(client, advice_runs):
    causes = {f["id"].split(":")[-1] for f in by_category(advice(client, advice_runs, "level1", 0), "dispatch")}
    assert causes == {"launch", "queue", "waiting"}


# ---- parameters and the page ---------------------------------------------------------------------------------------
def test_default_rank_and_a_rank_without_data(client, advice_runs):
    run_id = advice_runs["level1"][0]
    assert client.get(f"/api/runs/{run_id}/advice").json()["rank"] == 0
    body = client.get(f"/api/runs/{run_id}/advice", params={"rank": 7}).json()
    assert body["rank"] == 7 and all(f["rank"] is None for f in body["findings"])
    r = client.get(f"/api/runs/{run_id}/advice", params={"rank": "x"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_parameter"


def test_the_advice_page_and_tab(client, advice_runs):
    run_id = advice_runs["level1"][0]
    r = client.get(f"/runs/{run_id}/advice")
    assert r.status_code == 200
    assert 'id="advice-view"' in r.text and "/js/views/advice.js" in r.text
    assert "plotly" not in r.text  # no charts: the page keeps the strict style policy
    assert f'href="../../runs/{run_id}/advice"' in client.get(f"/runs/{run_id}/timeline").text
