"""Checks of sample_data.generate: validity of every file, ground truth, flows, Overlap lane, CSV consistency."""
import csv
import gzip
import io
import json
import os
from collections import Counter, defaultdict

import pytest

from ascendscope.sample_data.generate import generate_run, main

COMPUTE = {"AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE"}
OV_NAMES = ["Computing", "Communication", "Communication(Not Overlapped)", "Free"]


def ns(ts):
    """Exact epoch-us string -> int ns (the integer-us form without decimals is accepted too)."""
    if "." not in ts:
        return int(ts) * 1000
    whole, frac = ts.split(".")
    assert len(frac) == 3, ts
    return int(whole) * 1000 + int(frac)


def dur_ns(d):
    return round(d * 1000)


def load_trace(out_dir):
    path = os.path.join(out_dir, "trace_view.json")
    if os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    else:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    if isinstance(data, dict):
        assert data["displayTimeUnit"] == "ns"
        data = data["traceEvents"]
    return data


def read_csv(path):
    """Parse a CSV and check that it is byte-identical to what csv.writer writes for the same cells."""
    with open(path, newline="", encoding="utf-8") as fh:
        raw = fh.read()
    rows = list(csv.reader(io.StringIO(raw, newline="")))
    again = io.StringIO(newline="")
    csv.writer(again).writerows(rows)
    assert again.getvalue() == raw, f"{path} is not csv.writer output"
    assert len({len(r) for r in rows}) == 1, "ragged rows"
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def merge(ivs):
    res = []
    for s, e in sorted(ivs):
        if res and s <= res[-1][1]:
            res[-1][1] = max(res[-1][1], e)
        else:
            res.append([s, e])
    return [tuple(x) for x in res]


def subtract(a, b):
    """Set difference of two merged interval lists (simple O(n*m) version, independent of the generator)."""
    out = []
    for s, e in a:
        pieces = [(s, e)]
        for bs, be in b:
            nxt = []
            for ps, pe in pieces:
                if be <= ps or bs >= pe:
                    nxt.append((ps, pe))
                    continue
                if bs > ps:
                    nxt.append((ps, bs))
                if be < pe:
                    nxt.append((be, pe))
            pieces = nxt
        out += pieces
    return [p for p in out if p[1] > p[0]]


def check_rank(rank_dir, truth):
    """Validate one rank directory against its ground truth; returns some parsed data for further checks."""
    out_dir = os.path.join(rank_dir, "ASCEND_PROFILER_OUTPUT")
    ev = load_trace(out_dir)
    ph = Counter(e["ph"] for e in ev)
    assert ph["X"] == truth["x_events"]
    assert ph["C"] == truth["c_events"]
    assert ph["M"] == truth["m_events"]
    assert len(ev) == truth["total_events"]
    # timestamps: strings with 3 decimals (one integer-us AI Core Freq sample allowed)
    no_dec = [e for e in ev if "ts" in e and "." not in e["ts"]]
    assert len(no_dec) == 1 and no_dec[0]["name"] == "AI Core Freq"
    assert all(isinstance(e["ts"], str) for e in ev if e["ph"] != "M")
    assert all("ts" not in e for e in ev if e["ph"] == "M")
    # process names and labels
    pname, labels, tname = {}, {}, {}
    for e in ev:
        if e["ph"] == "M":
            if e["name"] == "process_name":
                pname[e["pid"]] = e["args"]["name"]
            elif e["name"] == "process_labels":
                labels[e["pid"]] = e["args"]["labels"]
            elif e["name"] == "thread_name":
                tname[(e["pid"], e["tid"])] = e["args"]["name"]
    byname = {v: k for k, v in pname.items()}
    pid = truth["pid"]
    assert pname[pid] == "Python" and labels[pid] == "CPU"
    assert all(e["pid"] in pname for e in ev), "every pid has a process_name"
    for lane, sort in (("CANN", 7), ("Ascend Hardware", 13), ("HCCL", 15), ("Overlap Analysis", 23)):
        if lane in byname:
            p = byname[lane]
            assert p >> 10 == pid and (p >> 5) & 31 == sort and p & 31 == truth["device_id"]
    # order: framework slices first, metadata after slices, CANN part after
    first_m = next(i for i, e in enumerate(ev) if e["ph"] == "M")
    assert all(e["pid"] == pid for e in ev[:first_m])
    assert ev[0]["ph"] == "X" and ev[0]["cat"] == "cpu_op"
    xs = [e for e in ev if e["ph"] == "X"]
    assert min(ns(e["ts"]) for e in xs) == truth["min_x_ts_ns"]
    assert max(ns(e["ts"]) + dur_ns(e["dur"]) for e in xs) == truth["max_x_end_ns"]
    # slices by (pid, tid, ts); nesting per thread
    at = defaultdict(list)
    by_thread = defaultdict(list)
    for e in xs:
        s = ns(e["ts"])
        at[(e["pid"], e["tid"], s)].append(e)
        by_thread[(e["pid"], e["tid"])].append((s, s + dur_ns(e["dur"]), e))
    for key, lst in by_thread.items():
        if key[0] == byname.get("Overlap Analysis"):
            continue
        lst.sort(key=lambda x: (x[0], -x[1]))
        stack = []
        for s, end, e in lst:
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or end <= stack[-1], f"partial overlap on {key}: {e['name']}"
            stack.append(end)
    # flows: pair by (cat, id); f on an X start, s inside an X on the same pid/tid
    flows = defaultdict(lambda: {"s": [], "f": []})
    for e in ev:
        if e["ph"] in "sf":
            flows[(e["cat"], str(e["id"]))][e["ph"]].append(e)
    counts = defaultdict(Counter)
    for (cat, fid), d in flows.items():
        assert len(d["s"]) == 1 and d["f"], (cat, fid)
        counts[cat]["s"] += 1
        counts[cat]["f"] += len(d["f"])
        for f in d["f"]:
            assert f["bp"] == "e"
            assert at.get((f["pid"], f["tid"], ns(f["ts"]))), f"f end without slice: {f}"
        s = d["s"][0]
        st = ns(s["ts"])
        assert any(a <= st <= b for a, b, _ in by_thread[(s["pid"], s["tid"])]), f"s end outside slices: {s}"
        if cat == "HostToDevice":
            assert isinstance(s["id"], str) and s["name"] == f"HostToDevice{fid}"
            for f in d["f"]:
                target = at[(f["pid"], f["tid"], ns(f["ts"]))][0]
                assert target["args"]["connection_id"] == int(fid)
        elif cat == "async_npu":
            assert s["id"] == ns(d["f"][0]["ts"])
    for cat, c in truth["flows"].items():
        assert counts[cat] == Counter(c), cat
    # fwdbwd goes from the main thread to another thread
    for (cat, _), d in flows.items():
        if cat == "fwdbwd":
            assert d["s"][0]["tid"] == pid and d["f"][0]["tid"] != pid
    # CANN calls on the task-queue thread happen inside a Dequeue slice
    if "CANN" in byname:
        deq = sorted((ns(e["ts"]), ns(e["ts"]) + dur_ns(e["dur"])) for e in xs if e.get("cat") == "dequeue")
        deq_tid = next(e["tid"] for e in xs if e.get("cat") == "dequeue")
        for e in xs:
            if e["pid"] == byname["CANN"] and e["tid"] == deq_tid:
                s = ns(e["ts"])
                assert any(a <= s and s + dur_ns(e["dur"]) <= b for a, b in deq), e["name"]
    # async_npu flows start at a torch op (cpu_op) that encloses an Enqueue
    enq = defaultdict(list)
    for e in xs:
        if e.get("cat") == "enqueue":
            enq[e["tid"]].append(ns(e["ts"]))
    for (cat, _), d in flows.items():
        if cat == "async_npu":
            s = d["s"][0]
            op = [e for e in at[(s["pid"], s["tid"], ns(s["ts"]))] if e.get("cat") == "cpu_op"]
            assert op, s
            a, b = ns(op[0]["ts"]), ns(op[0]["ts"]) + dur_ns(op[0]["dur"])
            assert any(a <= q <= b for q in enq[s["tid"]]), op[0]["name"]
    # Overlap lane == independent recomputation
    hw, hc = byname["Ascend Hardware"], byname.get("HCCL")
    tasks = [(ns(e["ts"]), ns(e["ts"]) + dur_ns(e["dur"]), e) for e in xs if e["pid"] == hw]
    comp = merge([(s, t) for s, t, e in tasks if e["args"]["Task Type"] in COMPUTE])
    comm = merge([(ns(e["ts"]), ns(e["ts"]) + dur_ns(e["dur"])) for e in xs
                  if e["pid"] == hc and tname[(hc, e["tid"])].startswith("Group")]) if hc else []
    lane = defaultdict(list)
    if "Overlap Analysis" in byname:
        op = byname["Overlap Analysis"]
        for e in xs:
            if e["pid"] == op:
                assert e["name"] == OV_NAMES[e["tid"]] and "args" not in e
                lane[e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + dur_ns(e["dur"])))
        busy = merge(comp + comm)  # Free lies between the first and the last busy interval
        bounds = [(busy[0][0], busy[-1][1])]
        expect = [comp, comm, subtract(comm, comp), subtract(bounds, merge(comp + comm))]
        for i in range(4):
            assert sorted(lane[i]) == expect[i], OV_NAMES[i]
    # CSVs
    rows = {}
    for name, n in truth["csv_rows"].items():
        rows[name] = read_csv(os.path.join(out_dir, name))
        assert len(rows[name]) == n, name
    kd = rows["kernel_details.csv"]
    assert list(kd[0])[0] == "Step Id"
    hw_by_start = {(e["tid"], ns(e["ts"])): e for e in xs if e["pid"] == hw}
    steps = truth["steps"]
    hccl_ops = {ns(e["ts"]): e for e in xs if hc and e["pid"] == hc and e["tid"] == 0}
    for r in kd:
        assert r["Start Time(us)"].endswith("\t")
        start = ns(r["Start Time(us)"].rstrip("\t"))
        if r["Accelerator Core"] == "HCCL":
            e = hccl_ops[start]
        else:
            e = hw_by_start[(int(r["Stream ID"]), start)]
            assert e["args"]["Task Type"] == r["Accelerator Core"] and e["name"] == r["Name"]
            assert int(r["Task ID"]) == e["args"]["Task Id"]
        assert float(r["Duration(us)"]) == e["dur"]
        step = [s["id"] for s in steps if s["device_start_ns"] <= start <= s["end_ns"]]
        assert [int(r["Step Id"])] == step
    skip = {"EVENT_WAIT_SQE", "PCIE_DMA_SQE", "SDMA", "Notify Wait", "Write Value"}   # + HCCL stream tasks
    assert len(kd) == sum(1 for _, _, e in tasks if e["args"]["Task Type"] not in skip) + len(hccl_ops)
    agg = defaultdict(lambda: [0, 0.0])
    for r in kd:
        if r["Accelerator Core"] != "HCCL":
            agg[(r["Type"], r["Accelerator Core"])][0] += 1
            agg[(r["Type"], r["Accelerator Core"])][1] += float(r["Duration(us)"])
    ops = rows["op_statistic.csv"]
    assert {(r["OP Type"], r["Core Type"]): int(r["Count"]) for r in ops} == {k: v[0] for k, v in agg.items()}
    for r in ops:
        assert float(r["Total Time(us)"]) == pytest.approx(agg[(r["OP Type"], r["Core Type"])][1], abs=2e-3)
    if "step_trace_time.csv" in rows:
        for r in rows["step_trace_time.csv"]:
            s = next(s for s in steps if s["id"] == int(r["Step"]))
            sums = Counter()
            firsts, lasts = [], []
            for i in range(4):
                for a, b in lane[i]:
                    if s["device_start_ns"] <= a < s["end_ns"]:
                        sums[i] += b - a
                        firsts.append(a)
                        lasts.append(b)
            assert float(r["Computing"]) == pytest.approx(sums[0] / 1000)
            assert float(r["Communication"]) == pytest.approx(sums[1] / 1000)
            assert float(r["Communication(Not Overlapped)"]) == pytest.approx(sums[2] / 1000)
            assert float(r["Free"]) == pytest.approx(sums[3] / 1000)
            assert float(r["Stage"]) == pytest.approx((max(lasts) - min(firsts)) / 1000)
    od = rows["operator_details.csv"]
    assert len(od) == truth["cpu_op_events"] - len(steps)
    assert any("\r\n" in r["Call Stack"] for r in od)
    mem = rows["memory_record.csv"]
    comps = [r["Component"] for r in mem]
    n_app = comps.count("APP")
    assert comps[:n_app] == ["APP"] * n_app and {"PTA", "PTA+GE"} <= set(comps)
    times = [ns(r["Timestamp(us)"].rstrip("\t")) for r in mem[n_app:]]
    assert times == sorted(times)
    assert truth["min_x_ts_ns"] <= times[0] and times[-1] <= truth["max_x_end_ns"]
    for r, nxt in zip(mem[n_app:], mem[n_app + 1:]):
        if r["Component"] in ("PTA", "GE"):
            assert nxt["Component"] == "PTA+GE"
    return ev, rows


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    return out, generate_run(str(out), ranks=2, steps=3, ops_per_step=120, seed=3)


def test_small_run_is_valid(small_run):
    out, res = small_run
    assert len(res["ranks"]) == 2
    total = 0
    for r, truth in enumerate(res["ranks"]):
        rank_dir = os.path.join(out, f"rank{r}_ascend_pt")
        for rel, size in truth["files"].items():
            assert os.path.getsize(os.path.join(rank_dir, rel)) == size
            total += size
        ev, _ = check_rank(rank_dir, truth)
        with open(os.path.join(rank_dir, f"profiler_info_{r}.json")) as fh:
            info = json.load(fh)
        assert info["rank_id"] == r and info["config"]["experimental_config"]["_profiler_level"] == "Level1"
        with open(os.path.join(rank_dir, "profiler_metadata.json")) as fh:
            meta = json.load(fh)
        grp = meta["parallel_group_info"][res["group"]]
        assert grp["group_rank"] == r and grp["global_ranks"] == [0, 1]
        assert "ENV_VARIABLES" in meta
    assert total == res["total_bytes"]


def test_communication_files(small_run):
    out, res = small_run
    names = []
    for r in range(2):
        d = os.path.join(out, f"rank{r}_ascend_pt", "ASCEND_PROFILER_OUTPUT")
        with open(os.path.join(d, "communication.json")) as fh:
            comm = json.load(fh)
        with open(os.path.join(d, "communication_matrix.json")) as fh:
            matrix = json.load(fh)
        step_keys = {f"step{s['id']}" for s in res["ranks"][r]["steps"]}
        assert set(comm) <= step_keys and set(matrix) == set(comm)
        ops = []
        for key, st in comm.items():
            assert st["p2p"] == {} and matrix[key]["p2p"] == []
            coll = st["collective"]
            assert "Total Op Info" in coll
            for k, v in coll.items():
                if k != "Total Op Info":
                    assert k.endswith("@" + res["group"])
                    ops.append(k)
                    info = v["Communication Time Info"]
                    assert info["Idle Time(ms)"] == pytest.approx(
                        info["Elapse Time(ms)"] - info["Transit Time(ms)"] - info["Wait Time(ms)"])
            for slot, links in matrix[key]["collective"].items():
                assert slot.split("@")[0].rsplit("-", 1)[1] in ("top1", "middle", "bottom1", "bottom2", "bottom3",
                                                                "total")
                assert all(lk.split("-")[0] == str(r) for lk in links)
        assert sum(1 for _ in ops) == res["ranks"][r]["hccl_ops"]
        names.append(sorted(ops))
    assert names[0] == names[1], "collective op names match across ranks"


def test_deterministic_and_formats(tmp_path):
    kw = dict(ranks=1, steps=2, ops_per_step=60, seed=11)
    a = generate_run(str(tmp_path / "a"), **kw)
    b = generate_run(str(tmp_path / "b"), **kw)
    assert a["ranks"][0]["files"] == b["ranks"][0]["files"]
    for rel in a["ranks"][0]["files"]:
        with open(tmp_path / "a" / "rank0_ascend_pt" / rel, "rb") as fa, \
                open(tmp_path / "b" / "rank0_ascend_pt" / rel, "rb") as fb:
            assert fa.read() == fb.read(), rel
    for fmt in ("object", "gz"):
        res = generate_run(str(tmp_path / fmt), trace_format=fmt, **kw)
        truth = res["ranks"][0]
        assert truth["trace_file"] == ("trace_view.json.gz" if fmt == "gz" else "trace_view.json")
        check_rank(str(tmp_path / fmt / "rank0_ascend_pt"), truth)
        assert truth["x_events"] == a["ranks"][0]["x_events"]


def test_options_off(tmp_path):
    res = generate_run(str(tmp_path), ranks=1, steps=2, ops_per_step=80, seed=5, overlap_lane=False,
                       cann_lane=False, hccl=False, streams=1)
    truth = res["ranks"][0]
    ev, rows = check_rank(str(tmp_path / "rank0_ascend_pt"), truth)
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"Python", "Ascend Hardware", "NPU MEM", "AI Core Freq"}
    assert truth["flows"]["HostToDevice"] == {"s": 0, "f": 0}
    files = truth["files"]
    for absent in ("communication.json", "communication_matrix.json", "step_trace_time.csv", "api_statistic.csv"):
        assert f"ASCEND_PROFILER_OUTPUT/{absent}" not in files


def test_more_streams(tmp_path):
    res = generate_run(str(tmp_path), ranks=3, steps=1, ops_per_step=150, seed=2, streams=3)
    for r, truth in enumerate(res["ranks"]):
        ev, _ = check_rank(str(tmp_path / f"rank{r}_ascend_pt"), truth)
        names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
        assert {"Stream 2", "Stream 3", "Stream 4", "Stream 5", "Plane 3"} <= names


def test_cli(tmp_path, capsys):
    assert main([str(tmp_path), "--ranks", "1", "--steps", "1", "--ops-per-step", "40", "--format", "object"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ranks"][0]["trace_file"] == "trace_view.json"
    assert res["timing"]["events_per_s"] > 0
