"""A console answer's values, bounded before they become Python objects.

:func:`cut` shortens a DuckDB result's Arrow batch where it lies: every string to ``MAX_CELL_CHARS + 1``
characters, every binary to ``MAX_CELL_BYTES + 1`` bytes, every list and map to ``MAX_CELL_ITEMS + 1`` items, at
every depth (inside lists, structs and maps too). One past each cap is kept so that :func:`Cells.value`, which
makes a kept value JSON-ready, can tell a cut value from one that fits: it keeps the cap and marks the cut (a
``"…"`` item, a ``…`` suffix) and counts it. :func:`fitting` finds how many rows of a batch fit a byte budget by
the Arrow size of its rows, so a batch of huge rows is never converted whole.

Values leave JSON-ready: integers beyond 2**53 (epoch ns) as decimal strings, a whole-number decimal (DuckDB's
HUGEINT sum) as an integer, other non-JSON types as text.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import uuid

import pyarrow as pa
import pyarrow.compute as pc

MAX_CELL_CHARS = 2_000
MAX_CELL_BYTES = MAX_CELL_CHARS // 2  # a BLOB leaves as hex: two characters a byte
MAX_CELL_ITEMS = 1_000  # of a list, map or struct value; past it a "…" item says the rest was left out
EXACT_INT = 2 ** 53


def cut(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every value shortened to one past its cap (see the module note)."""
    columns = [cut_array(c) for c in batch.columns]
    if all(a is b for a, b in zip(columns, batch.columns)):
        return batch
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _holds_variable(t: pa.DataType) -> bool:
    """Whether values of type ``t`` can be long: strings, binaries, lists or maps at any depth."""
    if pa.types.is_dictionary(t):
        return _holds_variable(t.value_type)
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t)):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return True
    if pa.types.is_fixed_size_list(t):
        return t.list_size > MAX_CELL_ITEMS or _holds_variable(t.value_type)
    if pa.types.is_struct(t):
        return any(_holds_variable(t.field(i).type) for i in range(t.num_fields))
    return False


def _longest(lengths: pa.Array) -> int:
    found = pc.max(lengths).as_py() if len(lengths) else None
    return found or 0


def cut_array(arr: pa.Array) -> pa.Array:
    t = arr.type
    if not _holds_variable(t):
        return arr
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        if _longest(pc.utf8_length(arr)) > MAX_CELL_CHARS:
            return pc.utf8_slice_codeunits(arr, 0, MAX_CELL_CHARS + 1)
        return arr
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        if _longest(pc.binary_length(arr)) > MAX_CELL_BYTES:
            return pc.binary_slice(arr, 0, MAX_CELL_BYTES + 1)
        return arr
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_dictionary(t):
        return pa.DictionaryArray.from_arrays(arr.indices, cut_array(arr.dictionary))
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays([cut_array(f) for f in arr.flatten()], fields=fields, mask=mask)
    if pa.types.is_map(t):
        entries = cut_array(pa.ListArray.from_arrays(arr.offsets, arr.values, mask=mask))
        return pa.MapArray.from_arrays(entries.offsets, entries.values.field(0), entries.values.field(1),
                                       type=t, mask=mask)
    if pa.types.is_fixed_size_list(t):
        if t.list_size > MAX_CELL_ITEMS:
            return cut_array(arr.cast(pa.list_(t.value_field)))
        return pa.FixedSizeListArray.from_arrays(cut_array(arr.values), t.list_size, mask=mask)
    # a list: its items first cut in number (list_slice makes a compact child), then each item cut
    if _longest(pc.list_value_length(arr)) > MAX_CELL_ITEMS:
        arr = pc.list_slice(arr, 0, MAX_CELL_ITEMS + 1)
    if not _holds_variable(t.value_type):
        return arr
    build = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
    return build.from_arrays(arr.offsets, cut_array(arr.values), mask=mask)


def fitting(batch: pa.RecordBatch, budget: int) -> int:
    """How many leading rows of ``batch`` fit ``budget`` bytes by their Arrow size, plus one (so that the caller's
    exact measure, of JSON, decides where the answer stops): all of them when the batch fits."""
    if batch.num_rows == 0 or batch.nbytes <= budget:
        return batch.num_rows
    lo, hi = 0, batch.num_rows  # rows [0, lo) fit; [0, hi) may not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if batch.slice(0, mid).nbytes <= budget:
            lo = mid
        else:
            hi = mid
    return min(lo + 1, batch.num_rows)


def rows_of(batch: pa.RecordBatch) -> list[tuple]:
    """The batch's rows as tuples of Python values (maps as dicts), column by column: a name given twice keeps
    both columns."""
    columns = [c.to_pylist(maps_as_pydicts="lossy") for c in batch.columns]
    return list(zip(*columns)) if columns else [() for _ in range(batch.num_rows)]


class Cells:
    """Makes values JSON-ready (see the module note) and counts those it cut (``cut``)."""

    def __init__(self):
        self.cut = 0

    def value(self, v):
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, str):
            if len(v) <= MAX_CELL_CHARS:
                return v
            self.cut += 1
            return v[:MAX_CELL_CHARS] + "…"
        if isinstance(v, int):
            return v if -EXACT_INT <= v <= EXACT_INT else str(v)
        if isinstance(v, float):
            return v if v == v and v not in (float("inf"), float("-inf")) else None
        if isinstance(v, decimal.Decimal):
            if v.is_finite() and v.as_tuple().exponent == 0:  # a whole number: HUGEINT, DECIMAL(p, 0)
                return self.value(int(v))
            return str(v)
        if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
            return v.isoformat()
        if isinstance(v, datetime.timedelta):
            return str(v)
        if isinstance(v, pa.MonthDayNano):
            span = str(datetime.timedelta(days=v.days, microseconds=v.nanoseconds // 1000))
            return f"{v.months} months {span}" if v.months else span
        if isinstance(v, (bytes, bytearray, memoryview)):
            raw = bytes(v)
            if len(raw) <= MAX_CELL_BYTES:
                return raw.hex()
            self.cut += 1
            return raw[:MAX_CELL_BYTES].hex() + "…"
        if isinstance(v, uuid.UUID):
            return str(v)
        if isinstance(v, (list, tuple)):
            if len(v) <= MAX_CELL_ITEMS:
                return [self.value(x) for x in v]
            self.cut += 1
            return [self.value(x) for x in v[:MAX_CELL_ITEMS]] + ["…"]
        if isinstance(v, dict):
            out = {str(k): self.value(x) for k, x in itertools.islice(v.items(), MAX_CELL_ITEMS)}
            if len(v) > MAX_CELL_ITEMS:
                self.cut += 1
                out["…"] = "more left out"
            return out
        return str(v)


def cell(v):
    """One value as JSON takes it (see the module note)."""
    return Cells().value(v)
