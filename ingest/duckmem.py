"""DuckDB's memory limit: read as a size, and lent to work that holds memory outside it for a while."""

from __future__ import annotations

import re
from contextlib import contextmanager

import duckdb

LENT_MIN = 64 << 20  # less than this is not lent
LIMIT_FLOOR = 256 << 20  # the limit is never lowered below this


def mib(text: str) -> float:
    """A size as DuckDB and our options write it (``800MB``, ``762.9 MiB``, ``2GiB``) in MiB, MB read as MiB;
    ``inf`` for anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT])i?B\s*", text, re.IGNORECASE)
    if not m:
        return float("inf")
    return float(m.group(1)) * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[m.group(2).upper()]


@contextmanager
def lent(cur, nbytes: int):
    """DuckDB's memory limit (of the whole database: every cursor's) lowered by ``nbytes`` while inside, as work
    beside it holds that much in numpy or Arrow; restored on the way out. Nothing is lent under ``LENT_MIN``, nor
    when the limit cannot be read or DuckDB cannot free enough to meet the lower one."""
    before = None
    if nbytes >= LENT_MIN:
        text = str(cur.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        limit = mib(text) * (1 << 20)
        if limit != float("inf"):
            try:
                cur.execute(f"SET memory_limit = '{max(LIMIT_FLOOR, int(limit) - int(nbytes))}B'")
                before = text
            except duckdb.Error:
                before = None
    try:
        yield
    finally:
        if before is not None:
            cur.execute(f"SET memory_limit = '{before}'")
