"""Memory snapshots whose every figure is known by construction (``_dump_snapshot``'s pickle, CUDA or torch_npu).

``simulate(...)`` runs a small caching allocator over a training-like program and records what it does the way
PyTorch's allocator does (docs/formats.md, "Memory snapshots"): per device a trace of ``alloc`` /
``free_requested`` / ``free_completed`` (one free per step left pending, as ``record_stream`` does, completed a few
entries later), ``segment_alloc`` / ``segment_free`` (``segment_map`` / ``segment_unmap`` with expandable segments),
one ``snapshot``, one ``oom``, ``time_us`` on every entry; and the state at the dump (segments and their blocks,
rounded as the allocator rounds). The program: weights allocated first and never freed, activations allocated by
the forward of each step and freed by its backward, an optimizer temporary, a leaking cache that grows in the
steps ``leak_steps`` (never freed), ``empty_cache()`` in one step. The trace is a ring buffer of ``max_entries``:
the dump keeps only the last ones, so history starts mid-run, as on a real job.

``Snapshot.data`` is the snapshot dict (frame dicts and lists shared as torch shares them, so the pickle refers
back to them); :class:`Truth` holds the allocator's own record (every block and segment life, the totals after
each entry) and answers each question the views ask (state at an entry, leaks in [i0, i1), the peak, the OOM)
from that record alone. ``write(path, snapshot)`` pickles it (``pickle.dump``); ``sample_data.memsnap_pickle``
writes big ones without holding them.

Flavours: ``cuda`` (torch 2.5+: ``compile_context``, ``user_metadata``, ``time_us``, ``allocator_settings``,
blocks ``active_pending_free``); ``npu`` (torch_npu: ``action, addr, size, stream, frames``, the allocator's
rounding of ``size + 32`` up to 512, and a ``workspace_snapshot`` / ``segment_alloc`` / ``alloc`` triple at the
head of each trace for each workspace pool, whose segment the dump lists with one inactive block).
"""

from __future__ import annotations

import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path

MB = 1 << 20
PAGE = 2 * MB  # segment granularity (and an expandable segment's mapping unit)
SMALL_REQUEST = MB  # requests up to this come from the small pool's 2 MB segments
LARGE_SEGMENT = 20 * MB
EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
DEVICE_BYTES = 64 << 30
BASE_ADDR = 0x12C000000000


def round_size(flavour: str, requested: int) -> int:
    """The block size the allocator carves for a request (CUDA: up to a multiple of 512; torch_npu: the request
    plus 32 bytes, up to a multiple of 512)."""
    n = requested + 32 if flavour == "npu" else requested
    return max(512, -(-n // 512) * 512)


@dataclass
class Life:
    """One block from its alloc to its free, in the device's full trace (entry numbers before the ring buffer)."""

    device: int
    addr: int
    size: int
    requested: int
    stream: int
    site: int
    alloc: int  # entry number of its alloc (-1: allocated before recording began)
    free_requested: int | None = None
    free: int | None = None


@dataclass
class SegLife:
    device: int
    addr: int
    size: int
    stream: int
    start: int  # entry number of its segment_alloc / segment_map (-1: before recording)
    end: int | None = None
    expandable: bool = False
    workspace: bool = False


@dataclass
class Device:
    index: int
    entries: list = field(default_factory=list)  # full trace: dicts
    active: list = field(default_factory=list)  # requested bytes active (allocated or pending) after each entry
    allocated: list = field(default_factory=list)  # requested bytes allocated after each entry
    reserved: list = field(default_factory=list)  # bytes reserved after each entry
    lives: list[Life] = field(default_factory=list)
    segs: list[SegLife] = field(default_factory=list)
    live: dict = field(default_factory=dict)  # addr -> Life (allocated or pending)
    kept: int = 0  # the ring buffer's last entries, kept in the dump
    start_active: int = 0  # the totals before the first entry of the full trace
    start_allocated: int = 0
    start_reserved: int = 0
    segments: list = field(default_factory=list)  # the dump's segments (dicts)


class _Allocator:
    """First fit in the segments of one stream and pool; a new segment (or a mapped page range) when none fits."""

    def __init__(self, sim: Simulation, dev: Device):
        self.sim, self.dev = sim, dev
        self.segs: list[dict] = []  # open segments: addr, size, stream, pool, blocks (sorted [addr, Life])
        self.next_addr = BASE_ADDR + dev.index * (1 << 40)
        self.expandable_base: dict[tuple, int] = {}

    def place(self, stream: int, size: int, at: int) -> int:
        pool = "small" if size <= SMALL_REQUEST else "large"
        for seg in self.segs:
            if seg["stream"] != stream or seg["pool"] != pool:
                continue
            cursor = seg["addr"]
            for i, (baddr, life) in enumerate(seg["blocks"] + [(seg["addr"] + seg["size"], None)]):
                if baddr - cursor >= size:
                    seg["blocks"].insert(i, (cursor, None))
                    return cursor
                if life is not None:
                    cursor = baddr + life.size
        return self._grow(stream, pool, size, at)

    def _grow(self, stream: int, pool: str, size: int, at: int) -> int:
        if self.sim.expandable:
            key = (stream, pool)
            seg = next((s for s in self.segs if s["stream"] == stream and s["pool"] == pool), None)
            if seg is None:
                base = self.expandable_base.setdefault(key, self.next_addr)
                self.next_addr += 1 << 36
                seg = {"addr": base, "size": 0, "stream": stream, "pool": pool, "blocks": [], "expandable": True}
                self.segs.append(seg)
            end_used = seg["blocks"][-1][0] + seg["blocks"][-1][1].size if seg["blocks"] else seg["addr"]
            need = -(-(end_used + size - (seg["addr"] + seg["size"])) // PAGE) * PAGE
            map_addr = seg["addr"] + seg["size"]
            seg["size"] += need
            self.sim.emit(self.dev, "segment_map", map_addr, need, stream, self.sim.site_frames(0))
            self.dev.segs.append(SegLife(self.dev.index, map_addr, need, stream, at, expandable=True))
            seg["blocks"].append((end_used, None))
            return end_used
        seg_size = PAGE if pool == "small" else max(LARGE_SEGMENT, -(-size // PAGE) * PAGE)
        addr = self.next_addr
        self.next_addr += seg_size
        seg = {"addr": addr, "size": seg_size, "stream": stream, "pool": pool, "blocks": [(addr, None)],
               "expandable": False}
        self.segs.append(seg)
        self.segs.sort(key=lambda s: s["addr"])
        self.sim.emit(self.dev, "segment_alloc", addr, seg_size, stream, self.sim.site_frames(0))
        self.dev.segs.append(SegLife(self.dev.index, addr, seg_size, stream, at))
        return addr

    def bind(self, addr: int, life: Life) -> None:
        for seg in self.segs:
            if seg["addr"] <= addr < seg["addr"] + seg["size"]:
                i = next(i for i, (a, lf) in enumerate(seg["blocks"]) if a == addr and lf is None)
                seg["blocks"][i] = (addr, life)
                return
        raise AssertionError("a block outside every segment")

    def release(self, life: Life) -> None:
        for seg in self.segs:
            if seg["addr"] <= life.addr < seg["addr"] + seg["size"]:
                seg["blocks"] = [(a, lf) for a, lf in seg["blocks"] if lf is not life]
                return

    def empty_cache(self) -> None:
        """Return what holds no block: whole segments, or an expandable segment's free pages at its end."""
        keep = []
        for seg in self.segs:
            live = [b for b in seg["blocks"] if b[1] is not None]
            if seg["expandable"]:
                used_end = max((a + lf.size for a, lf in live), default=seg["addr"])
                new_size = -(-(used_end - seg["addr"]) // PAGE) * PAGE
                if new_size < seg["size"]:
                    self._unmap(seg, new_size)
                keep.append(seg)
            elif live:
                keep.append(seg)
            else:
                self.sim.emit(self.dev, "segment_free", seg["addr"], seg["size"], seg["stream"],
                              self.sim.site_frames(0))
                self._end_seg(seg["addr"], seg["addr"] + seg["size"])
        self.segs = keep

    def _unmap(self, seg: dict, new_size: int) -> None:
        lo, hi = seg["addr"] + new_size, seg["addr"] + seg["size"]
        self.sim.emit(self.dev, "segment_unmap", lo, hi - lo, seg["stream"], self.sim.site_frames(0))
        self._end_seg(lo, hi)
        seg["size"] = new_size

    def _end_seg(self, lo: int, hi: int) -> None:
        """Close the segment lives inside [lo, hi) (an unmap may cover several maps, or part of one)."""
        at = len(self.dev.entries) - 1
        for s in list(self.dev.segs):
            if s.end is not None or s.addr + s.size <= lo or s.addr >= hi:
                continue
            if s.addr < lo:  # the part below stays mapped: a life of its own from the same start
                self.dev.segs.append(SegLife(s.device, s.addr, lo - s.addr, s.stream, s.start, expandable=True))
                s.size -= lo - s.addr
                s.addr = lo
            if s.addr + s.size > hi:
                self.dev.segs.append(SegLife(s.device, hi, s.addr + s.size - hi, s.stream, s.start, expandable=True))
                s.size = hi - s.addr
            s.end = at


class Simulation:
    def __init__(self, flavour: str = "cuda", *, devices: int = 1, steps: int = 24, layers: int = 12,
                 seed: int = 0, time_us: bool = True, expandable: bool = False, max_entries: int | None = None,
                 leak_steps: tuple[int, int] = (8, 14), oom_step: int = 18, empty_cache_step: int = 12,
                 snapshot_step: int = 10, workspaces: int = 2, stack_depth: tuple[int, int] = (4, 14),
                 shared_lists: float = 0.5, epoch_us: int = EPOCH_US):
        if flavour not in ("cuda", "npu"):
            raise ValueError(f"flavour is cuda or npu, not {flavour!r}")
        self.flavour, self.rng, self.time_us, self.expandable = flavour, random.Random(seed), time_us, expandable
        self.steps, self.layers = steps, layers
        self.leak_steps, self.oom_step = leak_steps, oom_step
        self.empty_cache_step, self.snapshot_step = empty_cache_step, snapshot_step
        self.workspaces = workspaces if flavour == "npu" else 0
        self.shared_lists = shared_lists
        self.streams = [0x5B7A_6C40 + 0x1000 * i for i in range(2)] if flavour == "npu" else [0, 0x7F3E_2000_1000]
        self.clock_us = self.epoch_us = epoch_us
        self.devices = [Device(d) for d in range(devices)]
        self.max_entries = max_entries
        self.sites, self.site_names = self._make_sites(stack_depth)
        self.empty_frames: list = []

    # ---- stacks ------------------------------------------------------------------------------------------------
    def _make_sites(self, depth: tuple[int, int]) -> tuple[list[list[dict]], list[str]]:
        """Call sites: a frames list each (innermost first), sharing frame dicts where they share callers."""
        common = [{"name": "train", "filename": "/work/train.py", "line": 88},
                  {"name": "<module>", "filename": "/work/train.py", "line": 120}]
        names = ["segment", "weights", "leaky_cache", "optimizer_tmp"]
        names += [f"layer{i}_forward" for i in range(self.layers)] + ["small_tmp", "free_path"]
        sites = []
        for k, name in enumerate(names):
            deep = self.rng.randint(*depth)
            own = [{"name": name if j == 0 else f"{name}_helper{j}", "filename": f"/work/model/{name}.py",
                    "line": 10 + 7 * j + k} for j in range(max(1, deep - len(common)))]
            sites.append(own + common)
        return sites, names

    def site_frames(self, site: int) -> list[dict]:
        """The frames of a site: its shared list, or a new list of the same frame dicts (a new traceback)."""
        base = self.sites[site]
        return base if self.rng.random() < self.shared_lists else list(base)

    def site(self, name: str) -> int:
        return self.site_names.index(name)

    # ---- entries -----------------------------------------------------------------------------------------------
    def emit(self, dev: Device, action: str, addr: int, size: int, stream: int, frames: list | None,
             device_free: int | None = None) -> None:
        self.clock_us += self.rng.randint(0, 5)
        e = {"action": action}
        if action == "oom":
            e["device_free"] = device_free
        else:
            e["addr"] = addr
        e["size"] = size
        e["stream"] = stream
        if self.flavour == "cuda":
            e["compile_context"] = ""
            e["user_metadata"] = ""
        if self.time_us:
            e["time_us"] = self.clock_us
        if frames is not None:
            e["frames"] = frames
        dev.entries.append(e)
        last = (dev.active[-1], dev.allocated[-1], dev.reserved[-1]) if dev.active else (
            dev.start_active, dev.start_allocated, dev.start_reserved)
        active, allocated, reserved = last
        if action == "alloc":
            active, allocated = active + size, allocated + size
        elif action == "free_requested":
            allocated -= size
        elif action == "free_completed":
            active -= size
        elif action in ("segment_alloc", "segment_map"):
            reserved += size
        elif action in ("segment_free", "segment_unmap"):
            reserved -= size
        dev.active.append(active)
        dev.allocated.append(allocated)
        dev.reserved.append(reserved)

    def alloc(self, dev: Device, alloc: _Allocator, site: int, requested: int, stream: int) -> Life:
        size = round_size(self.flavour, requested)
        addr = alloc.place(stream, size, len(dev.entries))
        frames = self.site_frames(site)
        self.emit(dev, "alloc", addr, requested, stream, frames)
        life = Life(dev.index, addr, size, requested, stream, site, len(dev.entries) - 1)
        life.frames = frames
        alloc.bind(addr, life)
        dev.lives.append(life)
        dev.live[addr] = life
        return life

    def free(self, dev: Device, alloc: _Allocator, life: Life, *, complete: bool = True) -> None:
        frames = life.frames if self.flavour == "cuda" else self.site_frames(self.site("free_path"))
        self.emit(dev, "free_requested", life.addr, life.requested, life.stream, frames)
        life.free_requested = len(dev.entries) - 1
        if complete:
            self.complete(dev, alloc, life, frames)

    def complete(self, dev: Device, alloc: _Allocator, life: Life, frames=None) -> None:
        self.emit(dev, "free_completed", life.addr, life.requested, life.stream, frames or life.frames)
        life.free = len(dev.entries) - 1
        alloc.release(life)
        del dev.live[life.addr]

    # ---- the program -------------------------------------------------------------------------------------------
    def run(self) -> Snapshot:
        for dev in self.devices:
            self._run_device(dev)
        return self._dump()

    def _run_device(self, dev: Device) -> None:
        rng = self.rng
        alloc = _Allocator(self, dev)
        s0, s1 = self.streams
        for _ in range(6):
            self.alloc(dev, alloc, self.site("weights"), rng.choice([3 * MB + 4096, 12 * MB, 700_000]), s0)
        pending: list = []
        for step in range(self.steps):
            acts = []
            for layer in range(self.layers):
                acts.append(self.alloc(dev, alloc, self.site(f"layer{layer}_forward"),
                                       rng.choice([256, 4096, 65_536, 900_000, 2 * MB + 512, 6 * MB]), s0))
                if rng.random() < 0.3:
                    acts.append(self.alloc(dev, alloc, self.site("small_tmp"), rng.randint(1, 200_000), s1))
            if self.leak_steps[0] <= step < self.leak_steps[1]:
                self.alloc(dev, alloc, self.site("leaky_cache"), 1_500_000 + 1000 * step, s0)
            if step == self.snapshot_step:
                total = sum(lf.size for lf in dev.live.values())
                self.emit(dev, "snapshot", 0, total, 0, None)
            if step == self.oom_step:
                reserved = dev.reserved[-1] if dev.reserved else dev.start_reserved
                self.emit(dev, "oom", 0, DEVICE_BYTES, s0, self.site_frames(self.site("optimizer_tmp")),
                          device_free=DEVICE_BYTES - reserved - 3 * MB)
            for life in pending:
                self.complete(dev, alloc, life)
            pending = []
            for i, life in enumerate(reversed(acts)):
                delayed = i == 1  # one free per step waits for another stream (record_stream)
                self.free(dev, alloc, life, complete=not delayed)
                if delayed:
                    pending.append(life)
            tmp = self.alloc(dev, alloc, self.site("optimizer_tmp"), 4 * MB, s1)
            self.free(dev, alloc, tmp)
            if step == self.empty_cache_step:
                alloc.empty_cache()
        if pending:  # the last step's delayed free is still pending at the dump
            pass
        dev.allocator = alloc

    # ---- the dump ----------------------------------------------------------------------------------------------
    def _dump(self) -> Snapshot:
        for dev in self.devices:
            n = len(dev.entries)
            dev.kept = n if self.max_entries is None else min(n, self.max_entries)
            self._segments(dev)
        traces = []
        for dev in self.devices:
            head = self._workspace_head(dev)
            traces.append(head + dev.entries[len(dev.entries) - dev.kept:])
        data = {"segments": [s for dev in self.devices for s in dev.segments], "device_traces": traces}
        if self.flavour == "cuda":
            data["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if self.expandable
                                          else "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                                          "expandable_segments": self.expandable, "roundup_power2_divisions": {}}
            data["external_annotations"] = [{"name": "step", "stage": "START", "device": 0,
                                             "time_us": self.epoch_us + 10}]
        return Snapshot(self, data)

    def _segments(self, dev: Device) -> None:
        for seg in sorted(dev.allocator.segs, key=lambda s: s["addr"]):
            if seg["size"] == 0:
                continue
            blocks, cursor = [], seg["addr"]
            live = [(a, lf) for a, lf in seg["blocks"] if lf is not None]
            for a, lf in live + [(seg["addr"] + seg["size"], None)]:
                if a > cursor:
                    blocks.append({"address": cursor, "size": a - cursor, "requested_size": 0, "state": "inactive",
                                   "frames": self.empty_frames})
                if lf is None:
                    break
                state = "active_allocated" if lf.free_requested is None else "active_pending_free"
                frames = lf.frames if self.flavour == "cuda" or lf.site % 2 else self.empty_frames
                blocks.append({"address": a, "size": lf.size, "requested_size": lf.requested, "state": state,
                               "frames": frames})
                cursor = a + lf.size
            allocated = [b for b in blocks if b["state"] == "active_allocated"]
            dev.segments.append({
                "device": dev.index, "address": seg["addr"], "total_size": seg["size"],
                "allocated_size": sum(b["size"] for b in allocated),
                "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
                "requested_size": sum(b["requested_size"] for b in allocated), "stream": seg["stream"],
                "segment_type": seg["pool"], "segment_pool_id": (0, 0), "is_expandable": seg["expandable"],
                "frames": self.sites[0], "blocks": blocks})
        for w in range(self.workspaces):
            addr = BASE_ADDR + dev.index * (1 << 40) + (1 << 39) + w * (1 << 30)
            size = (w + 1) * 8 * MB
            dev.segments.append({
                "device": dev.index, "address": addr, "total_size": size, "allocated_size": 0, "active_size": 0,
                "requested_size": 0, "stream": self.streams[w % 2], "segment_type": "large",
                "segment_pool_id": (0, 0), "is_expandable": False, "frames": self.empty_frames,
                "blocks": [{"address": addr, "size": size, "requested_size": size, "state": "inactive",
                            "frames": self.empty_frames}]})
            dev.segs.append(SegLife(dev.index, addr, size, self.streams[w % 2], -1, workspace=True))

    def _workspace_head(self, dev: Device) -> list[dict]:
        head = []
        for seg in dev.segments:
            if seg["total_size"] and seg["blocks"] and seg["allocated_size"] == 0 and self.workspaces and \
                    seg["address"] >= BASE_ADDR + dev.index * (1 << 40) + (1 << 39):
                for action in ("workspace_snapshot", "segment_alloc", "alloc"):
                    e = {"action": action, "addr": seg["address"], "size": seg["total_size"], "stream": seg["stream"],
                         "frames": self.empty_frames}
                    if self.time_us:
                        e["time_us"] = self.clock_us
                    head.append(e)
        return head


class Snapshot:
    """A simulated snapshot: ``data`` (the dict ``_dump_snapshot`` pickles) and ``truth``."""

    def __init__(self, sim: Simulation, data: dict):
        self.sim, self.data, self.truth = sim, data, Truth(sim)


def _kept_index(dev: Device, n_head: int, entry: int | None) -> int | None:
    """An entry number of the full trace as an index of the dumped trace (None: not in it)."""
    if entry is None or entry < 0:
        return None
    first = len(dev.entries) - dev.kept
    return entry - first + n_head if entry >= first else None


def _stack(frames) -> tuple | None:
    return tuple((f["filename"], f["line"], f["name"]) for f in frames) if frames else None


class Truth:
    """The simulation's own record, in the dumped trace's terms: entry ``idx`` is the position in the device's
    dumped trace (the workspace head included); a state *at* ``idx`` is the one after that entry (``-1``: before
    the first). Sizes of the blocks freed within the trace are their requested bytes (the trace records no
    other); those live at the dump have their block size."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.devices = {dev.index: dev for dev in sim.devices}

    def head(self, device: int) -> int:
        return sum(3 for s in self.devices[device].segments if self._is_workspace(device, s))

    def _is_workspace(self, device: int, seg: dict) -> bool:
        return bool(self.sim.workspaces) and seg["address"] >= BASE_ADDR + device * (1 << 40) + (1 << 39)

    def entries(self, device: int) -> int:
        return self.head(device) + self.devices[device].kept

    def workspace_bytes(self, device: int) -> int:
        return sum(s["total_size"] for s in self.devices[device].segments if self._is_workspace(device, s))

    def ts_ns(self, device: int) -> list[int | None]:
        head = self.head(device)  # the workspace triples are written at the dump: no time of their own
        return [None if i < head else e["time_us"] * 1000 if "time_us" in e else None
                for i, e in enumerate(self._dumped(device))]

    def _dumped(self, device: int) -> list[dict]:
        """The device's dumped trace: the workspace head, then the ring buffer's entries."""
        dev = self.devices[device]
        return self._head_entries(device) + dev.entries[len(dev.entries) - dev.kept:]

    def _head_entries(self, device: int) -> list[dict]:
        return self.sim._workspace_head(self.devices[device])

    def curve(self, device: int) -> dict[str, list[int]]:
        """active / allocated (requested bytes) and reserved bytes at -1 (first item) and after each entry."""
        dev = self.devices[device]
        first = len(dev.entries) - dev.kept
        ws = self.workspace_bytes(device)
        out = {}
        for name, values, start in (("active", dev.active, dev.start_active),
                                    ("allocated", dev.allocated, dev.start_allocated),
                                    ("reserved", dev.reserved, dev.start_reserved)):
            before = values[first - 1] if first > 0 else start
            extra = ws if name == "reserved" else 0
            out[name] = [before + extra] * (1 + self.head(device)) + [v + extra for v in values[first:]]
        return out

    def peak(self, device: int) -> tuple[int, int | None]:
        """The highest active memory and the first index at which it is reached (None: before the first)."""
        values = self.curve(device)["active"]
        top = max(values)
        at = values.index(top)
        return top, (at - 1 if at > 0 else None)

    def blocks(self, device: int) -> list[dict]:
        """Every block life the dumped trace or the dump shows, with its indices (None outside the trace)."""
        dev = self.devices[device]
        head = self.head(device)
        first = len(dev.entries) - dev.kept
        out = []
        for lf in dev.lives:
            if lf.free is not None and lf.free < first:
                continue  # freed before the ring buffer's first entry: nothing of it is in the dump
            alloc = _kept_index(dev, head, lf.alloc)
            req = _kept_index(dev, head, lf.free_requested)
            free = _kept_index(dev, head, lf.free)
            live_at_dump = lf.free is None
            if alloc is not None:
                stack = _stack(lf.frames)
            elif req is not None or free is not None:  # allocated before the trace: the stack its free records
                e = dev.entries[lf.free_requested if req is not None else lf.free]
                stack = _stack(e.get("frames"))
            else:  # live from before the trace to the dump: the dump's block frames
                stack = _stack(lf.frames) if self.sim.flavour == "cuda" or lf.site % 2 else None
            out.append({"addr": lf.addr, "requested": lf.requested, "size": lf.size if live_at_dump else None,
                        "alloc_idx": alloc, "free_requested_idx": req, "free_idx": free, "stack": stack,
                        "site": self.sim.site_names[lf.site], "stream": lf.stream,
                        "state_at_dump": None if not live_at_dump else
                        "active_allocated" if lf.free_requested is None else "active_pending_free"})
        return out

    def live_at(self, device: int, idx: int, *, allocated_only: bool = False) -> list[dict]:
        """The blocks live after entry ``idx`` (allocated, or pending a free unless ``allocated_only``)."""
        out = []
        for b in self.blocks(device):
            start = -1 if b["alloc_idx"] is None else b["alloc_idx"]
            end = b["free_requested_idx"] if allocated_only else b["free_idx"]
            if start <= idx and (end is None or end > idx):
                out.append(b)
        return out

    def reserved_at(self, device: int, idx: int) -> list[tuple[int, int]]:
        """The reserved address ranges after entry ``idx``: the segments, an expandable one's adjacent maps as one."""
        dev = self.devices[device]
        head = self.head(device)
        ranges = []
        for s in dev.segs:
            start = -1 if s.workspace else _kept_index(dev, head, s.start)
            if start is None and s.start >= 0:
                start = -1  # reserved before the ring buffer's first entry
            end = _kept_index(dev, head, s.end)
            if s.end is not None and end is None:
                continue  # released before the first entry
            if start <= idx and (end is None or end > idx):
                ranges.append((s.addr, s.addr + s.size, s.stream if s.expandable else None))
        merged: list[list] = []
        for lo, hi, stream in sorted(ranges):
            if merged and merged[-1][1] == lo and stream is not None and merged[-1][2] == stream:
                merged[-1][1] = hi  # one expandable segment's adjacent maps
            else:
                merged.append([lo, hi, stream])
        return [(lo, hi) for lo, hi, _ in merged]

    def state_at(self, device: int, idx: int) -> dict:
        """The allocator's figures after entry ``idx``: reserved, allocated / active (requested bytes, and block
        bytes counting a block of unknown size as its request), and the largest free gap."""
        live = self.live_at(device, idx)
        ranges = self.reserved_at(device, idx)
        spans = sorted((b["addr"], b["addr"] + (b["size"] or b["requested"])) for b in live)
        largest = 0
        for lo, hi in ranges:
            cursor = lo
            for a, e in spans:
                if lo <= a < hi:
                    largest = max(largest, a - cursor)
                    cursor = max(cursor, e)
            largest = max(largest, hi - cursor)
        allocated = [b for b in live if b["free_requested_idx"] is None or b["free_requested_idx"] > idx]
        return {"reserved": sum(hi - lo for lo, hi in ranges), "blocks": len(live),
                "allocated_requested": sum(b["requested"] for b in allocated),
                "active_requested": sum(b["requested"] for b in live),
                "allocated_bytes": sum(b["size"] or b["requested"] for b in allocated),
                "active_bytes": sum(b["size"] or b["requested"] for b in live), "largest_free": largest}

    def leaks(self, device: int, i0: int, i1: int) -> dict[tuple | None, tuple[int, int]]:
        """Blocks allocated by an entry in [i0, i1) and not freed by an entry before i1, per allocation stack:
        (count, requested bytes)."""
        out: dict = {}
        for b in self.blocks(device):
            a = b["alloc_idx"]
            if a is None or not i0 <= a < i1:
                continue
            if b["free_requested_idx"] is not None and b["free_requested_idx"] < i1:
                continue
            n, total = out.get(b["stack"], (0, 0))
            out[b["stack"]] = (n + 1, total + b["requested"])
        return out

    def ooms(self, device: int) -> list[dict]:
        out = []
        for idx, e in enumerate(self._dumped(device)):
            if e["action"] == "oom":
                out.append({"idx": idx, "size": e["size"], "device_free": e["device_free"],
                            "state": self.state_at(device, idx)})
        return out

    def dump_totals(self, device: int) -> dict[str, int]:
        segs = self.devices[device].segments
        return {k: sum(s[k] for s in segs) for k in ("total_size", "allocated_size", "active_size", "requested_size")}


def write(path: str | Path, snapshot: Snapshot, protocol: int = 4) -> Path:
    """``_dump_snapshot``'s file: the snapshot dict pickled (protocol 4 is Python 3.8+'s default)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump(snapshot.data, fh, protocol=protocol)
    return path


def simulate(flavour: str = "cuda", **options) -> Snapshot:
    """A simulated snapshot (``Simulation``'s options)."""
    return Simulation(flavour, **options).run()


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ascendscope.sample_data.memsnap",
                                 description="Write a simulated memory snapshot pickle (its answer is known).")
    ap.add_argument("out", help="the .pickle file to write")
    ap.add_argument("--flavour", choices=("cuda", "npu"), default="cuda")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-time", action="store_true", help="no time_us (torch_npu before it had one)")
    ap.add_argument("--expandable", action="store_true", help="expandable segments (segment_map / segment_unmap)")
    ap.add_argument("--max-entries", type=int, default=None, help="the ring buffer's size (default: all)")
    args = ap.parse_args(argv)
    snap = simulate(args.flavour, devices=args.devices, steps=args.steps, seed=args.seed, time_us=not args.no_time,
                    expandable=args.expandable, max_entries=args.max_entries)
    path = write(args.out, snap)
    print(f"{path}: {path.stat().st_size} bytes, {sum(len(t) for t in snap.data['device_traces'])} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
