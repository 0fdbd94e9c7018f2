"""What a CSV's text cells say, counted in SQL for ``csvfiles.CsvLoad`` and ``csvmany``: the types of the columns
whose header gives none, and the cells that need naming (no number where one was due; scientific notation, which a
spreadsheet leaves when it re-saves a file and rounds the value to the digits shown)."""

from __future__ import annotations

import re

HEAD_ROWS = 2048  # the rows the types of columns without a unit are first decided from
# timestamp-like columns where scientific notation means a spreadsheet rounded the value
TIMESTAMP_HINT = re.compile(r"(start|timestamp|allocation_time|release_time)")


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


FLAGS = "__flags"  # the typed table's column of row flags while it is checked (``flags_column``)


def is_blank_bytes(data: bytes) -> bool:
    """Whether ``data`` is only whitespace (its start looked at first: no copy of a file that is not)."""
    return not data[:4096].strip() and not data.strip()


def flags_column(flags: dict[str, str]) -> list[str]:
    """The select item that keeps the row flags ``flags`` (name -> SQL) in one column, ``FLAGS``, flag i as bit
    2**i (one column to drop afterwards, not one per flag); none without flags."""
    if not flags:
        return []
    return [" + ".join(f"CASE WHEN {sql} THEN {1 << i} ELSE 0 END" for i, sql in enumerate(flags.values()))
            + f" AS {FLAGS}"]


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
        self.guessed = False  # decided from the first rows: to be checked against every cell

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
        cell holds an e; ``__guess``, some cell contradicts a type decided from the first rows."""
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
        if self.guessed:
            checks = [x for h, t in self.undecided if (x := self._contradicts(_quote_ident(h), self.decided[t]))]
            if checks:
                flags["__guess"] = " OR ".join(f"({x})" for x in checks)
        return flags

    def count_text(self, cur, text: str) -> None:
        """Decide the undecided columns' types from the text rows ``text`` (named as in the file's header)."""
        row = cur.execute(f"SELECT count(*), {', '.join(self.infer_parts(lambda h, t: _quote_ident(h)))} "
                          f"FROM {text}").fetchone()
        self.decide(row[0], row[1:])
        self.guessed = False

    def guess(self, cur, scan: str) -> bool:
        """Decide the undecided columns' types from the first ``HEAD_ROWS`` rows of ``scan`` (their decision for
        the whole file unless a later cell contradicts it: ``row_flags``' ``__guess``; a file of fewer rows is
        decided); False, nothing decided, when a column holds no value there."""
        row = cur.execute(f"SELECT count(*), {', '.join(self.infer_parts(lambda h, t: _quote_ident(h)))} "
                          f"FROM (SELECT * FROM {scan} LIMIT {HEAD_ROWS})").fetchone()
        if any(row[0] == row[3 * i + 3] for i in range(len(self.undecided))):  # (all blank: no guess)
            return False
        self.decide(row[0], row[1:])
        self.guessed = row[0] >= HEAD_ROWS  # (fewer: the whole file, decided)
        return True

    def _contradicts(self, q: str, expr: str) -> str | None:
        """A cell that a type decided from the first rows does not hold, when the whole file decides: a value that
        is no number (after numbers alone), or no integer (after integers alone). After a value that is no number,
        the column is text whatever follows."""
        not_number = f"TRY_CAST({q} AS DOUBLE) IS NULL THEN NOT is_blank({q})"
        if expr == "to_double({c})":
            return f"CASE WHEN {not_number} ELSE false END"
        if expr == "to_bigint({c})":
            return f"CASE WHEN {not_number} WHEN contains({q}, '.') THEN true ELSE TRY_CAST({q} AS BIGINT) IS NULL END"
        return None

    def count_stored(self, cur, table: str, flags: dict[str, str]) -> tuple[int, dict[str, int]]:
        """Over a typed table with the ``flags_column`` of ``flags`` (its undecided columns, if not decided yet,
        stored as text: decide their types): its rows, and how many of them each flag marks."""
        pending = [u for u in self.undecided if u[1] not in self.decided]
        parts = ["count(*)", *(f"count(*) FILTER (WHERE ({FLAGS} & {1 << i}) <> 0)" for i in range(len(flags)))]
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
