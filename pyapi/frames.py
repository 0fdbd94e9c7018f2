"""Rows to pandas DataFrames, Arrow tables, CSV and Parquet, keeping integers exact.

Epoch nanoseconds (~1.7e18) are beyond the 2**53 a float holds exactly, so a column of integers with gaps becomes
pandas' nullable ``Int64``, never ``float64``. Nested values (an advice finding's ``metrics``) stay dicts in a
DataFrame and become JSON text in Arrow, CSV and Parquet.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ascendscope.tables import Table

FORMATS = ("csv", "parquet")


def _dtype(values: list) -> str | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, bool) for v in present):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "Int64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float64"
    return None


def to_frame(table: Table) -> pd.DataFrame:
    """A DataFrame of the table's rows, its columns in the table's order."""
    data = {c: [r.get(c) for r in table.rows] for c in table.columns}
    frame = pd.DataFrame({c: pd.Series(v, dtype=_dtype(v) or object) for c, v in data.items()},
                         columns=list(table.columns))
    return frame.reset_index(drop=True)


def flat(frame: pd.DataFrame) -> pd.DataFrame:
    """Dict and list cells as JSON text (what Arrow, CSV and Parquet hold)."""
    out = frame.copy()
    for c in out.columns:
        if out[c].dtype == object and out[c].map(lambda v: isinstance(v, (dict, list))).any():
            out[c] = out[c].map(lambda v: None if v is None else json.dumps(v, default=str, ensure_ascii=False)
                                if isinstance(v, (dict, list)) else v)
    return out


def to_arrow(frame: pd.DataFrame):
    import pyarrow as pa

    return pa.Table.from_pandas(flat(frame), preserve_index=False)


def format_of(path: str | os.PathLike, fmt: str | None = None) -> str:
    fmt = (fmt or Path(path).suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise ValueError(f"cannot tell the format of {path}: give format= one of {', '.join(FORMATS)}")
    return fmt


def write(frame: pd.DataFrame, path: str | os.PathLike, fmt: str | None = None) -> Path:
    """The frame as ``path`` (CSV or Parquet, from ``fmt`` or the file's suffix), written whole then renamed."""
    target = Path(path)
    fmt = format_of(target, fmt)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        to_bytes(frame, fmt, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def to_bytes(frame: pd.DataFrame, fmt: str, path: str | os.PathLike | None = None) -> bytes | None:
    """CSV (RFC 4180, ``\\r\\n`` line ends, like the views' CSV downloads) or Parquet, to ``path`` or as bytes."""
    if fmt == "csv":
        text = flat(frame).to_csv(index=False, lineterminator="\r\n")
        if path is None:
            return text.encode("utf-8")
        Path(path).write_text(text, encoding="utf-8", newline="")
        return None
    import pyarrow.parquet as pq

    table = to_arrow(frame)
    if path is not None:
        pq.write_table(table, str(path))
        return None
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def exact_integers(table):
    """A query's Arrow result with its whole-number decimals — DuckDB's ``sum`` of integers is a HUGEINT, exported
    as ``decimal128(38, 0)``, as is any ``DECIMAL(p, 0)`` — as int64 where every value fits (a float would lose
    epoch ns past 2**53); a column beyond int64 is kept as it is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        if pa.types.is_decimal(field.type) and field.type.scale == 0:
            try:
                column = pc.cast(table.column(i), pa.int64(), safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            table = table.set_column(i, pa.field(field.name, pa.int64(), field.nullable), column)
    return table


def sql_frame(table) -> pd.DataFrame:
    """The DataFrame of a query's Arrow result as DuckDB itself converts one (``fetchdf``: nullable ``Int64`` for
    integers with NULLs, timestamps, lists…), whole numbers kept whole: :func:`exact_integers`, and a whole-number
    column beyond int64 as Python ints."""
    import duckdb
    import pyarrow as pa

    table = exact_integers(table)
    frame = duckdb.connect().from_arrow(table).df()
    for i, field in enumerate(table.schema):
        if pa.types.is_decimal(field.type) and field.type.scale == 0:
            frame.isetitem(i, pd.Series([None if v is None else int(v) for v in table.column(i).to_pylist()],
                                        dtype=object))
    return frame
