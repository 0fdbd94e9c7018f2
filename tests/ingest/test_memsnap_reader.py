"""The restricted snapshot reader (``ingest.memsnap.pickles``): it reads what ``pickle`` writes for a snapshot, in
every protocol, exactly as ``pickle.loads`` would (on our own, safe data), refuses every pickle that would run
code or build an object — through the path users take too (``ascendscope ingest`` of such a file) — and bounds
what a hostile file can make it hold."""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest

from ascendscope.ingest.memsnap import pickles
from ascendscope.sample_data import memsnap


class Collect(pickles.Handler):
    def __init__(self):
        self.segments, self.entries, self.root = [], {}, {}

    def segment(self, seg):
        self.segments.append(seg)

    def entry(self, device, e):
        self.entries.setdefault(device, []).append(e)

    def root_value(self, key, value):
        self.root[key] = value


def read_bytes(data: bytes, limits=None, fast: bool = True) -> tuple[Collect, pickles.Stacks]:
    h = Collect()
    return h, pickles.read(io.BytesIO(data), h, limits, fast=fast)


def plain(value, stacks: pickles.Stacks):
    """A value the reader gave, with its refs expanded back to the frame dicts the pickle held."""
    if isinstance(value, pickles.StackRef):
        return [dict(zip(("filename", "line", "name"), stacks.frames[f])) for f in stacks.stacks[value.id]]
    if isinstance(value, dict):
        return {k: plain(v, stacks) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, stacks) for v in value]
    return value


def by_id(value):
    """A value the reader gave, its refs as their ids (a stack is the same stack in two readings whose ``Stacks``
    are equal exactly when its id is): far cheaper to compare than ``plain``'s frame dicts."""
    if isinstance(value, (pickles.StackRef, pickles.FrameRef)):
        return type(value).__name__, value.id
    if isinstance(value, dict):
        return {k: by_id(v) for k, v in value.items()}
    if isinstance(value, list):
        return [by_id(v) for v in value]
    return value


def same_frames(frames: list[dict]) -> list[dict]:
    return [{"filename": f["filename"], "line": f["line"], "name": f["name"]} for f in frames]


def normalised(data: dict) -> dict:
    """What the reader keeps of a snapshot dict: frames reduced to (filename, line, name)."""
    def fix(d):
        out = dict(d)
        if "frames" in out:
            out["frames"] = same_frames(out["frames"])
        if "blocks" in out:
            out["blocks"] = [fix(b) for b in out["blocks"]]
        return out
    return {"segments": [fix(s) for s in data["segments"]],
            "device_traces": [[fix(e) for e in t] for t in data["device_traces"]]}


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("flavour", ["cuda", "npu"])
def test_reads_what_pickle_loads_in_every_protocol(protocol, flavour):
    snap = memsnap.simulate(flavour, devices=2, steps=6, max_entries=300, expandable=flavour == "npu")
    data = pickle.dumps(snap.data, protocol=protocol)
    h, stacks = read_bytes(data)
    want = normalised(pickle.loads(data))  # our own data: safe to unpickle
    assert [plain(s, stacks) for s in h.segments] == want["segments"]
    for device, trace in enumerate(want["device_traces"]):
        assert [plain(e, stacks) for e in h.entries.get(device, [])] == trace
    if flavour == "cuda":
        assert h.root["allocator_settings"]["expandable_segments"] is False
    slow, slow_stacks = read_bytes(data, fast=False)  # the opcode loop alone reads the same
    assert [plain(e, slow_stacks) for t in slow.entries.values() for e in t] == \
        [plain(e, stacks) for t in h.entries.values() for e in t]


@pytest.mark.parametrize("flavour", ["cuda", "npu"])
def test_the_fast_path_reads_what_the_opcode_loop_reads(tmp_path, flavour):
    """sample_data.memsnap_big writes entries in the shape the fast path takes (new frames lists of frames seen
    before, memo references, integers of every width): both ways give the same entries, stacks and memo."""
    from ascendscope.sample_data.memsnap_big import write_big

    path = tmp_path / "big.pickle"
    write_big(path, 1 << 20, flavour=flavour)
    data = path.read_bytes()
    fast, fast_stacks = read_bytes(data)
    slow, slow_stacks = read_bytes(data, fast=False)
    assert fast_stacks.stacks == slow_stacks.stacks and fast_stacks.frames == slow_stacks.frames
    assert fast.entries[0] and [by_id(e) for e in fast.entries[0]] == [by_id(e) for e in slow.entries[0]]
    want = pickle.loads(data)["device_traces"][0]  # our own data: safe to unpickle
    assert len(want) == len(fast.entries[0])
    assert [e["addr" if e["action"] != "oom" else "device_free"] for e in want] == \
        [e.get("addr", e.get("device_free")) for e in fast.entries[0]]


def test_frames_and_stacks_are_deduplicated_by_content():
    snap = memsnap.simulate("cuda", steps=4)
    h, stacks = read_bytes(pickle.dumps(snap.data))
    distinct = {tuple((f["filename"], f["line"], f["name"]) for f in e["frames"])
                for t in snap.data["device_traces"] for e in t if "frames" in e}
    distinct |= {tuple((f["filename"], f["line"], f["name"]) for f in b["frames"])
                 for s in snap.data["segments"] for b in s["blocks"]}
    distinct |= {tuple((f["filename"], f["line"], f["name"]) for f in s["frames"]) for s in snap.data["segments"]}
    assert len(stacks.stacks) == len(distinct)
    assert len(set(stacks.frames)) == len(stacks.frames)


def test_an_ordered_dict_root_and_legacy_list_of_segments():
    snap = memsnap.simulate("npu", steps=3)
    h, _ = read_bytes(pickle.dumps(OrderedDict(snap.data), protocol=2))
    assert len(h.segments) == len(snap.data["segments"])
    h, _ = read_bytes(pickle.dumps(snap.data["segments"]))  # torch 1.x: _snapshot() was the segments alone
    assert len(h.segments) == len(snap.data["segments"]) and not h.entries


class RunsCode:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Builds:
    def __init__(self):
        self.x = 1


def evil_pickles(marker: Path) -> dict[str, bytes]:
    snap = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 2, "stream": 0,
                                                 "frames": [RunsCode(marker)]}]]}
    out = {f"reduce_protocol_{p}": pickle.dumps(snap, protocol=p) for p in range(6)}
    out["build"] = pickle.dumps({"segments": [Builds()], "device_traces": []}, protocol=2)
    out["inst_protocol_0"] = b"(dp0\nVsegments\np1\n(i__builtin__\nobject\np2\ns."
    out["global_eval"] = (b"\x80\x02}q\x00(X\x08\x00\x00\x00segmentsq\x01cbuiltins\neval\nq\x02"
                          b"X\x0f\x00\x00\x00print('pwned')q\x03\x85q\x04Rq\x05u.")
    out["persid"] = b"\x80\x02}(X\x08\x00\x00\x00segmentsX\x01\x00\x00\x00xQu."
    out["ext1"] = b"\x80\x02}(X\x08\x00\x00\x00segments\x82\x01u."
    return out


def test_refuses_every_pickle_that_would_run_code(tmp_path):
    marker = tmp_path / "ran"
    for name, data in evil_pickles(marker).items():
        assert pickletools.dis is not None
        with pytest.raises(pickles.RefusedPickle, match="refused"):
            read_bytes(data)
        assert not marker.exists(), name


def test_an_allowed_global_is_only_ever_a_plain_container():
    # collections.OrderedDict called on plain data is a dict; called on something else it is refused
    data = pickle.dumps({"segments": [], "device_traces": [], "x": OrderedDict(a=1)}, protocol=2)
    h, _ = read_bytes(data)
    assert h.root["x"] == {"a": 1} and type(h.root["x"]) is dict
    bad = b"\x80\x02}(X\x08\x00\x00\x00segments]ccollections\nOrderedDict\nccollections\nOrderedDict\n\x85Ru."
    with pytest.raises(pickles.RefusedPickle):
        read_bytes(bad)


def test_the_ingest_refuses_a_code_running_snapshot_and_runs_nothing(tmp_path):
    """Through the command users run: the file is named, refused, and the marker never appears."""
    marker = tmp_path / "ran"
    src = tmp_path / "snapshot.pickle"
    src.write_bytes(evil_pickles(marker)["reduce_protocol_4"])
    script = tmp_path / "run_ingest.py"  # a script file, as a user runs a command (not python -c)
    script.write_text("import sys\nfrom ascendscope.server.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, str(script), "ingest", str(src), "--out", str(tmp_path / "run.duckdb")],
                          capture_output=True, text=True, timeout=300)
    assert not marker.exists()
    text = proc.stdout + proc.stderr
    assert "snapshot.pickle" in text and "refused" in text, text


def test_damaged_and_hostile_files_get_a_clear_error_with_the_offset():
    snap = memsnap.simulate("cuda", steps=3)
    data = pickle.dumps(snap.data)
    with pytest.raises(pickles.BadPickle, match="cut short"):
        read_bytes(data[: len(data) // 2])
    with pytest.raises(pickles.BadPickle, match="byte"):
        read_bytes(data[:200] + b"\xff" + data[201:])
    # a memo reference to something never stored
    with pytest.raises(pickles.BadPickle, match="memo index"):
        read_bytes(b"\x80\x04}(\x8c\x08segmentsj\x00\x00\x00\x10u.")
    # one string bigger than the limit: refused before it is read
    with pytest.raises(pickles.BadPickle, match="MB"):
        read_bytes(b"\x80\x04}(\x8c\x08segments\x8d" + (1 << 40).to_bytes(8, "little") + b"xx",
                   pickles.Limits(value_bytes=1 << 20))
    # a flood of values that is not a snapshot's structure
    flood = b"\x80\x04}(\x8c\x08segments(" + b"]" * 200_000 + b"e" + b"u."
    with pytest.raises(pickles.BadPickle, match="values on the stack"):
        read_bytes(flood, pickles.Limits(stack_items=100_000))
    # nesting too deep
    with pytest.raises(pickles.BadPickle, match="nested"):
        read_bytes(b"\x80\x04" + b"(" * 300, pickles.Limits(depth=256))
    # not a snapshot at all
    with pytest.raises(pickles.BadPickle, match="not a memory snapshot"):
        read_bytes(pickle.dumps({"a": 1}))


def test_a_pickle_that_refers_back_to_a_streamed_entry_is_refused():
    entry = {"action": "alloc", "addr": 1, "size": 2, "stream": 0}
    data = pickle.dumps({"segments": [], "device_traces": [[entry, entry]]})  # the same dict twice: a BINGET
    with pytest.raises(pickles.BadPickle, match="refers back to a streamed"):
        read_bytes(data)


def test_memory_held_does_not_grow_with_the_trace():
    """The memo keeps 4 bytes per memoized object and the distinct strings, frames and stacks; the entries
    themselves are handed over and dropped."""
    small = memsnap.simulate("npu", steps=8, seed=9)
    big = memsnap.simulate("npu", steps=64, seed=9)
    kept = []
    for snap in (small, big):
        r = pickles._Reader(io.BytesIO(pickle.dumps(snap.data)), pickles.Handler(), pickles.Limits())
        r.run()
        kept.append((len(r.vals), r.memo.itemsize, sum(len(t) for t in snap.data["device_traces"])))
    assert kept[0][1] == kept[1][1] == 4
    # the values kept are the distinct strings, frames and stacks: 8 times the entries add a few (the sites used
    # only in later steps), not one per entry or segment
    assert kept[1][2] > 6 * kept[0][2] and kept[1][0] - kept[0][0] < kept[0][2] // 20
