"""The restricted reader's rarer opcodes (``ingest.memsnap.reader``): the long strings and bytes, protocol 0's
newline-terminated opcodes, the explicit memo PUTs, tuples, MARK-consuming opcodes, sets, and the globals — refused
unless one of ``ALLOWED_GLOBALS``, which stand for a plain container and are only ever called with plain data.
Every opcode that builds an object some other way (``INST``, ``OBJ``, ``NEWOBJ``, ``BUILD``, ``PERSID``, ``EXT*``,
out-of-band buffers) is refused."""

from __future__ import annotations

import struct

from .values import BadPickle, RefusedPickle

ALLOWED_GLOBALS = {("collections", "OrderedDict"): "dict", ("builtins", "set"): "list",
                   ("builtins", "frozenset"): "list", ("__builtin__", "set"): "list"}


class Mark:
    """A callable global that stands for a plain container (``ALLOWED_GLOBALS``)."""

    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name


def rare(r, op: int, pos: int, stack: list, metastack: list):
    """Every other opcode; returns (pos, stack, metastack) (a MARK-consuming opcode changes the stack)."""
    at = r.base + pos
    data = r.data
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
        pos = r._need(pos, 5 + n)
        raw = r.data[pos + 5:pos + 5 + n]
        stack.append(r._text(raw, pos) if name == "BINUNICODE" else
                     raw if name == "BINBYTES" else raw.decode("latin-1"))
        return pos + 5 + n, stack, metastack
    if name in ("BINUNICODE8", "BINBYTES8", "BYTEARRAY8"):
        n = struct.unpack_from("<Q", data, pos + 1)[0]
        pos = r._need(pos, 9 + n)
        raw = r.data[pos + 9:pos + 9 + n]
        stack.append(r._text(raw, pos) if name == "BINUNICODE8" else bytes(raw))
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
        pos = r._need(pos, 5 + n)
        stack.append(int.from_bytes(r.data[pos + 5:pos + 5 + n], "little", signed=True))
        return pos + 5 + n, stack, metastack
    if name == "BINFLOAT":
        stack.append(struct.unpack_from(">d", data, pos + 1)[0])
        return pos + 9, stack, metastack
    if name in ("BINPUT", "LONG_BINPUT"):
        if not stack:
            raise BadPickle(f"byte {at}: {name} on an empty stack")
        slot = data[pos + 1] if name == "BINPUT" else struct.unpack_from("<I", data, pos + 1)[0]
        r._memo_put(slot, stack[-1])
        return pos + (2 if name == "BINPUT" else 5), stack, metastack
    if name in ("INT", "LONG", "FLOAT", "STRING", "UNICODE", "GET", "PUT"):
        return _text_op(r, name, pos, stack, metastack)
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
            target = r._new_list(stack, metastack)
            if items:
                r._append(target, items, at)
            stack.append(target)
        elif name == "FROZENSET":
            stack.append(list(items))
        elif name == "DICT":
            d = r._new_dict(stack, metastack)
            r._set_items(d, items, at)
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
        return _global(r, name, pos, stack, metastack)
    if name == "REDUCE":
        if len(stack) < 2 or not isinstance(stack[-2], Mark) or not isinstance(stack[-1], tuple):
            raise RefusedPickle(f"byte {at}: refused REDUCE: only calls of {_allowed()} with plain arguments "
                                "are read (loading this pickle could run code)")
        args = stack.pop()
        mark = stack.pop()
        plain = _call_plain(mark, args, at)
        # made where EMPTY_DICT / EMPTY_LIST would make it (an OrderedDict root is the root)
        target = r._new_dict(stack, metastack) if mark.kind == "dict" else r._new_list(stack, metastack)
        if plain:
            if isinstance(target, dict):
                r._set_items(target, [v for kv in plain.items() for v in kv], at)
            else:
                r._append(target, plain, at)
        stack.append(target)
        return pos + 1, stack, metastack
    raise BadPickle(f"byte {at}: opcode {name} is not read")  # (every opcode is handled above)

def _text_op(r, name: str, pos: int, stack: list, metastack: list):
    """Protocol 0's newline-terminated opcodes."""
    at = r.base + pos
    end = r.data.find(b"\n", pos + 1)
    while end < 0:
        if len(r.data) - pos > 1 << 20:
            raise BadPickle(f"byte {at}: {name} argument longer than 1 MB")
        pos = r._need(pos, len(r.data) - pos + 1)
        end = r.data.find(b"\n", pos + 1)
    line = r.data[pos + 1:end]
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
            stack.append(r._memo_get(int(line), at))
        elif name == "PUT":
            if not stack:
                raise BadPickle(f"byte {at}: PUT on an empty stack")
            r._memo_put(int(line), stack[-1])
    except ValueError as exc:
        if isinstance(exc, BadPickle):
            raise
        raise BadPickle(f"byte {at}: bad {name} argument {line[:40]!r}") from None
    return end + 1, stack, metastack

def _global(r, name: str, pos: int, stack: list, metastack: list):
    at = r.base + pos
    if name == "STACK_GLOBAL":
        if len(stack) < 2 or not all(isinstance(v, str) for v in stack[-2:]):
            raise RefusedPickle(f"byte {at}: refused STACK_GLOBAL (loading this pickle could run code)")
        qual = stack.pop()
        module = stack.pop()
        end = pos + 1
    else:
        first = r.data.find(b"\n", pos + 1)
        second = r.data.find(b"\n", first + 1) if first >= 0 else -1
        if first < 0 or second < 0 or second - pos > 512:
            raise RefusedPickle(f"byte {at}: refused GLOBAL (loading this pickle could run code)")
        module = r.data[pos + 1:first].decode("latin-1")
        qual = r.data[first + 1:second].decode("latin-1")
        end = second + 1
    kind = ALLOWED_GLOBALS.get((module, qual))
    if kind is None:
        raise RefusedPickle(f"byte {at}: refused global {module}.{qual}: a memory snapshot holds only dicts, "
                            "lists and numbers, and loading this pickle could run code")
    stack.append(Mark(kind, f"{module}.{qual}"))
    return end, stack, metastack


def _allowed() -> str:
    return ", ".join(f"{m}.{q}" for m, q in ALLOWED_GLOBALS)


def _call_plain(mark: Mark, args: tuple, at: int):
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
