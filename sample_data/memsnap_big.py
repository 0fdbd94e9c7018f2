"""Memory snapshots of any size (100 MB … tens of GB) for the benchmark, written as a stream of pickle opcodes.

``write_big(path, target_bytes)`` writes what ``pickle.dump`` writes for a snapshot dict (protocol 4: 64 KiB
frames, every string, dict and list memoized, shared frames and frame lists referred back to, batches of 1,000
items), without ever holding the snapshot: the program is regular enough that its state at the dump is known before
its trace is written (``segments`` come first in the file, as torch writes them). Device 0 runs steps of
``LAYERS`` activations, each allocated in its slot of an activation segment and freed in reverse (a free request,
then its completion), on weights allocated before recording began; a leaking cache grows by a block per step for
the first ``LEAKS`` steps; every ``SCRATCH_EVERY`` steps a scratch segment is allocated, used and released; one OOM.
Frames: ``LAYERS`` call sites of 12–40 Python frames, a new frames list per entry for ``NEW_LISTS`` of them (a new
traceback, as torch writes one per recorded context) and the site's shared list otherwise, so an entry is ~40-260
bytes, like the real snapshots of tests/corpus. ``tests/sample_data/test_memsnap_big.py`` checks that ``pickle``
reads it back to the dict it stands for, and that its figures are the ones returned.
"""

from __future__ import annotations

import pickle
import random
import struct
from pathlib import Path

MB = 1 << 20
FRAME_BYTES = 64 << 10
BATCH = 1000
LAYERS = 24
SLOT = 64 * MB
WEIGHTS = 16
LEAKS = 512
LEAK_SLOT = MB
SCRATCH_EVERY = 50
OOM_STEP = 1000
NEW_LISTS = 0.6
STREAM = 0x5B7A6C40
EPOCH_US = 1_767_225_600_000_000
BASE = 0x12C000000000
SEG_WEIGHTS, SEG_ACTS, SEG_LEAKS, SEG_SCRATCH = (BASE, BASE + (1 << 32), BASE + (2 << 32), BASE + (3 << 32))


class OpcodeWriter:
    """Protocol-4 opcodes into framed output, with pickle's memo: strings by value, shared lists and dicts by
    identity; ``fresh`` containers are memoized (the index counts) but never referred back to."""

    def __init__(self, fh):
        self.fh = fh
        self.frame = bytearray()
        self.memo: dict = {}
        self.kept: list = []  # what is memoized by identity stays alive (its id may not be reused)
        self.count = 0
        self.written = 0

    def emit(self, data: bytes) -> None:
        self.frame += data
        if len(self.frame) >= FRAME_BYTES:
            self.commit()

    def commit(self) -> None:
        if self.frame:
            self.fh.write(b"\x95" + struct.pack("<Q", len(self.frame)) + self.frame)
            self.written += 9 + len(self.frame)
            self.frame = bytearray()

    def memoize(self, key=None) -> bytes:
        if key is not None:
            self.memo[key] = self.count
        self.count += 1
        return b"\x94"

    def get(self, index: int) -> bytes:
        return b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)

    def s(self, text: str) -> bytes:
        """A string: its first time defined (and memoized), then referred back to."""
        key = ("s", text)
        got = self.memo.get(key)
        if got is not None:
            return self.get(got)
        raw = text.encode("utf-8")
        head = b"\x8c" + bytes([len(raw)]) if len(raw) < 256 else b"X" + struct.pack("<I", len(raw))
        return head + raw + self.memoize(key)

    @staticmethod
    def i(value: int) -> bytes:
        if 0 <= value < 256:
            return b"K" + bytes([value])
        if 0 <= value < 65536:
            return b"M" + struct.pack("<H", value)
        if -(1 << 31) <= value < (1 << 31):
            return b"J" + struct.pack("<i", value)
        raw = pickle.encode_long(value)
        return b"\x8a" + bytes([len(raw)]) + raw

    def value(self, v) -> bytes:  # one case per type a snapshot holds
        if v is None:
            return b"N"
        if v is True:
            return b"\x88"
        if v is False:
            return b"\x89"
        if isinstance(v, int):
            return self.i(v)
        if isinstance(v, float):
            return b"G" + struct.pack(">d", v)
        if isinstance(v, str):
            return self.s(v)
        if isinstance(v, tuple):
            body = b"".join(self.value(x) for x in v)
            if not v:
                return b")"
            return body + bytes([0x84 + len(v)]) + self.memoize()
        key = ("id", id(v))
        got = self.memo.get(key)
        if got is not None:
            return self.get(got)
        self.kept.append(v)
        if isinstance(v, list):
            return b"]" + self.memoize(key) + self.items(v, b"a", b"e", lambda x: self.value(x))
        if isinstance(v, dict):
            return b"}" + self.memoize(key) + self.items(list(v.items()), b"s", b"u",
                                                         lambda kv: self.value(kv[0]) + self.value(kv[1]))
        raise TypeError(type(v))

    @staticmethod
    def items(items: list, one: bytes, many: bytes, save) -> bytes:
        out = bytearray()
        for k in range(0, len(items), BATCH):
            chunk = items[k:k + BATCH]
            if len(chunk) == 1:
                out += save(chunk[0]) + one
            else:
                out += b"(" + b"".join(save(x) for x in chunk) + many
        return bytes(out)

    def fresh_list(self, body: bytes, n: int) -> bytes:
        """A list memoized but never referred back to, of ``n`` items already encoded in ``body``."""
        self.count += 1
        if n == 0:
            return b"]\x94"
        return b"]\x94" + (body + b"a" if n == 1 else b"(" + body + b"e")


def _sites(rng: random.Random) -> list[list[dict]]:
    common = [{"name": "train", "filename": "/work/train.py", "line": 88},
              {"name": "<module>", "filename": "/work/train.py", "line": 120}]
    sites = []
    for k in range(LAYERS + 4):
        depth = rng.randint(12, 40)
        own = [{"name": f"site{k}_f{j}", "filename": f"/work/model/block{k}.py", "line": 10 + 7 * j}
               for j in range(depth - len(common))]
        sites.append(own + common)
    return sites


def write_big(path: str | Path, target_bytes: int, *, flavour: str = "npu", time_us: bool = True,
              seed: int = 0) -> dict:
    """Write a snapshot of about ``target_bytes``; returns its figures (entries, the dump's totals, leaks)."""
    rng = random.Random(seed)
    sites = _sites(rng)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb", buffering=1 << 20) as fh:
        w = OpcodeWriter(fh)
        fh.write(b"\x80\x04")
        w.emit(b"}" + w.memoize() + b"(")
        figures = _segments(w, sites)
        entries = _trace(w, sites, rng, target_bytes, flavour, time_us, figures)
        if flavour == "cuda":
            w.emit(w.s("allocator_settings") + w.value({"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                                        "expandable_segments": False}))
        w.emit(b"u.")
        w.commit()
    figures["entries"] = entries
    figures["bytes"] = path.stat().st_size
    return figures


def _segment(addr, total, blocks, frames) -> dict:
    allocated = [b for b in blocks if b["state"] == "active_allocated"]
    return {"device": 0, "address": addr, "total_size": total,
            "allocated_size": sum(b["size"] for b in allocated),
            "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
            "requested_size": sum(b["requested_size"] for b in allocated), "stream": STREAM,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames,
            "blocks": blocks}


def _segments(w: OpcodeWriter, sites: list[list[dict]]) -> dict:
    """The dump's segments: the weights (allocated before recording), the activations' (all free again), the leaks'
    (its first LEAKS blocks live)."""
    empty: list = []
    weights = [{"address": SEG_WEIGHTS + k * SLOT, "size": SLOT, "requested_size": SLOT - 4096,
                "state": "active_allocated", "frames": sites[LAYERS]} for k in range(WEIGHTS)]
    leak_blocks = [{"address": SEG_LEAKS + k * LEAK_SLOT, "size": LEAK_SLOT, "requested_size": LEAK_SLOT - 1000,
                    "state": "active_allocated", "frames": sites[LAYERS + 1]} for k in range(LEAKS)]
    leak_total = 2 * LEAKS * LEAK_SLOT
    leak_blocks.append({"address": SEG_LEAKS + LEAKS * LEAK_SLOT, "size": leak_total - LEAKS * LEAK_SLOT,
                        "requested_size": 0, "state": "inactive", "frames": empty})
    acts = [{"address": SEG_ACTS, "size": LAYERS * SLOT, "requested_size": 0, "state": "inactive", "frames": empty}]
    segs = [_segment(SEG_WEIGHTS, WEIGHTS * SLOT, weights, sites[LAYERS + 2]),
            _segment(SEG_ACTS, LAYERS * SLOT, acts, sites[LAYERS + 2]),
            _segment(SEG_LEAKS, leak_total, leak_blocks, sites[LAYERS + 2])]
    w.emit(w.s("segments") + w.value(segs))
    return {"reserved_at_dump": sum(s["total_size"] for s in segs),
            "allocated_at_dump": sum(s["allocated_size"] for s in segs),
            "active_at_dump": sum(s["active_size"] for s in segs), "leaks": LEAKS,
            "leak_bytes": LEAKS * (LEAK_SLOT - 1000), "blocks_live_at_dump": WEIGHTS + LEAKS}


def _trace(w, sites, rng, target_bytes, flavour, time_us, figures) -> int:
    w.emit(w.s("device_traces") + b"]" + w.memoize() + b"]" + w.memoize())  # device_traces, and device 0's list
    clock = EPOCH_US
    batch: list[bytes] = []
    entries = 0
    refs: dict[int, bytes] = {}  # a site's frame dicts referred to, once its shared list has been written

    def entry(action: str, addr: int, size: int, site: int, extra: bytes = b"") -> None:
        nonlocal clock, entries
        clock += rng.randint(0, 3)
        w.count += 1  # the entry's dict (then its contents, memoized in the order they are written)
        body = (w.s("action") + w.s(action) + (w.s("device_free") if action == "oom" else w.s("addr")) + w.i(addr)
                + w.s("size") + w.i(size) + w.s("stream") + w.i(STREAM))
        if flavour == "cuda":
            body += w.s("compile_context") + w.s("") + w.s("user_metadata") + w.s("")
        if time_us:
            body += w.s("time_us") + w.i(clock)
        body += extra + w.s("frames")
        if site in refs and rng.random() < NEW_LISTS:
            frames = w.fresh_list(refs[site], len(sites[site]))
        else:  # the site's shared list (written in full the first time: its frame dicts with it)
            frames = w.value(sites[site])
        batch.append(b"}\x94(" + body + frames + b"u")
        if site not in refs:
            refs[site] = b"".join(w.value(f) for f in sites[site])
        entries += 1
        if len(batch) == BATCH:
            flush()

    def flush() -> None:
        if len(batch) == 1:
            w.emit(batch[0] + b"a")
        elif batch:
            w.emit(b"(" + b"".join(batch) + b"e")
        batch.clear()

    step = 0
    scratch = 0
    while w.written + len(w.frame) < target_bytes or step <= OOM_STEP:
        sizes = [SLOT // 2 + ((step * 7919 + i * 104729) % (SLOT // 2)) for i in range(LAYERS)]
        for i in range(LAYERS):
            entry("alloc", SEG_ACTS + i * SLOT, sizes[i], i)
        if step < LEAKS:
            entry("alloc", SEG_LEAKS + step * LEAK_SLOT, LEAK_SLOT - 1000, LAYERS + 1)
        if step == OOM_STEP:
            entry("oom", 80 * MB, 64 << 30, LAYERS + 3)
        for i in reversed(range(LAYERS)):
            entry("free_requested", SEG_ACTS + i * SLOT, sizes[i], i)
            entry("free_completed", SEG_ACTS + i * SLOT, sizes[i], i)
        if step % SCRATCH_EVERY == 0:
            addr = SEG_SCRATCH + scratch * 2 * MB
            scratch += 1
            entry("segment_alloc", addr, 2 * MB, LAYERS + 2)
            entry("alloc", addr, 4096, LAYERS + 3)
            entry("free_requested", addr, 4096, LAYERS + 3)
            entry("free_completed", addr, 4096, LAYERS + 3)
            entry("segment_free", addr, 2 * MB, LAYERS + 2)
        step += 1
    flush()
    w.emit(b"a")  # device 0's trace into device_traces
    figures["steps"] = step
    return entries


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ascendscope.sample_data.memsnap_big",
                                 description="Write a memory snapshot pickle of about --mb MB, as a stream.")
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--flavour", choices=("npu", "cuda"), default="npu")
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args(argv)
    figures = write_big(args.out, int(args.mb * MB), flavour=args.flavour, time_us=not args.no_time)
    print(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

