"""Columns into DuckDB without importing pandas (pyarrow's numpy path and its Python-value builders import it:
~0.5 s of every ingest process): numpy columns as a zero-copy Arrow table, Python lists as list parameters."""

from __future__ import annotations

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
