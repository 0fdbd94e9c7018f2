"""One CSV kind of many small ranks in one DuckDB read, instead of one read (and ~10 statements) per file.

A DuckDB statement costs a millisecond or more whatever its size, and reading a CSV takes about ten
(``csvfiles.CsvLoad``): for a rank of a few hundred kB that fixed cost, not the bytes, is the ingest time. Here
the files of one kind whose header lines are identical are concatenated into one file, each file's rows preceded
by a marker row naming it, and typed like one CSV (``csvfiles``: the same column plan, type inference over all of
them, the same exact conversions); each row gets its file's rank and its row number within its file, from the
markers' positions (computed in numpy and joined to the file's rows by position, with no sort or window over
them). Past its header, DuckDB reads the file twice (the markers, the typed rows; once more for the ranks' values
in scientific notation, when a row holds an e where they are looked for) and stores no table of its text. The
result is the table the per-file loads would make, unioned: ``{out}{table}`` with ``rank`` and ``src_row``.

Anything unusual goes through ``CsvLoad`` file by file instead, so its warnings stay exact: a file that is empty,
too wide, not UTF-8, whose header no other file shares, or a batch in which DuckDB rejects a row, a marker does
not come back where it was put (an unterminated quote would swallow it), or a numeric column's cell gives no
number (CsvLoad names it).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

from .columns import arrow_table
from .csvcells import FLAGS, CellFacts, _quote_ident, flags_column, is_blank_bytes, sci_warning
from .csvfiles import MAX_COLUMNS, TABLES, CsvLoad, _quote_text, bad_cell, column_plan

MARKER = "\x01ascendscope-file:"  # + the file's index + "\x01": a cell no profiler writes
MARKER_RE = "^\x01ascendscope-file:([0-9]+)\x01$"
MAP = "_csvmany_rows"  # each row's rank and row number, registered on the batch's cursor


@dataclass
class CsvResult:
    """What loading one rank's file gave (as ``CsvLoad``: rows, status, warnings), or the error that stopped it."""

    rows: int = 0
    status: str = "loaded"
    warnings: list[str] = field(default_factory=list)
    error: Exception | None = None


def load_many(cur: duckdb.DuckDBPyConnection, prefix: str, kind: str, items: list[tuple[int, Path, str]],
              workdir: Path, out_prefix: str) -> dict[int, CsvResult]:
    """Load the files ``items`` ((rank, path, display name), one file per rank) of one CSV kind into
    ``{out_prefix}{table}`` (scratch tables under ``prefix``); rank -> its result."""
    table = TABLES[kind]
    results: dict[int, CsvResult] = {}
    batches: dict[bytes, list[tuple[int, Path, str, bytes]]] = {}
    alone: list[tuple[int, Path, str]] = []
    for rank, path, display in items:
        data = _plain_body(path)
        if data is None:
            alone.append((rank, path, display))
            continue
        header, body = data
        batches.setdefault(header, []).append((rank, path, display, body))
    parts: list[str] = []
    n = 0
    for header, files in batches.items():
        if len(files) < 2:
            alone.extend((r, p, d) for r, p, d, _ in files)
            continue
        part = f"{out_prefix}{table}__b{n}"
        got = _load_batch(cur, prefix, table, header, files, workdir / f"{table}_{n}.csv", part)
        if got is None:  # DuckDB did not read the batch as the files it was made of: file by file instead
            alone.extend((r, p, d) for r, p, d, _ in files)
            continue
        results.update(got)
        parts.append(part)
        n += 1
    for i, (rank, path, display) in enumerate(alone):
        cl = CsvLoad(cur, f"{prefix}f{i}_", kind, path, rank, display, workdir, out_prefix=f"{out_prefix}f{i}_")
        part = cl.out
        try:
            results[rank] = CsvResult(rows=cl.load(), status=cl.status, warnings=cl.warnings)
            parts.append(part)
        except (ValueError, OSError, UnicodeError, duckdb.Error) as exc:
            results[rank] = CsvResult(status="failed", error=exc)
    if len(parts) == 1:  # (the usual case: no copy)
        cur.execute(f"DROP TABLE IF EXISTS {out_prefix}{table}")
        cur.execute(f"ALTER TABLE {parts[0]} RENAME TO {(out_prefix + table).rsplit('.', 1)[-1]}")
    elif parts:
        cur.execute(f"CREATE OR REPLACE TABLE {out_prefix}{table} AS "
                    + " UNION ALL BY NAME ".join(f"SELECT * FROM {t}" for t in parts))
        for t in parts:
            cur.execute(f"DROP TABLE {t}")
    return results


def _plain_body(path: Path) -> tuple[bytes, bytes] | None:
    """(header line without a BOM or line end, the rest) of a file that can join a batch: not empty, not wider
    than MAX_COLUMNS, valid UTF-8; None for any other (CsvLoad then says what is wrong with it)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if is_blank_bytes(data):
        return None
    try:
        data.isascii() or data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    data = data.removeprefix(b"\xef\xbb\xbf")
    end = data.find(b"\n")
    if end < 0:
        return None
    header = data[:end].rstrip(b"\r")
    try:
        width = len(next(csv.reader([header.decode("utf-8")]), []))
    except csv.Error:
        return None
    if width > MAX_COLUMNS or width == 0:
        return None
    body = data[end + 1:]
    if body and not body.endswith(b"\n"):
        body += b"\n"
    return header, body


def _load_batch(cur, prefix: str, table: str, header: bytes, files: list, combined: Path,
                out: str) -> dict[int, CsvResult] | None:
    combined.parent.mkdir(parents=True, exist_ok=True)
    with open(combined, "wb") as fh:
        fh.write(header + b"\n")
        for i, (_, _, _, body) in enumerate(files):
            fh.write(f"{MARKER}{i}\x01\n".encode())
            fh.write(body)
    rej = "rej" + re.sub(r"[^0-9A-Za-z_]", "_", prefix) + "many"
    loader = CsvLoad(cur, prefix, _kind(table), combined, 0, combined.name, combined.parent)
    try:
        headers = [r[0] for r in cur.execute(f"DESCRIBE SELECT * FROM {loader._reader(combined, None)}").fetchall()][1:]
        first, marker = _quote_ident(headers[0]), _quote_text(MARKER_RE)
        # the rows, and where the markers are: one pass over the file (its rows are not stored as text)
        rows, at, found = cur.execute(
            f"SELECT count(*), list(src_row ORDER BY src_row) FILTER (WHERE regexp_full_match({first}, '{marker}')), "
            f"list(regexp_extract({first}, '{marker}', 1) ORDER BY src_row) FILTER (WHERE regexp_full_match("
            f"{first}, '{marker}')) FROM {loader._reader(combined, rej)}").fetchall()[0]  # (fetchone would leave
        # the statement open, and its rejects table not yet made)
        rejects = cur.execute(f"SELECT count(*) FROM {rej}_errors").fetchone()[0]
        cur.execute(f"DROP TABLE IF EXISTS {rej}_errors; DROP TABLE IF EXISTS {rej}_scans")
        # (no row before the first marker: a marker then starts every file's rows)
        if rejects or [int(i) for i in found or []] != list(range(len(files))) or at[0] != 1:
            return None
        at = np.array(at, dtype=np.int64)  # file i's rows lie after at[i]
        ranks = [r for r, _, _, _ in files]
        # each row's rank and row number within its file, in the file's order (src_row 1..), joined to the file's
        # rows by position: no sort, window or search over the rows in SQL. A marker row itself gets row 0.
        src_row = np.arange(1, rows + 1, dtype=np.int64)
        file_of = np.searchsorted(at, src_row, side="right") - 1
        cur.register(MAP, arrow_table({
            "rank_": np.asarray(ranks, dtype=np.int32)[np.maximum(file_of, 0)],
            "row_": np.where(file_of >= 0, src_row - at[np.maximum(file_of, 0)], 0).astype(np.int32)}))
        # (the reader gives the rows in file order, as the pass above numbered them: it reads with one thread)
        numbered = f"(SELECT * FROM {MAP} POSITIONAL JOIN {loader._reader(combined, None, numbered=False)})"
        # the typed rows in one more pass, as CsvLoad makes them: the undecided columns' types from the first rows,
        # checked by a row flag (counted over every row and the table made again when a later cell contradicts
        # them); a row with a cell to name (its flags) sends the batch file by file
        rows_only = f"(SELECT * FROM {numbered} WHERE row_ > 0)"
        facts = CellFacts(column_plan(table, headers))
        if facts.undecided and not facts.guess(cur, rows_only):
            facts.count_text(cur, rows_only)
        flagged, flags = _typed(cur, facts, rows_only, out)
        if flagged.get("__guess"):
            facts.count_text(cur, rows_only)
            flagged, flags = _typed(cur, facts, rows_only, out)
        if flagged.get("__odd") and cur.execute(  # a cell to name: file by file, with CsvLoad's warnings
                f"SELECT count(*) FROM {rows_only} WHERE "
                + " OR ".join(bad_cell(h, t, e) for h, t, e in facts.converted())).fetchone()[0]:
            cur.execute(f"DROP TABLE IF EXISTS {out}")
            return None
        if flags:
            cur.execute(f"ALTER TABLE {out} DROP COLUMN {FLAGS}")
        results = {r: CsvResult() for r in ranks}
        for rank, rows in cur.execute(f"SELECT rank, count(*) FROM {out} GROUP BY rank").fetchall():
            results[int(rank)].rows = int(rows)
        if flagged.get("__sci"):  # (CsvLoad's warning, per rank: every such cell gave a value, or it is odd)
            for rank, *counts in cur.execute(f"SELECT rank_, {', '.join(facts.sci_parts(converted=False))} "
                                             f"FROM {rows_only} GROUP BY rank_").fetchall():
                results[int(rank)].warnings += [sci_warning(h, n) for (h, _), n in zip(facts.sci_columns, counts) if n]
        return results
    except duckdb.Error:
        cur.execute(f"DROP TABLE IF EXISTS {rej}_errors; DROP TABLE IF EXISTS {rej}_scans")
        cur.execute(f"DROP TABLE IF EXISTS {out}")
        return None
    finally:
        try:
            cur.unregister(MAP)
        except duckdb.Error:
            pass
        combined.unlink(missing_ok=True)


def _typed(cur, facts: CellFacts, rows: str, out: str) -> tuple[dict[str, int], dict[str, str]]:
    """The batch's typed table from its text ``rows`` with the row flags it needs: (the rows each flag marks, the
    flags)."""
    flags = facts.row_flags()
    selects = ["rank_ AS rank", "row_ AS src_row"]
    selects += [f"{e.format(c=_quote_ident(h))} AS {_quote_ident(t)}" for h, t, e in facts.plan]
    selects += flags_column(flags)
    cur.execute(f"CREATE OR REPLACE TABLE {out} AS SELECT {', '.join(selects)} FROM {rows}")
    return facts.count_stored(cur, out, flags)[1], flags


def _kind(table: str) -> str:
    return next(k for k, t in TABLES.items() if t == table)
