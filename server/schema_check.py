"""A run database is served only by the ascendscope that reads its schema.

Every run database records ``meta.schema_version`` (``ingest.SCHEMA_VERSION`` of the ingest that wrote it). One
written under another version (or before the version was recorded) would answer with missing or misread columns,
so :func:`check_schema` refuses it as the file is opened (``server.db``), and :func:`mark_outdated` marks the run
failed with the reason; Retry (``POST /api/runs/{id}/retry``) ingests it again from its source. A file whose meta
table cannot be read at all is left to the damaged-file checks that follow.
"""

from __future__ import annotations

import time

import duckdb

from ascendscope.ingest import SCHEMA_VERSION

SCHEMA_SQL = "SELECT value FROM meta WHERE key = 'schema_version'"


class OutdatedDatabase(Exception):
    """The run database was written for another schema version; the message says which."""


def check_schema(conn: duckdb.DuckDBPyConnection) -> None:
    """Raise :class:`OutdatedDatabase` (closing ``conn``, which nothing will use) unless the database's schema
    version is this version's."""
    try:
        row = conn.execute(SCHEMA_SQL).fetchone()
    except duckdb.Error:
        return
    found = None if row is None else row[0]
    if found == str(SCHEMA_VERSION):
        return
    conn.close()
    if found is None or (found.isdigit() and int(found) < SCHEMA_VERSION):
        made = f"made by an older ascendscope (schema {found or 'not recorded'}"
    else:
        made = f"made by a newer ascendscope (schema {found[:40]}"
    raise OutdatedDatabase(f"{made}; this version reads {SCHEMA_VERSION})")


def mark_outdated(store, run, problem: str):
    """A ready run whose database is outdated becomes failed, saying so and how to get it back; returns the run
    (unchanged when it is no longer ready: someone marked it, or it is being ingested again)."""
    current = store.get(run.id)
    if current.status != "ready":
        return current
    blocked = store.retry_problem(current)
    error = f"{problem}: " + (blocked if blocked else "Retry re-ingests it")
    marked = store.set_status(run.id, "failed", error=error, finished=time.time(), progress=None)
    store.append_log(run.id, error)
    return marked
