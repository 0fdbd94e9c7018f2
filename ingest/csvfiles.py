"""Read the ASCEND_PROFILER_OUTPUT CSVs into typed staging tables, driven by their headers.

Every column of the source is kept. Headers vary by CANN version, profiler level and metric set, so columns are
typed by name: a unit in parentheses decides the conversion (``(us)``/``(ms)`` -> exact integer ``_ns``, ``(MB)``
-> ``_mb`` …), a few known names are ids or counts, and any other column becomes numeric when all its values
parse as numbers, text otherwise. Cells are read as text, so nothing is lost to type sniffing; tab-suffixed
timestamps and multi-line quoted fields are handled by DuckDB's CSV reader with explicit quoting rules.

The file is read once into its typed table, no table of its text kept (``csvcells``): the types of the columns
typed from their data are decided from its first rows, and flags on each row say whether a cell needs another look
(one those rows did not foresee: the types are then counted over every cell and the table made again; a number
column's cell that gave no number and is no common blank, to be named; an e in an integer or timestamp cell: values
a spreadsheet rewrote in scientific notation, to be counted). Only then is the file read again.

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

from .csvcells import FLAGS, CellFacts, _plain_blank, _quote_ident, flags_column, is_blank_bytes

# profiler CSVs have fewer than 50 columns; 10,000 (a bad export) exhausted a 1 GB memory limit
MAX_COLUMNS = 512
_HEADER_BYTES = 4 << 20
READ_BLOCK = 16 << 20  # a file is checked (UTF-8) this much at a time
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
        file of gigabytes is checked in bounded memory (an ASCII block, the usual one, takes no decoding)."""
        self._check_width()
        first_bad, blank, start, carry = None, True, 0, b""
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
                blank = blank and is_blank_bytes(chunk)
                if first_bad is None and not chunk.isascii():
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

    def _reader(self, src: Path, rejects: str | None, numbered: bool = True) -> str:
        """The file as rows of text cells in file order, numbered (``src_row``) unless not ``numbered``. (The buffer
        is given: DuckDB's default is 16 lines of the longest allowed, 1 GiB here, which cannot be had under a 1 GB
        memory limit, so every CSV over ~1 GB failed to load.)"""
        keep = (f", store_rejects = true, rejects_table = '{rejects}_errors', rejects_scan = '{rejects}_scans'"
                if rejects else ", ignore_errors = true")
        scan = (f"read_csv('{_quote_text(str(src))}', header = true, all_varchar = true, delim = ',', quote = '\"', "
                f"escape = '\"', null_padding = true, strict_mode = false, parallel = false, "
                f"max_line_size = {MAX_LINE_BYTES}, buffer_size = {CSV_BUFFER_BYTES}{keep})")
        return f"(SELECT row_number() OVER () AS src_row, * FROM {scan})" if numbered else scan

    def load(self) -> int:
        src = self._readable()
        text = self._reader(src, None)
        rej = "rej" + re.sub(r"[^0-9A-Za-z_]", "_", self.p)
        try:
            described = self.cur.execute(f"DESCRIBE SELECT * FROM {text}").fetchall()
        except duckdb.Error as exc:  # DuckDB's first line names the file by its full path; say what is wrong
            detail = [line for line in str(exc).splitlines()[1:] if line.strip()][:1]
            raise ValueError("the CSV's layout could not be read (an unterminated quote, or rows with differing "
                             "columns?)" + (f": {detail[0].strip()}" if detail else "")) from exc
        headers = [r[0] for r in described][1:]
        facts = CellFacts(column_plan(self.table, headers, self.renames))
        # the types of the columns the header leaves undecided, from the file's first rows; then the typed table in
        # one pass, with row flags saying whether a cell needs a second look: one the first rows did not foresee
        # (then the types are counted over every cell and the table made again), a number column's cell that gave
        # no number and is no common blank, an e in an integer or timestamp cell. Only then is the file read again.
        # (Typing a stored column in place instead costs a rewrite of it, in the run's file as well.)
        if facts.undecided and not facts.guess(self.cur, self._reader(src, None, numbered=False)):
            facts.count_text(self.cur, text)
        rejects, flagged, flags = self._typed(src, rej, facts)
        if flagged.get("__guess"):
            facts.count_text(self.cur, text)
            rejects, flagged, flags = self._typed(src, rej, facts)
        if flags:  # (a dropped column costs no rewrite)
            self.cur.execute(f"ALTER TABLE {self.out} DROP COLUMN {FLAGS}")
        if rejects:
            self.status = "partial"
            first = rejects[0]
            self.warnings.append(f"{len(rejects)} rows could not be parsed and were skipped "
                                 f"(first at line {first[0]}: {first[2]})")
        if flagged.get("__odd"):
            self._check_conversions(text, facts.converted())
        if flagged.get("__sci"):
            self.warnings += facts.precision_warnings(self.cur, text)
        return self.rows

    def _typed(self, src: Path, rej: str, facts: CellFacts) -> tuple[list, dict[str, int], dict[str, str]]:
        """The typed table with its row flags: (the rows DuckDB rejected, the rows each flag marks, the flags)."""
        flags = facts.row_flags()
        selects = [f"CAST({self.rank} AS INTEGER) AS rank", "CAST(src_row AS INTEGER) AS src_row"]
        selects += [f"{e.format(c=_quote_ident(h))} AS {_quote_ident(t)}" for h, t, e in facts.plan]
        selects += flags_column(flags)
        self.cur.execute(f"CREATE OR REPLACE TABLE {self.out} AS SELECT {', '.join(selects)} "
                         f"FROM {self._reader(src, rej)}")  # in file order: the scan keeps insertion order
        rejects = self.cur.execute(
            f"SELECT line, error_type, error_message FROM {rej}_errors ORDER BY line").fetchall()
        self.cur.execute(f"DROP TABLE IF EXISTS {rej}_errors; DROP TABLE IF EXISTS {rej}_scans")
        self.rows, flagged = facts.count_stored(self.cur, self.out, flags)
        return rejects, flagged, flags

    def _check_conversions(self, text: str, converted: list[tuple[str, str, str]]) -> None:
        """Name the cells of numeric columns that hold something but gave no number ("not-a-number", "NaN",
        "1e999", a NUL byte…): they are left empty, and the file is partial. Only the columns with empty values in
        the typed table are looked at again (most have none)."""
        nulls = self.cur.execute("SELECT " + ", ".join(f"count(*) - count({_quote_ident(t)})" for _, t, _ in converted)
                                 + f" FROM {self.out}").fetchone()
        suspects = [(c, n) for c, n in zip(converted, nulls) if n]
        if not suspects:
            return
        # the common blanks ("", N/A) take plain comparisons: where they account for every empty value (the usual
        # case, e.g. the N/A metrics of HCCL rows), no cell needs the costlier test below
        plain = self.cur.execute("SELECT " + ", ".join(
            f"count(*) FILTER (WHERE {_plain_blank(_quote_ident(h))})" for (h, _, _), _ in suspects)
            + f" FROM {text}").fetchone()
        suspects = [c for (c, n), blank in zip(suspects, plain) if n > blank]
        if not suspects:
            return
        parts = []
        for h, target, expr in suspects:
            q, bad = _quote_ident(h), bad_cell(h, target, expr)
            parts += [f"count(*) FILTER (WHERE {bad})", f"arg_min({q}, src_row) FILTER (WHERE {bad})",
                      f"min(src_row) FILTER (WHERE {bad})"]
        row = self.cur.execute(f"SELECT {', '.join(parts)} FROM {text}").fetchone()
        for i, (h, _, _) in enumerate(suspects):
            n, first, line = row[3 * i:3 * i + 3]
            if n:
                self.status = "partial"
                shown = first if len(first) <= 40 else first[:39] + "…"
                self.warnings.append(f"column '{h}': {n} values that are not numbers were left empty (the first, "
                                     f"{shown!r}, in data row {line})")


def bad_cell(header: str, target: str, expr: str) -> str:
    """SQL: the cell of column ``header`` holds something, not a blank nor a word the column may hold instead of a
    number, and its conversion ``expr`` gave no value (a cell ``_check_conversions`` names)."""
    q = _quote_ident(header)
    named = ", ".join(f"'{w}'" for w in NAMED_NON_NUMBERS.get(target, ()))
    words = f" AND {q} NOT IN ({named})" if named else ""
    return f"({expr.format(c=q)} IS NULL AND NOT is_blank({q}){words})"
