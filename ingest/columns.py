"""Columns into DuckDB without importing pandas (pyarrow's numpy path and its Python-value builders import it:
~0.5 s of every ingest process): numpy columns as a zero-copy Arrow table, Python lists as list parameters (a few
rows), or as Arrow arrays built from their buffers (many rows: binding a list parameter costs ~1 µs a value, four
times the buffers')."""

from __future__ import annotations

import itertools
import operator

import numpy as np
import pyarrow as pa


def arrow_table(columns: dict[str, np.ndarray]) -> pa.Table:
    """A zero-copy Arrow table over 1-d numeric numpy arrays (no nulls)."""
    arrays = []
    for values in columns.values():
        values = np.ascontiguousarray(values)
        arrays.append(pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                            [None, pa.py_buffer(values)]))
    return pa.Table.from_arrays(arrays, names=list(columns))


def insert_columns(con, table: str, columns: list[list]) -> None:
    """Append rows given as columns (Python lists of one length, in the table's column order) to ``table`` in
    one statement: one list parameter per column, unnested side by side (a statement per row costs a
    millisecond each)."""
    if not columns or not len(columns[0]):
        return
    con.execute(f"INSERT INTO {table} SELECT " + ", ".join("unnest(?)" for _ in columns), columns)


ARROW_TYPES = {"BIGINT": (pa.int64(), np.int64, 0), "DOUBLE": (pa.float64(), np.float64, 0.0)}


def arrow_array(values, sql_type: str) -> pa.Array:
    """Python values of one SQL type (BIGINT: ints in int64's range, DOUBLE: floats, VARCHAR: str; None for NULL)
    as an Arrow array made from its buffers. Every pass over the values runs in C (``map``, numpy's conversions):
    a Python loop a value cost three times as much."""
    n = len(values)
    valid = np.fromiter(map(operator.is_not, values, itertools.repeat(None, n)), dtype=bool, count=n)
    nulls = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if nulls:
        filled = np.array(values, dtype=object)
        filled[~valid] = "" if sql_type == "VARCHAR" else ARROW_TYPES[sql_type][2]
    if sql_type == "VARCHAR":
        strings = filled.tolist() if nulls else values
        text = "".join(strings)
        if text.isascii():  # a byte a character: the lengths are the strings'
            data = text.encode("ascii")
            lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
        else:
            encoded = [v.encode() for v in strings]
            data = b"".join(encoded)
            lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return pa.Array.from_buffers(pa.large_string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                     null_count=nulls)
    typ, dtype, _zero = ARROW_TYPES[sql_type]
    data = filled.astype(dtype) if nulls else np.array(values, dtype=dtype)
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(data)], null_count=nulls)


def numpy_of(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A numeric or boolean Arrow column without nulls as a numpy array, from its buffers (pyarrow's own
    ``to_numpy`` imports pandas)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dtype = column.type.to_pandas_dtype() if not pa.types.is_boolean(column.type) else np.bool_
    parts = []
    for chunk in chunks:
        if chunk.null_count:
            raise ValueError("a column with nulls")
        data = chunk.buffers()[1]
        if pa.types.is_boolean(chunk.type):
            bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
            parts.append(bits[chunk.offset:chunk.offset + len(chunk)].astype(bool))
        else:
            parts.append(np.frombuffer(data, dtype=dtype, count=len(chunk),
                                       offset=chunk.offset * np.dtype(dtype).itemsize))
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def call(name: str, *args):
    """An Arrow compute function by name, e.g. ``call("take", values, indices)``: through ``pyarrow._compute``,
    whose import is cheap (``pyarrow.compute`` builds a Python wrapper and its docs for each of ~300 functions:
    ~0.1 s of every process that imports it)."""
    from pyarrow._compute import call_function

    return call_function(name, list(args))


def indices(rows: np.ndarray) -> pa.Array:
    """Row numbers as an Arrow array, for ``call("take", ...)``."""
    return arrow_table({"i": np.asarray(rows, dtype=np.int64)}).column("i").chunk(0)
