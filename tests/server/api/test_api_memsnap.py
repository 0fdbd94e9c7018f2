"""/api/runs/{id}/memory/snapshot/…: every figure the views show equals the simulated allocator's own record
(``sample_data.memsnap``), the runs ingested as the server ingests them (tests/memsnap_sample.py)."""

from __future__ import annotations

import pytest

from tests.memsnap_sample import memsnap_store

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data = tmp_path_factory.mktemp("memsnap-data")
    ids, truths = memsnap_store(data, tmp_path_factory.mktemp("memsnap-work"))
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data)))) as client:
        yield client, ids, truths


def get(client, run_id, path="", status=200, **params):
    resp = client.get(f"/api/runs/{run_id}/memory/snapshot{path}", params=params)
    assert resp.status_code == status, resp.text
    return resp.json()


def stack_key(frames: list[dict]) -> tuple | None:
    return tuple((f["filename"], f["line"], f["name"]) for f in frames) if frames else None


CASES = ["cuda", "npu", "npu_notime", "cuda_expandable", "npu_expandable"]


@pytest.mark.parametrize("name", CASES)
def test_overview_peak_and_what_was_live_at_it(served, name):
    client, ids, truths = served
    truth = truths[name]
    for device in sorted(truth.devices):
        out = get(client, ids[name], device=device)
        dev = next(d for d in out["devices"] if d["device"] == device)
        peak, at = truth.peak(device)
        assert (out["peak"]["bytes"], out["peak"]["idx"]) == (peak, at) == (dev["peak_active"], dev["peak_idx"])
        assert out["axis"] == ("index" if name == "npu_notime" else "ns")
        live = {}
        for b in truth.live_at(device, -1 if at is None else at, allocated_only=True):
            n, total = live.get(b["stack"], (0, 0))
            live[b["stack"]] = (n + 1, total + b["requested"])
        top = out["peak"]["top"]
        frames = get(client, ids[name], "/stacks", stack_id=[t["stack_id"] for t in top if t["stack_id"] is not None])
        got = {stack_key(frames["frames"].get(str(t["stack_id"]), [])): (t["blocks"], t["bytes"]) for t in top}
        assert got == dict(sorted(live.items(), key=lambda kv: -kv[1][1])[:len(got)]) or got == live


@pytest.mark.parametrize("name", CASES)
def test_state_at_entries(served, name):
    client, ids, truths = served
    truth = truths[name]
    for device in sorted(truth.devices):
        n = truth.entries(device)
        for k in sorted({-1, 0, 1, n // 7, n // 3, n // 2, 2 * n // 3, n - 2, n - 1}):
            out = get(client, ids[name], "/state", device=device, at_idx=k)
            want = truth.state_at(device, k)
            t = out["totals"]
            assert out["idx"] == k
            assert (t["reserved"], t["blocks"], t["allocated"], t["active"], t["allocated_requested"],
                    t["active_requested"], t["largest_free"]) == (
                want["reserved"], want["blocks"], want["allocated_bytes"], want["active_bytes"],
                want["allocated_requested"], want["active_requested"], want["largest_free"]), (k, t, want)
            assert t["outside_segments"] == 0
            assert sum(p["reserved"] for p in out["pools"]) == t["reserved"]


@pytest.mark.parametrize("name", CASES)
def test_state_at_the_dump_equals_the_segments_totals(served, name):
    client, ids, truths = served
    for device in sorted(truths[name].devices):
        t = get(client, ids[name], "/state", device=device)["totals"]
        dump = truths[name].dump_totals(device)
        assert (t["reserved"], t["allocated"], t["active"]) == (dump["total_size"], dump["allocated_size"],
                                                                dump["active_size"])


@pytest.mark.parametrize("name", ["cuda", "npu"])
def test_state_asked_by_time(served, name):
    client, ids, truths = served
    truth = truths[name]
    origin = int(get(client, ids[name])["origin_ns"])
    ts = truth.ts_ns(0)
    for k in (truth.head(0) + 5, len(ts) // 2, len(ts) - 1):  # (the workspace head has no time of its own)
        last = max(i for i, t in enumerate(ts) if t is not None and t <= ts[k])  # sharing a µs: after the last
        out = get(client, ids[name], "/state", device=0, at_ns=ts[k])
        assert out["idx"] == last and out["x"] == ts[last] - origin
        assert out["totals"]["active_requested"] == truth.state_at(0, last)["active_requested"]


@pytest.mark.parametrize("name", CASES)
def test_leaks_in_intervals(served, name):
    client, ids, truths = served
    truth = truths[name]
    for device in sorted(truth.devices):
        n = truth.entries(device)
        for i0, i1 in ((0, n), (n // 4, n // 2), (n // 2, n), (n // 3, n // 3 + 40)):
            out = get(client, ids[name], "/leaks", device=device, start_idx=i0, end_idx=i1, limit=500)
            want = truth.leaks(device, i0, i1)
            got = {stack_key(g["frames"]): (g["blocks"], g["bytes"]) for g in out["groups"]}
            assert got == want, (i0, i1)
            assert out["blocks"] == sum(c for c, _ in want.values()) and not out["truncated"]


def test_leaks_asked_by_time_find_the_leaking_cache(served):
    client, ids, truths = served
    truth = truths["cuda"]
    ts = truth.ts_ns(0)
    n = len(ts)
    out = get(client, ids["cuda"], "/leaks", device=0, start_ns=ts[n // 4], end_ns=ts[3 * n // 4])
    i0 = min(i for i, t in enumerate(ts) if t is not None and t >= ts[n // 4])
    i1 = min(i for i, t in enumerate(ts) if t is not None and t >= ts[3 * n // 4])
    assert {stack_key(g["frames"]): (g["blocks"], g["bytes"]) for g in out["groups"]} == truth.leaks(0, i0, i1)
    assert any(g["label"].startswith("leaky_cache") for g in out["groups"])


@pytest.mark.parametrize("name", CASES)
def test_ooms(served, name):
    client, ids, truths = served
    truth = truths[name]
    for device in sorted(truth.devices):
        got = get(client, ids[name], "/ooms", device=device)["ooms"]
        want = truth.ooms(device)
        assert [(o["idx"], o["requested"], o["device_free"]) for o in got] == \
            [(o["idx"], o["size"], o["device_free"]) for o in want]
        for g, w in zip(got, want):
            assert (g["totals"]["reserved"], g["totals"]["allocated_requested"]) == (
                w["state"]["reserved"], w["state"]["allocated_requested"])
            assert sum(t["bytes"] for t in g["top"]) <= w["state"]["allocated_requested"]


def _buckets(truth, device, lo, hi, n, xs):
    """min / max of active memory per bucket, from the truth's values after each entry."""
    values = truth.curve(device)["active"][1:]
    out = {}
    for x, v in zip(xs, values):
        if x is not None and lo <= x <= hi:
            b = (x - lo) * n // (hi - lo)
            mn, mx = out.get(b, (v, v))
            out[b] = (min(mn, v), max(mx, v))
    return [out[b] for b in sorted(out)]


@pytest.mark.parametrize("name", ["npu_notime", "cuda"])
def test_curve_buckets(served, name):
    client, ids, truths = served
    truth = truths[name]
    n = truth.entries(0)
    if name == "npu_notime":
        xs, params = list(range(n)), {"start_idx": 10, "end_idx": n - 10}
        lo, hi = 10, n - 10
    else:
        ts = truth.ts_ns(0)
        xs, params = ts, {"start_ns": ts[10], "end_ns": ts[-10]}
        assert None not in ts
        lo, hi = ts[10], ts[-10]
    out = get(client, ids[name], "/curve", device=0, buckets=64, **params)
    cols = out["columns"]
    assert list(zip(cols["active_min"], cols["active_max"])) == _buckets(truth, 0, lo, hi, 64, xs)
    assert max(cols["reserved_max"]) <= max(truth.curve(0)["reserved"])


def test_wide_curves_from_the_level_of_detail_equal_the_entries(tmp_path, monkeypatch):
    """A window wider than RAW_ENTRIES reads mem_curve_lod (its edges read raw): the same buckets as the entries
    give, on the index axis and the time axis."""
    import duckdb

    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.sample_data import memsnap
    from ascendscope.server.queries import DuckRunner
    from ascendscope.server.queries import memsnap as ms
    from ascendscope.server.queries import memsnap_curve as mc

    for time_us in (False, True):
        path = memsnap.write(tmp_path / f"long{time_us}.pickle", memsnap.simulate("npu", steps=1000, seed=6,
                                                                                   time_us=time_us))
        ingest_path(path, tmp_path / f"long{time_us}.duckdb")
        con = duckdb.connect(str(tmp_path / f"long{time_us}.duckdb"), read_only=True)
        db = DuckRunner(con)
        rank, dev = ms.pick(db, None, None)
        ax = ms.axis_of(dev, ms.origin_of(db, rank, None))
        assert dev["entries"] > 40_000
        lo, hi = ax.first + 777, ax.last - 555
        want = mc.curve(db, ax, dev, lo, hi, 16)
        monkeypatch.setattr(mc, "RAW_ENTRIES", 64)
        monkeypatch.setattr(mc, "LOD_NARROW", 1)  # level-of-detail buckets of 1/2 to 1/3 of a bucket: many straddle
        got = mc.curve(db, ax, dev, lo, hi, 16)
        monkeypatch.undo()
        con.close()
        assert want["source"] == "entries" and got["source"].startswith("mem_curve_lod level 10")
        for key in ("active_min", "active_max", "allocated_min", "allocated_max", "reserved_min", "reserved_max",
                    "active_last", "reserved_last"):
            assert got["columns"][key] == want["columns"][key], (ax.kind, key)


@pytest.mark.parametrize("name", ["cuda", "npu_notime"])
def test_stacked_allocations(served, name):
    """The largest blocks of the window stacked as memory_viz stacks them: each block's bottom is the sum of the
    stacked blocks older than it live there; their total never tops active memory."""
    client, ids, truths = served
    out = get(client, ids[name], "/allocations", device=0, limit=60)
    blocks = out["blocks"]
    assert blocks and len(blocks) <= 60
    order = sorted(blocks, key=lambda b: (-1 if b["alloc_idx"] is None else b["alloc_idx"], b["block_id"]))
    for i, b in enumerate(order):
        for x, bottom in b["steps"]:
            below = sum(o["requested_size"] for o in order[:i] if o["x0"] <= x < o["x1"])
            assert bottom == below, (b["block_id"], x)
    curve = get(client, ids[name], "/curve", device=0, buckets=4000)["columns"]
    top = max(curve["active_max"])
    assert max(v for _, v in out["drawn_total"]) <= top
    sizes = sorted((b["requested_size"] for b in blocks), reverse=True)
    truth = truths[name]
    everything = sorted((b["requested"] for b in truth.blocks(0)), reverse=True)
    assert sizes == everything[:len(sizes)]


def test_block_details(served):
    client, ids, truths = served
    out = get(client, ids["cuda"], "/allocations", device=0, limit=5)
    b = out["blocks"][0]
    got = get(client, ids["cuda"], "/block", device=0, block_id=b["block_id"])
    want = next(t for t in truths["cuda"].blocks(0) if t["addr"] == got["addr"] and t["alloc_idx"] == got["alloc_idx"])
    assert stack_key(got["frames"]) == want["stack"] and got["requested_size"] == want["requested"]
    assert got["live_at_dump"] == (want["free_idx"] is None)


def test_errors_name_what_is_wrong(served):
    client, ids, _ = served
    assert get(client, ids["npu_notime"], "/state", status=400, at_ns=1)["error"]["code"] == "bad_time"
    assert get(client, ids["cuda"], "", status=404, rank=7)["error"]["code"] == "no_snapshot"
    assert get(client, ids["cuda"], "", status=404, device=9)["error"]["code"] == "no_device"
    assert get(client, ids["cuda"], "/block", status=404, block_id=10 ** 12)["error"]["code"] == "no_block"
