"""Locked-down DuckDB connections for the SQL console (``server/queries/sql_console.py``), one per run and scope.

A console connection is never the views' connection (``server.db``): it is opened for the console alone and then
locked, so nothing a user types can loosen it:

* an in-memory database of its own (a connection to the file itself would share the views' database instance,
  and lock it too) that attaches, read-only, a single-file run's file (a view per table: its tables by their
  names, for every cursor), or a
  sharded run's ``cluster.duckdb`` and the scope's shards with the documented table names as views
  (``layout.connect``, as the views read it);
* then ``enable_external_access = false`` (no file, network, ATTACH, COPY, INSTALL or LOAD from here on: DuckDB
  refuses to turn it back on while the database runs), no extension auto-install or auto-load, a memory limit,
  and ``lock_configuration = true`` (no ``SET`` of any setting afterwards).

Scope of a sharded run: like the views (``server.db.scope``) — every rank up to ``max_loaded_ranks`` ranks, above
that the ranks asked for (``ranks=``, at most ``max_loaded_ranks`` of them), else the first. The run-wide and
``cluster_*`` tables always cover every rank. Connections are kept per (run, file version, scope), least recently
used closed first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

import duckdb

from ascendscope.ingest import layout
from ascendscope.server.db import DamagedDatabase, is_sharded, scope

MEMORY_LIMIT = "2GB"
MAX_OPEN = 4
LOCK_SQL = (
    "SET enable_external_access = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    f"SET memory_limit = '{MEMORY_LIMIT}'",
    "SET lock_configuration = true",
)


class Console:
    """A locked connection, the ranks it loaded (None: a single-file run, all) and the run's ranks."""

    def __init__(self, path: Path, ranks: tuple[int, ...] | None):
        self.loaded: list[int] | None = None
        self.all_ranks: list[int] = []
        try:
            if is_sharded(path):
                manifest = layout.read_manifest(path.parent)
                self.all_ranks = [e["rank"] for e in manifest["shards"] if e["status"] == "ready"]
                self.conn, self.loaded = layout.connect(path.parent, None if ranks is None else list(ranks),
                                                        manifest=manifest)
            else:  # a database instance of its own: duckdb.connect(path) would share (and lock) the views' one
                self.conn = duckdb.connect(":memory:")
                quoted = str(path).replace("'", "''")  # our own path, never user input
                self.conn.execute(f"ATTACH '{quoted}' AS run (READ_ONLY)")
                for (table,) in self.conn.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = "
                                                  "'run' AND schema_name = 'main'").fetchall():
                    self.conn.execute(f'CREATE VIEW main."{table}" AS SELECT * FROM run.main."{table}"')
            for sql in LOCK_SQL:
                self.conn.execute(sql)
        except (duckdb.Error, OSError, ValueError) as exc:
            raise DamagedDatabase(str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__) from exc

    def close(self) -> None:
        try:
            self.conn.close()
        except duckdb.Error:
            pass


class ConsoleDatabases:
    def __init__(self, max_loaded_ranks: int, max_open: int = MAX_OPEN):
        self.max_loaded_ranks = max_loaded_ranks
        self.max_open = max_open
        self._open: OrderedDict[tuple, Console] = OrderedDict()
        self._lock = threading.Lock()

    def scope(self, path: Path, asked: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if not is_sharded(path):
            return None
        ready = [e["rank"] for e in layout.read_manifest(path.parent)["shards"] if e["status"] == "ready"]
        if asked:
            asked = tuple(asked[:self.max_loaded_ranks])
        return scope(ready, asked, None, self.max_loaded_ranks)

    def get(self, run_id: str, path: Path, asked: tuple[int, ...] | None = None) -> Console:
        ranks = self.scope(path, asked)
        key = (run_id, path.stat().st_mtime_ns, ranks)
        with self._lock:
            found = self._open.get(key)
            if found is not None:
                self._open.move_to_end(key)
                return found
        console = Console(path, ranks)
        with self._lock:
            self._open[key] = console
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)  # not closed: a request may still hold a cursor of it
        return console

    def close_all(self) -> None:
        with self._lock:
            items, self._open = list(self._open.values()), OrderedDict()
        for c in items:
            c.close()
