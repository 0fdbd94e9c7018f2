"""The restricted, streaming opcode interpreter of ``ingest.memsnap.pickles`` (its note says what it guarantees).

The loop reads the opcodes a snapshot is made of most often itself, in the order they occur (memo references,
MEMOIZE, integers, MARK, dicts and lists and their batches); ``rareops`` reads the others and refuses what could
build an object; ``fastpath`` reads the common trace entries whole. A new list or dict gets its *role* from where it
is made: the root's ``segments``, each list of ``device_traces`` and ``external_annotations`` are sinks (their items
go to the handler), a list under a ``frames`` key becomes a stack, an item of one a frame, a segment's ``blocks``
its blocks.
"""

from __future__ import annotations

import struct
from array import array

from .fastpath import FastEntries
from .rareops import Mark, rare
from .values import BadPickle, FrameRef, Handler, Limits, Stacks

CHUNK_BYTES = 8 << 20
# the longest opcode whose length is not checked on its own (LONG1 / SHORT_BINUNICODE: 2 + 255 bytes)
MAX_SHORT_OP = 1 + 8 + 256
ROOT_SINKS = ("segments", "device_traces", "external_annotations")


class _Sink:
    """A big list the reader does not hold: its items go to the handler."""

    __slots__ = ("kind", "device", "count")

    def __init__(self, kind: str, device: int = -1):
        self.kind, self.device, self.count = kind, device, 0


class _Traces(_Sink):
    """``device_traces``: a list of per-device sinks."""


class _Item(dict):
    """A dict streamed to the handler (a segment, trace entry, annotation): never kept in the memo."""


class _Block(_Item):
    """A block of a segment (kept until its segment is handed over)."""


class _FramesList(list):
    """A list under a ``frames`` key: becomes a StackRef once complete."""


class _FrameDict(dict):
    """An item of a frames list: becomes a FrameRef once complete."""


class _BlocksList(list):
    """A segment's ``blocks`` (handed over with its segment: never kept in the memo)."""



TOMBSTONE = -1
PENDING = -2


class Reader:
    def __init__(self, fh, handler: Handler, limits: Limits, fast: bool = True):
        self.fh, self.handler, self.limits = fh, handler, limits
        self.use_fast, self.fast = fast, None
        self.stacks = Stacks()
        self.vals: list = []  # the objects the memo refers to (index = memo code)
        self.val_index: dict = {}  # interned str / hashable value -> its index in vals
        self.memo = array("i")
        self.pending: dict[int, object] = {}  # memo slot -> a frame dict or frames list still being built
        self.slot_of: dict[int, int] = {}  # id(pending object) -> its memo slot
        self.root = None
        self.sinks: dict[str, _Sink] = {}
        self.data = b""
        self.base = 0  # file offset of data[0]
        self.frame_type = FrameRef

    # ---- values and the memo ----------------------------------------------------------------------------------
    def _keep(self, obj) -> int:
        """The vals index of a kept object (strings and hashable values interned by value)."""
        try:
            key = (type(obj), obj)
            hash(key)
        except TypeError:
            key = None
        if key is not None:
            got = self.val_index.get(key)
            if got is not None:
                return got
        self.vals.append(obj)
        index = len(self.vals) - 1
        if key is not None:
            self.val_index[key] = index
            self.stacks.kept_bytes += 80 + (len(obj) if isinstance(obj, (str, bytes)) else 0)
        else:
            self.stacks.kept_bytes += 200
        if self.stacks.kept_bytes > self.limits.kept_bytes:
            raise BadPickle(f"more than {self.limits.kept_bytes >> 20} MB of distinct strings, frames and stacks: "
                            "not a snapshot this reader keeps in memory")
        return index

    def _memo_put(self, slot: int, obj) -> None:
        if isinstance(obj, (_Item, _Sink, _BlocksList)):
            code = TOMBSTONE
        elif isinstance(obj, (_FramesList, _FrameDict)):
            code = PENDING
            self.pending[slot] = obj
            self.slot_of[id(obj)] = slot
        else:
            code = self._keep(obj)
        n = len(self.memo)
        if slot == n:
            self.memo.append(code)
        elif slot < n:
            self.memo[slot] = code
            if self.fast is not None:
                self.fast.forget()
        elif slot - n > self.limits.memo_gap:
            raise BadPickle(f"memo index {slot} is far beyond the {n} objects memoized so far")
        else:
            self.memo.extend([TOMBSTONE] * (slot - n))
            self.memo.append(code)

    def _memo_get(self, slot: int, at: int):
        try:
            code = self.memo[slot]
        except IndexError:
            raise BadPickle(f"byte {at}: refers to memo index {slot}, which was never stored") from None
        if code >= 0:
            return self.vals[code]
        if code == PENDING:
            return self.pending[slot]
        raise BadPickle(f"byte {at}: refers back to a streamed segment, block or trace entry (a snapshot never "
                        "does)")

    def _finish(self, obj, ref) -> None:
        """A pending frame dict or frames list is complete: its memo slot now names its ref."""
        slot = self.slot_of.pop(id(obj), None)
        if slot is not None:
            del self.pending[slot]
            self.memo[slot] = self._keep(ref)

    def _frames(self, value):
        if isinstance(value, list):  # (a plain list too: a protocol-0 pickle builds lists with LIST)
            ref = self.stacks.stack(value)
            self._finish(value, ref)
            return ref
        return value

    def _frame(self, value):
        if type(value) is _FrameDict:
            ref = self.stacks.frame(value)
            self._finish(value, ref)
            return ref
        return value

    # ---- what a new container is, from where it is made (see the module note) ------------------------------------
    def _new_list(self, stack: list, metastack: list):
        top = stack[-1] if stack else None
        if isinstance(top, _Traces):  # a device's trace, alone in device_traces (APPEND)
            return _Sink("trace", top.count)
        base = metastack[-1][-1] if metastack and metastack[-1] else None
        if isinstance(base, _Traces):  # a device's trace in a batch (APPENDS)
            return _Sink("trace", base.count + len(stack))
        if isinstance(base, dict) and len(stack) % 2 == 1:  # a value in a batch of SETITEMS
            key, parent = stack[-1], base
        elif len(stack) >= 2 and isinstance(stack[-2], dict) and isinstance(top, str):  # SETITEM
            key, parent = top, stack[-2]
        else:
            return []
        if parent is self.root and key in ROOT_SINKS and key not in self.sinks:
            sink = _Traces(key) if key == "device_traces" else _Sink(key)
            self.sinks[key] = sink
            return sink
        if key == "frames":
            return _FramesList()
        if key == "blocks" and type(parent) is _Item:
            return _BlocksList()
        return []

    def _new_dict(self, stack: list, metastack: list):
        if self.root is None and not stack and not metastack:
            self.root = {}
            return self.root
        top = stack[-1] if stack else None
        container = top if isinstance(top, (_Sink, _FramesList, _BlocksList)) else (
            metastack[-1][-1] if metastack and metastack[-1] else None)
        if isinstance(container, _Sink) and not isinstance(container, _Traces):
            return _Item()
        if isinstance(container, _FramesList):
            return _FrameDict()
        if isinstance(container, _BlocksList):
            return _Block()
        return {}

    # ---- consuming items ---------------------------------------------------------------------------------------
    def _set_items(self, target, items: list, at: int) -> None:
        if not isinstance(target, dict):
            raise BadPickle(f"byte {at}: SETITEMS on a {type(target).__name__}")
        if len(items) % 2:
            raise BadPickle(f"byte {at}: SETITEMS with an odd number of items")
        for i in range(0, len(items), 2):
            key, value = items[i], items[i + 1]
            if key == "frames" or type(value) is _FramesList:
                value = self._frames(value)
            elif type(value) is _BlocksList and type(target) is not _Item:
                raise BadPickle(f"byte {at}: a blocks list outside a segment")
            try:
                target[key] = value
            except TypeError:
                raise BadPickle(f"byte {at}: a dict key of type {type(key).__name__}") from None
            if target is self.root and isinstance(key, str) and key not in ROOT_SINKS:
                self.handler.root_value(key, value)

    def _append(self, target, items: list, at: int) -> None:
        if isinstance(target, _Sink):
            self._to_sink(target, items, at)
        elif isinstance(target, _FramesList):
            target.extend(self._frame(v) for v in items)
        elif isinstance(target, list):
            target.extend(items)
            if len(target) > self.limits.list_items:
                raise BadPickle(f"byte {at}: a list of more than {self.limits.list_items} items outside the "
                                "snapshot's segments and traces")
        elif isinstance(target, Mark) and target.kind == "list":
            raise BadPickle(f"byte {at}: APPENDS on {target.name}")
        else:
            raise BadPickle(f"byte {at}: APPENDS on a {type(target).__name__}")

    def _to_sink(self, sink: _Sink, items: list, at: int) -> None:
        h = self.handler
        if isinstance(sink, _Traces):
            for item in items:
                if not (isinstance(item, _Sink) and item.kind == "trace"):
                    raise BadPickle(f"byte {at}: device_traces holds something other than lists")
            sink.count += len(items)
            return
        for item in items:
            if not isinstance(item, dict):
                raise BadPickle(f"byte {at}: {sink.kind} holds a {type(item).__name__}, not a dict")
            if sink.kind == "trace":
                h.entry(sink.device, item)
            elif sink.kind == "segments":
                h.segment(item)
            else:
                h.annotation(item)
        sink.count += len(items)

    # ---- the opcode loop ---------------------------------------------------------------------------------------
    def _refill(self, pos: int) -> int:
        """Keep data[pos:] and read the next chunk after it; returns the new position of pos."""
        rest = self.data[pos:]
        self.base += pos
        more = self.fh.read(CHUNK_BYTES)
        self.data = rest + more if rest else more
        self.handler.progress(self.base + len(rest))
        return 0

    def _need(self, pos: int, n: int) -> int:
        """Make sure data[pos:pos+n] is buffered (reading on); returns pos in the possibly new buffer."""
        if n > self.limits.value_bytes + 16:
            raise BadPickle(f"byte {self.base + pos}: a value of {n} bytes (more than "
                            f"{self.limits.value_bytes >> 20} MB)")
        if pos + n <= len(self.data):
            return pos
        rest = self.data[pos:]
        self.base += pos
        parts = [rest]
        have = len(rest)
        while have < n:
            more = self.fh.read(max(CHUNK_BYTES, n - have))
            if not more:
                raise BadPickle(f"cut short: the file ends at byte {self.base + have} inside an opcode")
            parts.append(more)
            have += len(more)
        self.data = b"".join(parts)
        self.handler.progress(self.base)
        return 0

    def run(self):
        stack: list = []
        metastack: list = []
        push = stack.append
        limits = self.limits
        unpack_i = struct.Struct("<i").unpack_from
        unpack_I = struct.Struct("<I").unpack_from
        unpack_H = struct.Struct("<H").unpack_from
        memo, vals = self.memo, self.vals
        fast = self.fast = FastEntries(self) if self.use_fast else None
        self.data = self.fh.read(CHUNK_BYTES)
        data = self.data
        pos = 0
        safe = len(data) - MAX_SHORT_OP
        while True:
            if pos > safe:
                if len(stack) > limits.stack_items:
                    self._too_many(pos)
                pos = self._refill(pos)
                data = self.data
                safe = len(data) - MAX_SHORT_OP
                if pos >= len(data):
                    raise BadPickle(f"cut short: the file ends at byte {self.base} before the pickle's STOP")
            op = data[pos]
            if op == 0x68:  # BINGET
                slot = data[pos + 1]
                code = memo[slot] if slot < len(memo) else -3
                push(vals[code] if code >= 0 else self._memo_get(slot, self.base + pos))
                pos += 2
            elif op == 0x6A:  # LONG_BINGET
                slot = unpack_I(data, pos + 1)[0]
                code = memo[slot] if slot < len(memo) else -3
                push(vals[code] if code >= 0 else self._memo_get(slot, self.base + pos))
                pos += 5
            elif op == 0x94:  # MEMOIZE
                if not stack:
                    raise BadPickle(f"byte {self.base + pos}: MEMOIZE on an empty stack")
                self._memo_put(len(memo), stack[-1])
                pos += 1
            elif op == 0x4A:  # BININT
                push(unpack_i(data, pos + 1)[0])
                pos += 5
            elif op == 0x28:  # MARK
                if len(metastack) >= limits.depth:
                    raise BadPickle(f"byte {self.base + pos}: nested more than {limits.depth} levels deep")
                metastack.append(stack)
                stack = []
                push = stack.append
                pos += 1
            elif op == 0x7D:  # EMPTY_DICT
                if len(stack) > limits.stack_items:
                    self._too_many(pos)
                base = metastack[-1][-1] if metastack and metastack[-1] else None
                if fast is not None and type(base) is _Sink and base.kind == "trace":  # an entry: the fast path
                    if stack:  # (the batch's entries read so far go first)
                        self._to_sink(base, stack, self.base + pos)
                        stack.clear()
                    new = fast.run(data, pos, base, self.handler)
                    if new != pos:
                        pos = new
                        continue
                push(self._new_dict(stack, metastack))
                pos += 1
            elif op == 0x75:  # SETITEMS
                if not metastack:
                    raise BadPickle(f"byte {self.base + pos}: SETITEMS without a MARK")
                items = stack
                stack = metastack.pop()
                push = stack.append
                if not stack:
                    raise BadPickle(f"byte {self.base + pos}: SETITEMS with no dict below it")
                self._set_items(stack[-1], items, self.base + pos)
                pos += 1
            elif op == 0x8A:  # LONG1
                n = data[pos + 1]
                push(int.from_bytes(data[pos + 2:pos + 2 + n], "little", signed=True))
                pos += 2 + n
            elif op == 0x5D:  # EMPTY_LIST
                if len(stack) > limits.stack_items:
                    self._too_many(pos)
                push(self._new_list(stack, metastack))
                pos += 1
            elif op == 0x65:  # APPENDS
                if not metastack:
                    raise BadPickle(f"byte {self.base + pos}: APPENDS without a MARK")
                items = stack
                stack = metastack.pop()
                push = stack.append
                if not stack:
                    raise BadPickle(f"byte {self.base + pos}: APPENDS with no list below it")
                self._append(stack[-1], items, self.base + pos)
                pos += 1
            elif op == 0x4D:  # BININT2
                push(unpack_H(data, pos + 1)[0])
                pos += 3
            elif op == 0x4B:  # BININT1
                push(data[pos + 1])
                pos += 2
            elif op == 0x8C:  # SHORT_BINUNICODE
                if len(stack) > limits.stack_items:
                    self._too_many(pos)
                n = data[pos + 1]
                push(self._text(data[pos + 2:pos + 2 + n], pos))
                pos += 2 + n
            elif op == 0x61:  # APPEND
                if len(stack) < 2:
                    raise BadPickle(f"byte {self.base + pos}: APPEND with no list below it")
                item = stack.pop()
                self._append(stack[-1], [item], self.base + pos)
                pos += 1
            elif op == 0x73:  # SETITEM
                if len(stack) < 3:
                    raise BadPickle(f"byte {self.base + pos}: SETITEM with no dict below it")
                value = stack.pop()
                key = stack.pop()
                self._set_items(stack[-1], [key, value], self.base + pos)
                pos += 1
            elif op == 0x86:  # TUPLE2
                if len(stack) < 2:
                    raise BadPickle(f"byte {self.base + pos}: TUPLE2 on a short stack")
                b = stack.pop()
                stack[-1] = (stack[-1], b)
                pos += 1
            elif op == 0x88:  # NEWTRUE
                push(True)
                pos += 1
            elif op == 0x89:  # NEWFALSE
                push(False)
                pos += 1
            elif op == 0x4E:  # NONE
                push(None)
                pos += 1
            elif op == 0x95:  # FRAME: framing is transparent; the length is only a hint
                pos += 9
            elif op == 0x2E:  # STOP
                if metastack or len(stack) != 1:
                    raise BadPickle(f"byte {self.base + pos}: STOP with {len(stack)} values and "
                                    f"{len(metastack)} open MARKs")
                return stack[0]
            else:
                pos, stack, metastack = rare(self, op, pos, stack, metastack)
                data = self.data
                safe = len(data) - MAX_SHORT_OP
                push = stack.append

    def _too_many(self, pos: int):
        raise BadPickle(f"byte {self.base + pos}: more than {self.limits.stack_items} values on the stack (not a "
                        "snapshot's structure)")

    def _text(self, raw: bytes, pos: int) -> str:
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise BadPickle(f"byte {self.base + pos}: a string that is not UTF-8 ({exc.reason})") from None
