"""Read the ASCEND_PROFILER_OUTPUT CSVs into typed staging tables, driven by their headers.

Every column of the source is kept. Headers vary by CANN version, profiler level and metric set, so columns are
typed by name: a unit in parentheses decides the conversion (``(us)``/``(ms)`` -> exact integer ``_ns``, ``(MB)``
-> ``_mb`` …), a few known names are ids or counts, and any other column becomes numeric when all its values
parse as numbers, text otherwise. Cells are read as text, so nothing is lost to type sniffing; tab-suffixed
timestamps and multi-line quoted fields are handled by DuckDB's CSV reader with explicit quoting rules.

The file is read once into its typed table (after a pass over the cells of the columns typed from their data, if
any; no table of the text is kept), with two flags per row saying whether a cell needs naming: a number column's
cell that gave no number and is no common blank, or an e in an integer or timestamp cell (values a spreadsheet
rewrote in scientific notation). Only then is the file read again, for those cells.

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
        # the types of the columns the header leaves undecided, from a pass over their cells alone; then the typed
        # table in one pass, with two row flags saying whether a cell needs a second look (a number column's cell
        # that gave no number and is no common blank; an e in an integer or timestamp cell): only then is the file
        # read again. (Typing a stored column in place instead costs a rewrite of it, in the run's file as well.)
        if facts.undecided:
            facts.count_text(self.cur, text)
        flags = facts.row_flags()
        selects = [f"CAST({self.rank} AS INTEGER) AS rank", "CAST(src_row AS INTEGER) AS src_row"]
        selects += [f"{e.format(c=_quote_ident(h))} AS {_quote_ident(t)}" for h, t, e in facts.plan]
        selects += [f"{sql} AS {name}" for name, sql in flags.items()]
        self.cur.execute(f"CREATE OR REPLACE TABLE {self.out} AS SELECT {', '.join(selects)} "
                         f"FROM {self._reader(src, rej)}")  # in file order: the scan keeps insertion order
        rejects = self.cur.execute(
            f"SELECT line, error_type, error_message FROM {rej}_errors ORDER BY line").fetchall()
        self.cur.execute(f"DROP TABLE IF EXISTS {rej}_errors; DROP TABLE IF EXISTS {rej}_scans")
        if rejects:
            self.status = "partial"
            first = rejects[0]
            self.warnings.append(f"{len(rejects)} rows could not be parsed and were skipped "
                                 f"(first at line {first[0]}: {first[2]})")
        self.rows, flagged = facts.count_stored(self.cur, self.out, flags)
        for name in flags:  # (a dropped column costs no rewrite)
            self.cur.execute(f"ALTER TABLE {self.out} DROP COLUMN {name}")
        if flagged.get("__odd"):
            self._check_conversions(text, facts.converted())
        if flagged.get("__sci"):
            self.warnings += facts.precision_warnings(self.cur, text)
        return self.rows

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
            q = _quote_ident(h)
            named = ", ".join(f"'{w}'" for w in NAMED_NON_NUMBERS.get(target, ()))
            words = f" AND {q} NOT IN ({named})" if named else ""
            bad = f"({expr.format(c=q)} IS NULL AND NOT is_blank({q}){words})"
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


SQL_TYPES = {"to_double({c})": "DOUBLE", "to_bigint({c})": "BIGINT"}


def is_blank_bytes(data: bytes) -> bool:
    """Whether ``data`` is only whitespace (its start looked at first: no copy of a file that is not)."""
    return not data[:4096].strip() and not data.strip()


def _plain_blank(q: str) -> str:
    return f"{q} IS NULL OR {q} IN ('', 'N/A')"


def _odd(q: str, expr: str) -> str:
    """A cell that gave no value and is no common blank (SQL over the cell ``q`` and its conversion ``expr``)."""
    return f"CASE WHEN {expr.format(c=q)} IS NULL THEN NOT ({_plain_blank(q)}) ELSE false END"


class CellFacts:
    """What a CSV's cells say, for a column plan (``column_plan``): the type of each column the header leaves
    undecided (numeric when all its values parse as numbers, integer when all are integers, text otherwise), and
    the values in scientific notation (a spreadsheet's rounding) of each integer or timestamp-like column.

    Each costlier test runs only on the cells a cheap one lets through (a CASE, which DuckDB evaluates in that
    order, where it may reorder an AND): a blank cell ("", N/A, None, null) is never a number, so the blank test
    (a regex) only runs on the cells that are not; a decimal point is tested before the integer cast (a failing
    cast is slow); the test for scientific notation only runs on cells that hold an e."""

    def __init__(self, plan: list[tuple[str, str, str | None]]):
        self.source_plan = plan
        self.undecided = [(h, t) for h, t, e in plan if e is None]
        self.sci_columns = [(h, (e or "{c}")) for h, t, e in plan
                            if (e or "").startswith(("us_to_ns", "to_bigint")) or TIMESTAMP_HINT.search(t)]
        self.decided: dict[str, str] = {}

    def infer_parts(self, named) -> list[str]:
        """Three counts per undecided column (``named``: (header, target) -> its SQL name in the rows counted)."""
        out = []
        for h, t in self.undecided:
            q = named(h, t)
            out += [f"count(TRY_CAST({q} AS DOUBLE))",
                    f"count(*) FILTER (WHERE CASE WHEN contains({q}, '.') THEN false "
                    f"ELSE TRY_CAST({q} AS BIGINT) IS NOT NULL END)",
                    f"count(*) FILTER (WHERE CASE WHEN TRY_CAST({q} AS DOUBLE) IS NULL THEN is_blank({q}) "
                    "ELSE false END)"]
        return out

    def decide(self, cells: int, counts) -> None:
        """The undecided columns' SQL, from ``infer_parts``' counts over ``cells`` rows."""
        for i, (_, target) in enumerate(self.undecided):
            numbers, integers, blanks = counts[3 * i:3 * i + 3]
            present = cells - blanks
            if present == 0 or numbers < present:
                self.decided[target] = "{c}"
            elif integers < present:
                self.decided[target] = "to_double({c})"
            else:
                self.decided[target] = "to_bigint({c})"

    def sci_parts(self, converted: bool = True) -> list[str]:
        """Per integer or timestamp-like column, its values in scientific notation (with ``converted``, only those
        that gave a value), over rows named as in the file's header."""
        out = []
        for h, e in self.sci_columns:
            q = _quote_ident(h)
            value = f" AND {e.format(c=q)} IS NOT NULL" if converted else ""
            out.append(f"count(*) FILTER (WHERE CASE WHEN contains({q}, 'e') OR contains({q}, 'E') "
                       f"THEN is_sci({q}){value} ELSE false END)")
        return out

    def row_flags(self) -> dict[str, str]:
        """Columns for the typed table's rows, over the file's text cells: ``__odd``, some cell of a numeric column
        (of those decided so far) gave no value and is no common blank; ``__sci``, some integer or timestamp-like
        cell holds an e."""
        flags = {}
        odd = []
        for h, t, e in self.source_plan:
            expr = e or self.decided.get(t)
            if expr not in (None, "{c}"):
                odd.append(_odd(_quote_ident(h), expr))
        if odd:
            flags["__odd"] = " OR ".join(f"({x})" for x in odd)
        if self.sci_columns:  # (one string of the row's cells, searched twice: cheaper than each cell's)
            cells = f"concat({', '.join(_quote_ident(h) for h, _ in self.sci_columns)})"
            flags["__sci"] = f"contains({cells}, 'e') OR contains({cells}, 'E')"
        return flags

    def count_text(self, cur, text: str) -> None:
        """Decide the undecided columns' types from the text rows ``text`` (named as in the file's header)."""
        row = cur.execute(f"SELECT count(*), {', '.join(self.infer_parts(lambda h, t: _quote_ident(h)))} "
                          f"FROM {text}").fetchone()
        self.decide(row[0], row[1:])

    def count_stored(self, cur, table: str, flags: dict[str, str]) -> tuple[int, dict[str, int]]:
        """Over a typed table (its undecided columns, if not decided yet, stored as text: decide their types): its
        rows, and how many of them each flag marks."""
        pending = [u for u in self.undecided if u[1] not in self.decided]
        parts = ["count(*)", *(f"count(*) FILTER (WHERE {name})" for name in flags)]
        if pending:
            parts += self.infer_parts(lambda h, t: _quote_ident(t))
        row = cur.execute(f"SELECT {', '.join(parts)} FROM {table}").fetchone()
        if pending:
            self.decide(row[0], row[1 + len(flags):])
        return row[0], dict(zip(flags, row[1:1 + len(flags)]))

    @property
    def plan(self) -> list[tuple[str, str, str]]:
        """The column plan with every column's SQL decided."""
        return [(h, t, e or self.decided[t]) for h, t, e in self.source_plan]

    def converted(self) -> list[tuple[str, str, str]]:
        return [(h, t, e) for h, t, e in self.plan if e != "{c}"]

    def precision_warnings(self, cur, text: str) -> list[str]:
        counts = cur.execute(f"SELECT {', '.join(self.sci_parts())} FROM {text}").fetchone()
        return [sci_warning(h, n) for (h, _), n in zip(self.sci_columns, counts) if n]


def sci_warning(column: str, n: int) -> str:
    return (f"column '{column}': {n} values in scientific notation (a spreadsheet re-saved this file); "
            "they were loaded but keep only the digits shown")
