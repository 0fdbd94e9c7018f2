"""The compact binary answer of the timeline's column endpoints (slices, counters, flows): typed arrays instead of
JSON number lists, asked for with ``Accept: application/vnd.ascendscope.columns`` (JSON stays the default).

Layout (all integers little-endian)::

    "ASC1"                       4 bytes, the format and its version
    header length H              uint32
    header                       H bytes of UTF-8 JSON: {"body": ..., "columns": [[type, offset, count], ...]}
    zero padding                 to a multiple of 8 bytes from the start of the answer
    column data                  each column at its offset (from the start of this section, a multiple of 8)

``body`` is the JSON answer itself, except that each numeric array is replaced by ``{"$col": i}``, column ``i``
of ``columns`` (a column entry may carry a fourth number, ``base``, added to each of its values), and each array
of strings by ``{"$str": i, "values": [distinct strings]}``, column ``i`` holding each row's index into
``values`` (-1 for null). Column types: ``i8``, ``i16``, ``i32``, ``i64``, ``f64`` (NaN where the JSON answer has
null) and ``int53`` (integers carried as float64, exact up to 2**53, so JavaScript reads them as a
``Float64Array`` with no conversion). Integers are sent in the narrowest of ``i8``/``i16``/``i32``/``int53``/
``i64`` that holds them, or that holds their distance from the smallest of them (then ``base``, within 2**53).
Arrays that hold nulls stay JSON lists in the body. :func:`decode` turns an answer back into the JSON answer
(``as_lists=True``: exactly what ``json.loads`` of the JSON answer gives) or into numpy arrays; the
browser's decoder is ``frontend/static/js/common/columns.js``.
"""

from __future__ import annotations

import json
import struct
import weakref

import numpy as np
import orjson

MEDIA_TYPE = "application/vnd.ascendscope.columns"
MAGIC = b"ASC1"
ALIGN = 8
INT53 = 2 ** 53
DTYPES = {"i8": "<i1", "i16": "<i2", "i32": "<i4", "i64": "<i8", "f64": "<f8", "int53": "<f8"}
INT_TYPES = tuple((name, dtype, int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
                  for name, dtype in (("i8", np.int8), ("i16", np.int16), ("i32", np.int32)))
_ENCODED: dict[int, tuple[weakref.ref, tuple[str, bytes, int]]] = {}  # id(array) → (ref, its encoding)


def wants_columns(accept: str | None) -> bool:
    """True when the ``Accept`` header asks for this format (before JSON, or alone)."""
    if not accept or MEDIA_TYPE not in accept:
        return False
    ranked = [part.split(";")[0].strip() for part in accept.split(",")]
    return MEDIA_TYPE in ranked and (
        "application/json" not in ranked or ranked.index(MEDIA_TYPE) < ranked.index("application/json"))


def encode(answer) -> bytes:
    """The answer (dicts, lists, numpy arrays, scalars) in the binary layout above."""
    columns: list[list] = []
    chunks: list[bytes] = []
    offset = [0]

    def add(kind: str, data: bytes, count: int, base: int = 0) -> int:
        columns.append([kind, offset[0], count] + ([base] if base else []))
        chunks.append(data)
        pad = -len(data) % ALIGN
        if pad:
            chunks.append(b"\0" * pad)
        offset[0] += len(data) + pad
        return len(columns) - 1

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        if isinstance(value, np.ndarray):
            return _array(value, add)
        if isinstance(value, np.generic):
            return value.item()
        return value

    body = walk(answer)
    header = orjson.dumps({"body": body, "columns": columns}, option=orjson.OPT_NON_STR_KEYS)
    head = MAGIC + struct.pack("<I", len(header)) + header
    head += b"\0" * (-len(head) % ALIGN)
    return head + b"".join(chunks)


def _array(a: np.ndarray, add) -> object:
    if a.ndim != 1:
        return a.tolist()
    kind = a.dtype.kind
    if kind in "iuf":
        name, data, base = _column(a)
        return {"$col": add(name, data, len(a), base)}
    if kind == "b":
        return a.tolist()
    if kind == "O" and all(v is None or isinstance(v, str) for v in a):
        codes, uniques = _dictionary(a)
        return {"$str": add("i32", codes.tobytes(), len(a)), "values": uniques}
    return a.tolist()


def _column(a: np.ndarray) -> tuple[str, bytes, int]:
    """A numeric array's (type, bytes, base), encoded once per array object: the timeline's answers are cached
    and the same arrays go to every request that asks (``server.querypool``), so each is encoded once, not once
    per request. The entry goes when the array does; an array must not change once encoded (answers never do)."""
    key = id(a)
    hit = _ENCODED.get(key)
    if hit is not None and hit[0]() is a:
        return hit[1]
    encoded = _int_column(a) if a.dtype.kind in "iu" else ("f64", a.astype("<f8", copy=False).tobytes(), 0)
    try:
        ref = weakref.ref(a, lambda _, key=key: _ENCODED.pop(key, None))
    except TypeError:  # an array that takes no weak reference: not remembered
        return encoded
    _ENCODED[key] = (ref, encoded)
    return encoded


def _int_column(a: np.ndarray) -> tuple[str, bytes, int]:
    """(type, bytes, base): the narrowest type that holds the values, or their distance from the smallest
    (``base``, when every value stays within 2**53: times in a window are close to each other, not to 0)."""
    if len(a) == 0:
        return "i8", b"", 0
    lo, hi = int(a.min()), int(a.max())
    for base in (0, lo) if -INT53 <= lo and hi <= INT53 else (0,):
        for name, dtype, low, high in INT_TYPES:
            if low <= lo - base and hi - base <= high:
                return name, (a - base if base else a).astype(dtype).tobytes(), base
    if -INT53 <= lo and hi <= INT53:
        return "int53", a.astype("<f8").tobytes(), 0
    return "i64", a.astype("<i8", copy=False).tobytes(), 0


def _dictionary(a: np.ndarray) -> tuple[np.ndarray, list]:
    index: dict = {}
    codes = np.fromiter((-1 if v is None else index.setdefault(v, len(index)) for v in a), dtype="<i4",
                        count=len(a))
    return codes, list(index)


def decode(data: bytes, *, as_lists: bool = False):
    """The answer back from :func:`encode`'s bytes: numpy arrays where it had columns, or with ``as_lists`` plain
    lists equal to the JSON answer (float NaN → None, integers as ``int``, string columns as lists of str)."""
    if data[:4] != MAGIC:
        raise ValueError("not an ascendscope columns answer (bad magic)")
    (size,) = struct.unpack_from("<I", data, 4)
    header = json.loads(data[8:8 + size])
    base = 8 + size + (-(8 + size) % ALIGN)
    columns = []
    for kind, offset, count, *shift in header["columns"]:
        if kind not in DTYPES:
            raise ValueError(f"unknown column type {kind!r}")
        a = np.frombuffer(data, dtype=DTYPES[kind], count=count, offset=base + offset)
        if kind == "int53" or shift:
            a = a.astype(np.int64) + (shift[0] if shift else 0)
        columns.append(a)

    def walk(value):
        if isinstance(value, dict):
            if "$col" in value and len(value) == 1:
                return _out(columns[value["$col"]], as_lists)
            if "$str" in value and len(value) == 2:
                values = value["values"]
                strings = [None if c < 0 else values[c] for c in columns[value["$str"]].tolist()]
                return strings if as_lists else np.array(strings, dtype=object)
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(header["body"])


def _out(a: np.ndarray, as_lists: bool):
    if not as_lists:
        return a
    if a.dtype.kind == "f":
        return [None if v != v else v for v in a.tolist()]
    return a.tolist()
