"""Read the ASCEND_PROFILER_OUTPUT CSVs into typed staging tables, driven by their headers.

Every column of the source is kept. Headers vary by CANN version, profiler level and metric set, so columns are
typed by name: a unit in parentheses decides the conversion (``(us)``/``(ms)`` -> exact integer ``_ns``, ``(MB)``
-> ``_mb`` …), a few known names are ids or counts, and any other column becomes numeric when all its values
parse as numbers, text otherwise. Cells are read as text first, so nothing is lost to type sniffing; tab-suffixed
timestamps and multi-line quoted fields are handled by DuckDB's CSV reader with explicit quoting rules.

A file whose header has more than ``MAX_COLUMNS`` columns is refused before DuckDB reads it: the reader's
buffers grow with the column count and cannot spill, so a very wide file would take the memory every other file
of the run shares.
"""

from __future__ import annotations

import codecs
import csv
import re
from pathlib import Path

import duckdb
import numpy as np

# profiler CSVs have fewer than 50 columns; 10,000 (a bad export) exhausted a 1 GB memory limit
MAX_COLUMNS = 512
_HEADER_BYTES = 4 << 20
READ_BLOCK = 16 << 20  # a file is checked (UTF-8, exponents) this much at a time
MAX_LINE_BYTES = 64 << 20  # the longest CSV line read
CSV_BUFFER_BYTES = 2 * MAX_LINE_BYTES  # DuckDB's CSV buffer (it must hold the longest line)

# file kind -> staging/final table name
TABLES = {
    "kernel_details": "kernels",
    "operator_details": "operators",
    "op_statistic": "op_statistic",
    "api_statistic": "api_statistic",
    "step_trace_time": "step_trace",
    "memory_record": "memory_record",
    "operator_memory": "operator_memory",
    "npu_module_mem": "npu_module_mem",
    "l2_cache": "l2_cache",
}

_UNIT = re.compile(r"^(.*?)\s*\(\s*(us|ms|MB|KB|%|GB/s|Byte|B)\s*\)\s*$")
_UNIT_RULES = {  # unit -> (suffix, macro)
    "us": ("_ns", "us_to_ns"),
    "ms": ("_ns", "ms_to_ns"),
    "MB": ("_mb", "to_double"),
    "KB": ("_kb", "to_double"),
    "%": ("_pct", "to_double"),
    "GB/s": ("_gbps", "to_double"),
    "Byte": ("_bytes", "to_double"),
    "B": ("_bytes", "to_double"),
}
RENAMES = {"block_num": "block_dim", "mix_block_num": "mix_block_dim"}
TABLE_RENAMES = {"kernels": {"start_time_ns": "start_ns"}}
INTEGER_COLUMNS = {"step_id", "model_id", "task_id", "stream_id", "context_id", "block_dim", "mix_block_dim",
                   "count", "device_id", "step"}
TEXT_COLUMNS = {"name", "type", "op_state", "accelerator_core", "hf32_eligible", "input_shapes",
                "input_data_types", "input_formats", "output_shapes", "output_data_types", "output_formats",
                "call_stack", "op_type", "core_type", "level", "api_name", "component", "stream_ptr",
                "device_type", "op_name", "device"}
# words a numeric column legitimately holds instead of a number (msprof's statistics give Device_id "host")
NAMED_NON_NUMBERS = {"device_id": ("host",)}
# step_trace_time.csv gives µs values without a unit in the header
UNITLESS_US = {"step_trace": {"computing", "communication_not_overlapped", "overlapped", "communication", "free",
                              "stage", "bubble", "communication_not_overlapped_and_exclude_receive",
                              "preparing"}}
# timestamp-like columns where scientific notation means a spreadsheet rounded the value
TIMESTAMP_HINT = re.compile(r"(start|timestamp|allocation_time|release_time)")


def snake(text: str) -> str:
    text = text.replace("\ufeff", "").strip()
    text = re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").lower()
    return text or "column"


def column_plan(table: str, headers: list[str], renames: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    """For each source header: (source header, target column, SQL expression over the text cell ``{c}``).
    ``renames`` maps target columns of another producer's file onto this table's (msprof's op_summary)."""
    plan = []
    used: set[str] = {"rank", "src_row"}
    for h in headers:
        m = _UNIT.match(h)
        if m:
            suffix, macro = _UNIT_RULES[m.group(2)]
            base = snake(m.group(1))
            target, expr = base + suffix, f"{macro}({{c}})"
        else:
            base = RENAMES.get(snake(h), snake(h))
            if base in UNITLESS_US.get(table, ()):
                target, expr = base + "_ns", "us_to_ns({c})"
            elif base in INTEGER_COLUMNS:
                target, expr = base, "to_bigint({c})"
            elif base in TEXT_COLUMNS:
                target, expr = base, "{c}"
            else:
                target, expr = base, None  # decided from the data
        target = (renames or {}).get(target, target)
        target = TABLE_RENAMES.get(table, {}).get(target, RENAMES.get(target, target))
        n, unique = 2, target
        while unique in used:
            unique, n = f"{target}_{n}", n + 1
        used.add(unique)
        plan.append((h, unique, expr))
    return plan


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_text(text: str) -> str:
    return text.replace("'", "''")


class CsvLoad:
    def __init__(self, cur: duckdb.DuckDBPyConnection, prefix: str, kind: str, path: Path, rank: int,
                 display: str, workdir: Path, out_prefix: str | None = None, renames: dict[str, str] | None = None):
        """Typed rows go to ``{out_prefix}{table}`` (default ``{prefix}{table}``); scratch tables use ``prefix``;
        ``renames``: see ``column_plan``."""
        self.cur, self.p, self.kind, self.path, self.rank = cur, prefix, kind, path, rank
        self.out = f"{out_prefix if out_prefix is not None else prefix}{TABLES[kind]}"
        self.display, self.workdir = display, workdir
        self.table = TABLES[kind]
        self.warnings: list[str] = []
        self.status = "loaded"
        self.rows = 0
        self.may_hold_exponents = True
        self.renames = renames

    def _check_width(self) -> None:
        """Refuse a file whose header line has more than MAX_COLUMNS columns (before reading the rest)."""
        with open(self.path, "rb") as fh:
            line = fh.readline(_HEADER_BYTES)
        # a header cut at _HEADER_BYTES still counts at least the columns it shows
        try:
            n = len(next(csv.reader([line.decode("utf-8", errors="replace").rstrip("\r\n")]), []))
        except csv.Error:  # a cell beyond the csv module's size limit: count the separators instead
            n = line.count(b",") + 1
        if n > MAX_COLUMNS:
            raise ValueError(f"{n} columns in the header, more than the {MAX_COLUMNS} a profiler CSV can have; "
                             "the file was not read")

    def _readable(self) -> Path:
        """The file itself, or a copy with invalid UTF-8 bytes replaced (and a warning). Read in blocks, so a
        file of gigabytes is checked in bounded memory."""
        self._check_width()
        self.may_hold_exponents = False
        first_bad, blank, start, carry, tail = None, True, 0, b"", b""
        with open(self.path, "rb") as fh:
            while True:
                block = fh.read(READ_BLOCK)
                data = carry + block
                if not block:  # the end: what was carried is checked as it is
                    cut = len(data)
                else:  # up to the last character that starts in this block, the rest with the next one
                    cut = len(data)
                    while cut > 0 and len(data) - cut < 4 and (data[cut - 1] & 0xC0) == 0x80:
                        cut -= 1
                    cut = cut - 1 if cut > 0 and data[cut - 1] >= 0xC0 else cut
                chunk, carry = data[:cut], data[cut:]
                blank = blank and not chunk.strip()
                if len(tail + chunk) >= 3:
                    self.may_hold_exponents = self.may_hold_exponents or _may_hold_exponents(tail + chunk)
                tail = (tail + chunk)[-2:]
                if first_bad is None:
                    try:
                        chunk.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        first_bad = start + exc.start
                start += len(chunk)
                if not block:
                    break
        if blank:
            raise ValueError("empty file")
        if first_bad is None:
            return self.path
        fixed = self.workdir / f"{self.p}{self.path.name}"
        with open(self.path, "rb") as fin, open(fixed, "w", encoding="utf-8") as fout:
            replacing = codecs.getincrementaldecoder("utf-8")("replace")
            while block := fin.read(READ_BLOCK):
                fout.write(replacing.decode(block))
            fout.write(replacing.decode(b"", final=True))
        self.warnings.append(f"bytes that are not UTF-8 (first at byte {first_bad}) replaced with U+FFFD")
        return fixed

    def _reader(self, src: Path, rejects: str | None) -> str:
        """The file as rows of text cells, numbered in file order (``src_row``). (The buffer is given: DuckDB's
        default is 16 lines of the longest allowed, 1 GiB here, which cannot be had under a 1 GB memory limit, so
        every CSV over ~1 GB failed to load.)"""
        keep = (f", store_rejects = true, rejects_table = '{rejects}_errors', rejects_scan = '{rejects}_scans'"
                if rejects else ", ignore_errors = true")
        return (f"(SELECT row_number() OVER () AS src_row, * FROM read_csv('{_quote_text(str(src))}', header = true, "
                "all_varchar = true, delim = ',', quote = '\"', escape = '\"', null_padding = true, "
                f"strict_mode = false, parallel = false, max_line_size = {MAX_LINE_BYTES}, "
                f"buffer_size = {CSV_BUFFER_BYTES}{keep}))")

    def load(self) -> int:
        src = self._readable()
        raw = f"{self.p}raw_{self.table}"
        rej = "rej" + re.sub(r"[^0-9A-Za-z_]", "_", self.p)
        try:
            described = self.cur.execute(f"DESCRIBE SELECT * FROM {self._reader(src, None)}").fetchall()
        except duckdb.Error as exc:  # DuckDB's first line names the file by its full path; say what is wrong
            detail = [line for line in str(exc).splitlines()[1:] if line.strip()][:1]
            raise ValueError("the CSV's layout could not be read (an unterminated quote, or rows with differing "
                             "columns?)" + (f": {detail[0].strip()}" if detail else "")) from exc
        headers = [r[0] for r in described][1:]
        plan = column_plan(self.table, headers, self.renames)
        undecided = [(h, t) for h, t, e in plan if e is None]
        if undecided:  # types decided from the data: keep the text cells for the passes over them
            self.cur.execute(f"CREATE OR REPLACE TABLE {raw} AS SELECT * FROM {self._reader(src, rej)}")
            source = raw
        else:  # every type is known from the header: convert while reading, in one pass
            source = self._reader(src, rej)
        decided = self._infer_types(raw, undecided)
        selects = [f"CAST({self.rank} AS INTEGER) AS rank", "CAST(src_row AS INTEGER) AS src_row"]
        for h, target, expr in plan:
            expr = expr or decided[target]
            col = f"{_quote_ident(h)}"
            selects.append(f"{expr.format(c=col)} AS {_quote_ident(target)}")
        self.cur.execute(f"CREATE OR REPLACE TABLE {self.out} AS SELECT {', '.join(selects)} "
                         f"FROM {source}")  # in file order: the scan keeps insertion order
        rejects = self.cur.execute(
            f"SELECT line, error_type, error_message FROM {rej}_errors ORDER BY line").fetchall()
        self.cur.execute(f"DROP TABLE IF EXISTS {rej}_errors; DROP TABLE IF EXISTS {rej}_scans")
        if rejects:
            self.status = "partial"
            first = rejects[0]
            self.warnings.append(f"{len(rejects)} rows could not be parsed and were skipped "
                                 f"(first at line {first[0]}: {first[2]})")
        text_source = raw if undecided else self._reader(src, None)
        converted = [(h, t, expr or decided[t]) for h, t, expr in plan if (expr or decided[t]) != "{c}"]
        self._check_conversions(text_source, converted)
        self._check_precision(text_source, plan)
        self.cur.execute(f"DROP TABLE IF EXISTS {raw}")
        self.rows = self.cur.execute(f"SELECT count(*) FROM {self.out}").fetchone()[0]
        return self.rows

    def _infer_types(self, raw: str, cols: list[tuple[str, str]]) -> dict[str, str]:
        if not cols:
            return {}
        # per column: cells, numbers, integers, blanks. A blank cell ("", N/A, None, null) is never a number,
        # so the blank test (a regex) only runs on the cells that are not; a decimal point is tested before the
        # integer cast (a failing cast is slow)
        parts = []
        for h, _ in cols:
            q = _quote_ident(h)
            parts += ["count(*)", f"count(TRY_CAST({q} AS DOUBLE))",
                      f"count(*) FILTER (WHERE NOT contains({q}, '.') AND TRY_CAST({q} AS BIGINT) IS NOT NULL)",
                      f"count(*) FILTER (WHERE TRY_CAST({q} AS DOUBLE) IS NULL AND is_blank({q}))"]
        row = self.cur.execute(f"SELECT {', '.join(parts)} FROM {raw}").fetchone()
        out = {}
        for i, (_, target) in enumerate(cols):
            cells, numbers, integers, blanks = row[4 * i:4 * i + 4]
            present = cells - blanks
            if present == 0 or numbers < present:
                out[target] = "{c}"
            elif integers < present:
                out[target] = "to_double({c})"
            else:
                out[target] = "to_bigint({c})"
        return out

    def _check_conversions(self, raw: str, converted: list[tuple[str, str, str]]) -> None:
        """Name the cells of numeric columns that hold something but gave no number ("not-a-number", "NaN",
        "1e999", a NUL byte…): they are left empty, and the file is partial. Only the columns with empty values in
        the typed table are looked at again (most have none)."""
        if not converted:
            return
        nulls = self.cur.execute("SELECT " + ", ".join(f"count(*) - count({_quote_ident(t)})" for _, t, _ in converted)
                                 + f" FROM {self.out}").fetchone()
        suspects = [(c, n) for c, n in zip(converted, nulls) if n]
        if not suspects:
            return
        # the common blanks ("", N/A) take plain comparisons: where they account for every empty value (the usual
        # case, e.g. the N/A metrics of HCCL rows), no cell needs the costlier test below
        plain = self.cur.execute("SELECT " + ", ".join(
            f"count(*) FILTER (WHERE {_quote_ident(h)} IS NULL OR {_quote_ident(h)} IN ('', 'N/A'))"
            for (h, _, _), _ in suspects) + f" FROM {raw}").fetchone()
        suspects = [c for (c, n), blank in zip(suspects, plain) if n > blank]
        if not suspects:
            return
        parts = []
        for h, target, expr in suspects:
            q = _quote_ident(h)
            named = ", ".join(f"'{w}'" for w in NAMED_NON_NUMBERS.get(target, ()))
            words = f" AND {q} NOT IN ({named})" if named else ""
            bad = f"({expr.format(c=q)} IS NULL AND NOT is_blank({q}){words})"
            parts += [f"count(*) FILTER (WHERE {bad})", f"arg_min({q}, src_row) FILTER (WHERE {bad})",
                      f"min(src_row) FILTER (WHERE {bad})"]
        row = self.cur.execute(f"SELECT {', '.join(parts)} FROM {raw}").fetchone()
        for i, (h, _, _) in enumerate(suspects):
            n, first, line = row[3 * i:3 * i + 3]
            if n:
                self.status = "partial"
                shown = first if len(first) <= 40 else first[:39] + "…"
                self.warnings.append(f"column '{h}': {n} values that are not numbers were left empty (the first, "
                                     f"{shown!r}, in data row {line})")

    def _check_precision(self, raw: str, plan) -> None:
        if not self.may_hold_exponents:
            return
        cols = [h for h, target, expr in plan
                if (expr or "").startswith(("us_to_ns", "to_bigint")) or TIMESTAMP_HINT.search(target)]
        if not cols:
            return
        exprs = {h: expr for h, _, expr in plan}
        counts = self.cur.execute("SELECT " + ", ".join(
            f"count(*) FILTER (WHERE is_sci({_quote_ident(h)}) AND {(exprs[h] or '{c}').format(c=_quote_ident(h))} "
            "IS NOT NULL)" for h in cols) + f" FROM {raw}").fetchone()
        for h, n in zip(cols, counts):
            if n:
                self.warnings.append(
                    f"column '{h}': {n} values in scientific notation (a spreadsheet re-saved this file); "
                    "they were loaded but keep only the digits shown")


def _may_hold_exponents(data: bytes) -> bool:
    """Whether some cell could be in scientific notation: a digit, then e or E, then a digit or a sign. A scan of
    the bytes that is much cheaper than testing every cell; when it finds nothing, no cell can match is_sci."""
    a = np.frombuffer(data, dtype=np.uint8)
    if len(a) < 3:
        return True
    e = np.flatnonzero((a[1:-1] | 0x20) == ord("e")) + 1
    before, after = a[e - 1], a[e + 1]
    digit_before = (before >= ord("0")) & (before <= ord("9"))
    number_after = ((after >= ord("0")) & (after <= ord("9"))) | (after == ord("+")) | (after == ord("-"))
    return bool(np.any(digit_before & number_after))
