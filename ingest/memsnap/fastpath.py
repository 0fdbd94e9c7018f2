"""The restricted reader's fast path for trace entries (``ingest.memsnap.pickles``): the same result as the opcode
loop, for the shape almost every entry has, at several times its speed.

A trace entry after the first few is ``EMPTY_DICT MEMOIZE MARK (key value)+ SETITEMS`` where every key is a
memo reference to a string seen before and every value a memo reference, an integer, a boolean, None, a float, or
a new ``frames`` list of memo references to frames seen before. One compiled regular expression recognises such an
entry (:data:`ENTRY`), another splits it into its pairs (:data:`PAIR`), and each pair is decoded from its bytes —
a new frames list by its very bytes (the same references make the same stack), from a cache. An entry of any other
shape (a new string, a frame seen for the first time, a reference to something still being built) is left to the
opcode loop, which reads it and tries the fast path again at the next entry. The memo grows exactly as the loop
grows it: the entry's dict, then each new list, in the order they are written. ``tests/ingest/test_memsnap_reader.py``
reads every snapshot both ways and compares.
"""

from __future__ import annotations

import re
import struct

GET = rb"h.|j...."
INT = (rb"K.|M..|J....|\x8a(?:\x00|\x01.|\x02..|\x03...|\x04....|\x05.....|\x06......|\x07.......|"
       rb"\x08........)")
NEW_LIST = rb"\]\x94(?:\((?:h.|j....)+e|(?:h.|j....)a)?"
VALUE = rb"(?:" + GET + rb"|" + INT + rb"|" + NEW_LIST + rb"|\x88|\x89|N|G........)"
ENTRY = re.compile(rb"\}\x94\((?:(?:" + GET + rb")" + VALUE + rb")+u", re.S)
PAIR = re.compile(rb"(" + GET + rb")(" + VALUE + rb")", re.S)
REF = re.compile(GET, re.S)
_BINFLOAT = struct.Struct(">d").unpack_from
MAX_CACHED_LISTS = 1 << 16  # frames lists remembered by their bytes (a site's references repeat exactly)
MAX_CACHED_VALUES = 1 << 18  # values remembered by their bytes (addresses, sizes, streams, actions repeat)
SHAPE_MAX = 64  # entry shapes (key sequences) compiled
_MISSING = object()


class _Bail(Exception):
    """This entry is not of the fast path's shape: the opcode loop reads it."""


class FastEntries:
    def __init__(self, reader):
        self.r = reader
        self.keys: dict[bytes, str] = {}
        self.values: dict[bytes, object] = {}  # a value's bytes -> the value (integers, memo references)
        self.lists: dict[bytes, object] = {}
        self.shapes: dict[tuple, tuple] = {}  # the keys' bytes in order -> (pattern, key names, time_us's position)
        self.last = None  # the shape of the last entry read

    def _slot_value(self, raw: bytes):
        slot = raw[1] if raw[0] == 0x68 else int.from_bytes(raw[1:5], "little")
        memo = self.r.memo
        if slot >= len(memo):
            raise _Bail
        code = memo[slot]
        if code < 0:
            raise _Bail
        return self.r.vals[code]

    def _stack(self, raw: bytes):
        got = self.lists.get(raw)
        if got is not None:
            return got
        refs = [self._slot_value(t) for t in REF.findall(raw, 3 if raw[2:3] == b"(" else 2, len(raw) - 1)]
        if not all(type(f) is self.r.frame_type for f in refs):
            raise _Bail
        ref = self.r.stacks.stack(refs)
        if len(self.lists) < MAX_CACHED_LISTS:
            self.lists[raw] = ref
        return ref

    def _decode(self, data, start: int, end: int) -> tuple[dict, list]:
        """The entry's dict, and the refs of its new lists in the order they are written."""
        out = {}
        lists = []
        keys, values = self.keys, self.values
        for kraw, vraw in PAIR.findall(data, start, end):
            key = keys.get(kraw)
            if key is None:
                key = self._slot_value(kraw)
                if type(key) is not str:
                    raise _Bail
                keys[kraw] = key
            value = values.get(vraw, _MISSING)
            if value is _MISSING:
                op = vraw[0]
                if op == 0x5D:
                    if key != "frames":
                        raise _Bail
                    value = self.r.stacks.stack([]) if len(vraw) == 2 else self._stack(vraw)
                    lists.append(value)
                    out[key] = value
                    continue
                value = self._value(op, vraw)
                if key != "time_us" and len(values) < MAX_CACHED_VALUES:  # (times rarely repeat)
                    values[vraw] = value
            out[key] = value
        return out, lists

    def _value(self, op: int, vraw: bytes):
        if op == 0x4B:
            return vraw[1]
        if op == 0x8A:
            return int.from_bytes(vraw[2:], "little", signed=True)
        if op == 0x4A:
            return int.from_bytes(vraw[1:], "little", signed=True)
        if op == 0x4D:
            return vraw[1] | vraw[2] << 8
        if op == 0x68 or op == 0x6A:
            return self._slot_value(vraw)
        if op == 0x88:
            return True
        if op == 0x89:
            return False
        if op == 0x4E:
            return None
        return _BINFLOAT(vraw, 1)[0]  # G: BINFLOAT

    def forget(self) -> None:
        """A memo slot was overwritten (a PUT to an index in use): what was read through the memo is stale."""
        self.keys.clear()
        self.values.clear()
        self.lists.clear()
        self.shapes.clear()
        self.last = None

    def _shape(self, data, start: int, end: int):
        """The compiled pattern of an entry with this entry's keys in this order (:data:`SHAPE_MAX` of them at
        most): it matches such an entry whole and captures its values."""
        keys = tuple(k for k, _ in PAIR.findall(data, start, end))
        got = self.shapes.get(keys)
        if got is None and len(self.shapes) < SHAPE_MAX:
            names = tuple(self.keys.get(k) for k in keys)
            if None in names:
                return None
            body = b"".join(re.escape(k) + b"(" + VALUE + b")" for k in keys)
            got = self.shapes[keys] = (re.compile(rb"\}\x94\(" + body + rb"u", re.S), names,
                                       names.index("time_us") if "time_us" in names else -1)
        return got

    def _by_shape(self, m, names, timed: int) -> tuple[dict, list]:
        """An entry matched by a shape's pattern: its values from their bytes (the same decoding as _decode)."""
        values = self.values
        out = []
        lists = []
        for k, vraw in enumerate(m.groups()):
            if k == timed and vraw[0] != 0x68 and vraw[0] != 0x6A:  # a time: rarely seen before, read directly
                out.append(self._value(vraw[0], vraw))
                continue
            value = values.get(vraw, _MISSING)
            if value is _MISSING:
                op = vraw[0]
                if op == 0x5D:
                    if names[k] != "frames":
                        raise _Bail
                    value = self.r.stacks.stack([]) if len(vraw) == 2 else self._stack(vraw)
                    lists.append(value)
                else:
                    value = self._value(op, vraw)
                    if k != timed and len(values) < MAX_CACHED_VALUES:
                        values[vraw] = value
            out.append(value)
        return dict(zip(names, out)), lists

    def run(self, data, pos: int, sink, handler) -> int:
        """Read the entries of ``sink`` that start at ``pos`` while they have the fast path's shape; returns where
        the first other one starts (``pos`` itself when none matched). An entry is tried against the last shape
        seen first (one match gives its values), then against the general pattern."""
        match = ENTRY.match
        keep = self.r._keep
        memo = self.r.memo
        device = sink.device
        entry = handler.entry
        shape = self.last
        n = 0
        while True:
            m = shape[0].match(data, pos) if shape is not None else None
            try:
                if m is not None:
                    d, lists = self._by_shape(m, shape[1], shape[2])
                else:
                    m = match(data, pos)
                    if m is None:
                        break
                    d, lists = self._decode(data, pos + 3, m.end() - 1)
                    shape = self._shape(data, pos + 3, m.end() - 1)
            except _Bail:
                break
            memo.append(-1)  # the entry's dict: streamed, never referred back to (pickles.TOMBSTONE)
            for ref in lists:
                memo.append(keep(ref))
            entry(device, d)
            n += 1
            pos = m.end()
        self.last = shape
        sink.count += n
        return pos
