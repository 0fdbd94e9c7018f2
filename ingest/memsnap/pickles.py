"""A restricted, streaming reader of memory snapshot pickles: never ``pickle.load`` on bytes a user gave us.

A snapshot (``torch.cuda.memory._dump_snapshot``, ``torch_npu.npu.memory._dump_snapshot``) is ``pickle.dump`` of
plain dicts, lists, tuples, strings, numbers and booleans. Loading an arbitrary pickle can run code (``GLOBAL`` +
``REDUCE`` call any importable function), and a snapshot of tens of GB would need several times its size in RAM as
Python objects. :func:`read` interprets the opcodes itself, one at a time, in a bounded buffer:

* it builds only dicts, lists, tuples, str, bytes, int, float, bool and None. Every opcode that names a global or
  builds an object (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, ``OBJ``, ``NEWOBJ``, ``NEWOBJ_EX``, ``REDUCE``,
  ``BUILD``, ``PERSID``, ``EXT*``, out-of-band buffers) is refused with :class:`RefusedPickle` — except the few
  globals in ``ALLOWED_GLOBALS``, which stand for a plain container (``collections.OrderedDict`` is a dict) and
  are only ever called with plain data;
* the big lists are never held: the root dict's ``segments`` list, each list of ``device_traces`` and
  ``external_annotations`` are *sinks* whose items go to the :class:`Handler` as soon as a batch of them is
  complete (a segment with its blocks, a trace entry, an annotation), and are dropped;
* the memo (what the pickle refers back to) holds 4 bytes per memoized object: an index into the values kept,
  which are the distinct strings, frames and stacks (a frame dict becomes a :class:`FrameRef`, a ``frames`` list a
  :class:`StackRef`, deduplicated by content), and the few other containers. A streamed item is a tombstone: a
  pickle that refers back to one is refused (a snapshot never does);
* every size is bounded before it is paid: one value, the stack, the nesting depth, the memo index, the distinct
  strings, frames and stacks (``Limits``), each with a clear :class:`BadPickle` naming the byte offset.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass, field

CHUNK_BYTES = 8 << 20
# the longest opcode whose length is not checked on its own (LONG1 / SHORT_BINUNICODE: 2 + 255 bytes)
MAX_SHORT_OP = 1 + 8 + 256
ROOT_SINKS = ("segments", "device_traces", "external_annotations")
ALLOWED_GLOBALS = {("collections", "OrderedDict"): "dict", ("builtins", "set"): "list",
                   ("builtins", "frozenset"): "list", ("__builtin__", "set"): "list"}


class BadPickle(ValueError):
    """Not a snapshot we can read: damaged, cut short, too big in one of its parts, or another kind of pickle."""


class RefusedPickle(BadPickle):
    """The pickle asks for something that could run code (a global, an object built by a call)."""


@dataclass
class Limits:
    value_bytes: int = 64 << 20  # one string or bytes value
    stack_items: int = 1 << 20  # items on the stack outside the sinks (a batch is 1,000)
    depth: int = 256  # nested MARKs
    memo_gap: int = 1 << 20  # how far past the memo's end a PUT may write
    list_items: int = 4 << 20  # one list that is not a sink (a segment's blocks, a frames list)
    kept_bytes: int = 512 << 20  # the distinct strings, frames and stacks kept (estimated)


class FrameRef:
    """One distinct frame: its id in ``Stacks.frames``."""

    __slots__ = ("id",)

    def __init__(self, id: int):
        self.id = id


class StackRef:
    """One distinct stack (a ``frames`` list): its id in ``Stacks.stacks``."""

    __slots__ = ("id",)

    def __init__(self, id: int):
        self.id = id


@dataclass
class Stacks:
    """The distinct frames ``(filename, line, name)`` and stacks (tuples of frame ids, innermost first) seen so
    far; ids are dense from 0. ``frame_extra`` keeps a frame's keys beyond those three (FX debug fields)."""

    frames: list[tuple] = field(default_factory=list)
    stacks: list[tuple[int, ...]] = field(default_factory=list)
    frame_ids: dict = field(default_factory=dict)
    stack_ids: dict = field(default_factory=dict)
    kept_bytes: int = 0

    def frame(self, d: dict) -> FrameRef:
        name, filename, line = d.get("name"), d.get("filename"), d.get("line")
        key = (str(filename) if filename is not None else "", line if isinstance(line, int) else None,
               str(name) if name is not None else "")
        ref = self.frame_ids.get(key)
        if ref is None:
            ref = self.frame_ids[key] = FrameRef(len(self.frames))
            self.frames.append(key)
            self.kept_bytes += 200 + len(key[0]) + len(key[2])
        return ref

    def stack(self, items: list) -> StackRef:
        ids = []
        for f in items:
            if isinstance(f, dict):
                f = self.frame(f)
            if not isinstance(f, FrameRef):
                raise BadPickle("a frames list holds something other than frames")
            ids.append(f.id)
        key = tuple(ids)
        ref = self.stack_ids.get(key)
        if ref is None:
            ref = self.stack_ids[key] = StackRef(len(self.stacks))
            self.stacks.append(key)
            self.kept_bytes += 120 + 8 * len(key)
        return ref


class Handler:
    """What :func:`read` calls as it goes (override what you need)."""

    def segment(self, seg: dict) -> None:
        """One item of ``segments``: a dict whose ``blocks`` is a list of dicts; frames are StackRefs."""

    def entry(self, device: int, e: dict) -> None:
        """One trace entry of device ``device``, in trace order."""

    def annotation(self, a: dict) -> None:
        """One item of ``external_annotations``."""

    def root_value(self, key: str, value) -> None:
        """A key of the root dict other than the sinks (``allocator_settings`` …), with its (small) value."""

    def progress(self, done_bytes: int) -> None:
        """Bytes read so far (called once per buffer refill)."""


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


class _Mark:
    """A callable global that stands for a plain container (``ALLOWED_GLOBALS``)."""

    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name


TOMBSTONE = -1
PENDING = -2


class _Reader:
    def __init__(self, fh, handler: Handler, limits: Limits):
        self.fh, self.handler, self.limits = fh, handler, limits
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
        elif isinstance(target, _Mark) and target.kind == "list":
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
                pos, stack, metastack = self._rare(op, pos, stack, metastack)
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

    def _rare(self, op: int, pos: int, stack: list, metastack: list):
        """Every other opcode; returns (pos, stack, metastack) (a MARK-consuming opcode changes the stack)."""
        at = self.base + pos
        data = self.data
        name = _OPNAMES.get(op)
        if name is None:
            raise BadPickle(f"byte {at}: not a pickle opcode (0x{op:02x}): not a pickle, or damaged")
        if name in _REFUSED:
            raise RefusedPickle(f"byte {at}: refused {name}: a memory snapshot holds only dicts, lists and numbers, "
                                "and this pickle asks to build an object (loading it could run code)")
        if name == "PROTO":
            if data[pos + 1] > 5:
                raise BadPickle(f"byte {at}: pickle protocol {data[pos + 1]} is newer than this reader knows")
            return pos + 2, stack, metastack
        if name in ("BINUNICODE", "BINBYTES", "BINSTRING"):
            n = struct.unpack_from("<I" if name != "BINSTRING" else "<i", data, pos + 1)[0]
            if n < 0:
                raise BadPickle(f"byte {at}: negative length")
            pos = self._need(pos, 5 + n)
            raw = self.data[pos + 5:pos + 5 + n]
            stack.append(self._text(raw, pos) if name == "BINUNICODE" else
                         raw if name == "BINBYTES" else raw.decode("latin-1"))
            return pos + 5 + n, stack, metastack
        if name in ("BINUNICODE8", "BINBYTES8", "BYTEARRAY8"):
            n = struct.unpack_from("<Q", data, pos + 1)[0]
            pos = self._need(pos, 9 + n)
            raw = self.data[pos + 9:pos + 9 + n]
            stack.append(self._text(raw, pos) if name == "BINUNICODE8" else bytes(raw))
            return pos + 9 + n, stack, metastack
        if name in ("SHORT_BINBYTES", "SHORT_BINSTRING"):
            n = data[pos + 1]
            raw = data[pos + 2:pos + 2 + n]
            stack.append(raw if name == "SHORT_BINBYTES" else raw.decode("latin-1"))
            return pos + 2 + n, stack, metastack
        if name == "LONG4":
            n = struct.unpack_from("<i", data, pos + 1)[0]
            if not 0 <= n <= 64:
                raise BadPickle(f"byte {at}: an integer of {n} bytes")
            pos = self._need(pos, 5 + n)
            stack.append(int.from_bytes(self.data[pos + 5:pos + 5 + n], "little", signed=True))
            return pos + 5 + n, stack, metastack
        if name == "BINFLOAT":
            stack.append(struct.unpack_from(">d", data, pos + 1)[0])
            return pos + 9, stack, metastack
        if name in ("BINPUT", "LONG_BINPUT"):
            if not stack:
                raise BadPickle(f"byte {at}: {name} on an empty stack")
            slot = data[pos + 1] if name == "BINPUT" else struct.unpack_from("<I", data, pos + 1)[0]
            self._memo_put(slot, stack[-1])
            return pos + (2 if name == "BINPUT" else 5), stack, metastack
        if name in ("INT", "LONG", "FLOAT", "STRING", "UNICODE", "GET", "PUT"):
            return self._text_op(name, pos, stack, metastack)
        if name in ("TUPLE1", "TUPLE3"):
            n = 1 if name == "TUPLE1" else 3
            if len(stack) < n:
                raise BadPickle(f"byte {at}: {name} on a short stack")
            items = tuple(stack[-n:])
            del stack[-n:]
            stack.append(items)
            return pos + 1, stack, metastack
        if name == "EMPTY_TUPLE":
            stack.append(())
            return pos + 1, stack, metastack
        if name in ("TUPLE", "LIST", "DICT", "FROZENSET", "POP_MARK"):
            if not metastack:
                raise BadPickle(f"byte {at}: {name} without a MARK")
            items = stack
            stack = metastack.pop()
            if name == "TUPLE":
                stack.append(tuple(items))
            elif name == "LIST":  # protocol 0's list: a sink, a frames list … as EMPTY_LIST makes them
                target = self._new_list(stack, metastack)
                if items:
                    self._append(target, items, at)
                stack.append(target)
            elif name == "FROZENSET":
                stack.append(list(items))
            elif name == "DICT":
                d = self._new_dict(stack, metastack)
                self._set_items(d, items, at)
                stack.append(d)
            return pos + 1, stack, metastack
        if name == "EMPTY_SET":
            stack.append([])
            return pos + 1, stack, metastack
        if name == "ADDITEMS":
            if not metastack:
                raise BadPickle(f"byte {at}: ADDITEMS without a MARK")
            items = stack
            stack = metastack.pop()
            if not stack or not isinstance(stack[-1], list):
                raise BadPickle(f"byte {at}: ADDITEMS on something other than a set")
            stack[-1].extend(items)
            return pos + 1, stack, metastack
        if name == "POP":
            if stack:
                stack.pop()
            elif metastack:
                stack = metastack.pop()
            else:
                raise BadPickle(f"byte {at}: POP on an empty stack")
            return pos + 1, stack, metastack
        if name == "DUP":
            if not stack:
                raise BadPickle(f"byte {at}: DUP on an empty stack")
            stack.append(stack[-1])
            return pos + 1, stack, metastack
        if name in ("GLOBAL", "STACK_GLOBAL"):
            return self._global(name, pos, stack, metastack)
        if name == "REDUCE":
            if len(stack) < 2 or not isinstance(stack[-2], _Mark) or not isinstance(stack[-1], tuple):
                raise RefusedPickle(f"byte {at}: refused REDUCE: only calls of {_allowed()} with plain arguments "
                                    "are read (loading this pickle could run code)")
            args = stack.pop()
            mark = stack.pop()
            plain = _call_plain(mark, args, at)
            # made where EMPTY_DICT / EMPTY_LIST would make it (an OrderedDict root is the root)
            target = self._new_dict(stack, metastack) if mark.kind == "dict" else self._new_list(stack, metastack)
            if plain:
                if isinstance(target, dict):
                    self._set_items(target, [v for kv in plain.items() for v in kv], at)
                else:
                    self._append(target, plain, at)
            stack.append(target)
            return pos + 1, stack, metastack
        raise BadPickle(f"byte {at}: opcode {name} is not read")  # (every opcode is handled above)

    def _text_op(self, name: str, pos: int, stack: list, metastack: list):
        """Protocol 0's newline-terminated opcodes."""
        at = self.base + pos
        end = self.data.find(b"\n", pos + 1)
        while end < 0:
            if len(self.data) - pos > 1 << 20:
                raise BadPickle(f"byte {at}: {name} argument longer than 1 MB")
            pos = self._need(pos, len(self.data) - pos + 1)
            end = self.data.find(b"\n", pos + 1)
        line = self.data[pos + 1:end]
        try:
            if name == "INT":
                stack.append(True if line == b"01" else False if line == b"00" else int(line))
            elif name == "LONG":
                stack.append(int(line.rstrip(b"L")))
            elif name == "FLOAT":
                stack.append(float(line))
            elif name == "STRING":
                stack.append(line.strip()[1:-1].decode("unicode_escape"))
            elif name == "UNICODE":
                stack.append(line.decode("raw_unicode_escape"))
            elif name == "GET":
                stack.append(self._memo_get(int(line), at))
            elif name == "PUT":
                if not stack:
                    raise BadPickle(f"byte {at}: PUT on an empty stack")
                self._memo_put(int(line), stack[-1])
        except ValueError as exc:
            if isinstance(exc, BadPickle):
                raise
            raise BadPickle(f"byte {at}: bad {name} argument {line[:40]!r}") from None
        return end + 1, stack, metastack

    def _global(self, name: str, pos: int, stack: list, metastack: list):
        at = self.base + pos
        if name == "STACK_GLOBAL":
            if len(stack) < 2 or not all(isinstance(v, str) for v in stack[-2:]):
                raise RefusedPickle(f"byte {at}: refused STACK_GLOBAL (loading this pickle could run code)")
            qual = stack.pop()
            module = stack.pop()
            end = pos + 1
        else:
            first = self.data.find(b"\n", pos + 1)
            second = self.data.find(b"\n", first + 1) if first >= 0 else -1
            if first < 0 or second < 0 or second - pos > 512:
                raise RefusedPickle(f"byte {at}: refused GLOBAL (loading this pickle could run code)")
            module = self.data[pos + 1:first].decode("latin-1")
            qual = self.data[first + 1:second].decode("latin-1")
            end = second + 1
        kind = ALLOWED_GLOBALS.get((module, qual))
        if kind is None:
            raise RefusedPickle(f"byte {at}: refused global {module}.{qual}: a memory snapshot holds only dicts, "
                                "lists and numbers, and loading this pickle could run code")
        stack.append(_Mark(kind, f"{module}.{qual}"))
        return end, stack, metastack


def _allowed() -> str:
    return ", ".join(f"{m}.{q}" for m, q in ALLOWED_GLOBALS)


def _call_plain(mark: _Mark, args: tuple, at: int):
    """An allowed global called: a plain dict or list of its (plain) argument, never the global itself."""
    if len(args) > 1:
        raise RefusedPickle(f"byte {at}: refused {mark.name} called with {len(args)} arguments")
    arg = args[0] if args else ()
    if mark.kind == "dict":
        if isinstance(arg, dict):
            return dict(arg)
        if isinstance(arg, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in arg):
            return dict(arg)
        raise RefusedPickle(f"byte {at}: refused {mark.name} of a {type(arg).__name__}")
    if isinstance(arg, (list, tuple)):
        return list(arg)
    raise RefusedPickle(f"byte {at}: refused {mark.name} of a {type(arg).__name__}")


_OPNAMES = {
    0x28: "MARK", 0x2E: "STOP", 0x30: "POP", 0x31: "POP_MARK", 0x32: "DUP", 0x46: "FLOAT", 0x49: "INT",
    0x4A: "BININT", 0x4B: "BININT1", 0x4C: "LONG", 0x4D: "BININT2", 0x4E: "NONE", 0x50: "PERSID",
    0x51: "BINPERSID", 0x52: "REDUCE", 0x53: "STRING", 0x54: "BINSTRING", 0x55: "SHORT_BINSTRING",
    0x56: "UNICODE", 0x58: "BINUNICODE", 0x61: "APPEND", 0x62: "BUILD", 0x63: "GLOBAL", 0x64: "DICT",
    0x7D: "EMPTY_DICT", 0x65: "APPENDS", 0x67: "GET", 0x68: "BINGET", 0x69: "INST", 0x6A: "LONG_BINGET",
    0x6C: "LIST", 0x5D: "EMPTY_LIST", 0x6F: "OBJ", 0x70: "PUT", 0x71: "BINPUT", 0x72: "LONG_BINPUT",
    0x73: "SETITEM", 0x74: "TUPLE", 0x29: "EMPTY_TUPLE", 0x75: "SETITEMS", 0x47: "BINFLOAT", 0x80: "PROTO",
    0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x85: "TUPLE1", 0x86: "TUPLE2", 0x87: "TUPLE3",
    0x88: "NEWTRUE", 0x89: "NEWFALSE", 0x8A: "LONG1", 0x8B: "LONG4", 0x42: "BINBYTES", 0x43: "SHORT_BINBYTES",
    0x8C: "SHORT_BINUNICODE", 0x8D: "BINUNICODE8", 0x8E: "BINBYTES8", 0x8F: "EMPTY_SET", 0x90: "ADDITEMS",
    0x91: "FROZENSET", 0x92: "NEWOBJ_EX", 0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME",
    0x96: "BYTEARRAY8", 0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}
_REFUSED = {"PERSID", "BINPERSID", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2", "EXT4",
            "NEXT_BUFFER", "READONLY_BUFFER"}


def read(fh, handler: Handler, limits: Limits | None = None) -> Stacks:
    """Read the snapshot pickle from the binary file ``fh``, calling ``handler`` as items complete; return the
    distinct frames and stacks. Raises :class:`RefusedPickle` / :class:`BadPickle` (byte offsets in the
    message). The root must be a dict (a list is the oldest format: segments only, handed over as segments)."""
    r = _Reader(fh, handler, limits or Limits())
    root = r.run()
    if isinstance(root, list) and r.root is None:  # torch 1.x _snapshot(): the list of segments alone
        for seg in root:
            if isinstance(seg, dict):
                handler.segment(seg)
    elif not isinstance(root, dict):
        raise BadPickle(f"the pickle holds a {type(root).__name__}, not a memory snapshot's dict")
    elif "segments" not in r.sinks and "device_traces" not in r.sinks:
        raise BadPickle("the pickle's dict has neither 'segments' nor 'device_traces': not a memory snapshot")
    return r.stacks
