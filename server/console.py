"""Locked-down DuckDB connections for the SQL console (``server/queries/sql_console.py``), one per run and scope.

A console connection is never the views' connection (``server.db``): it is opened for the console alone by
``ascendscope.readonly`` — the read-only rules ``Run.sql`` follows too — and locked before any query runs:

* an in-memory database of its own (a connection to the file itself would share the views' database instance,
  and lock it too) that attaches a single-file run's file read-only, its tables as views, or a sharded run's
  ``cluster.duckdb`` and the scope's shards with the documented table names as views (``layout.connect``, as the
  views read it);
* then ``readonly.lock_down``: no file, network, ATTACH, COPY, INSTALL or LOAD from then on, no extension
  auto-install or auto-load, a memory limit, the views' DuckDB threads, spill to a folder of the data dir
  (``.console-tmp``) of at most ``MAX_TEMP_SIZE``, and no ``SET`` of any setting afterwards.

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

from ascendscope import readonly
from ascendscope.ingest import layout
from ascendscope.server.db import DamagedDatabase, is_sharded, scope

MEMORY_LIMIT = "2GB"
MAX_TEMP_SIZE = "4GB"  # what one console connection may spill to its temp folder (in the data dir)
MAX_OPEN = 4


class Console:
    """A locked connection, the ranks it loaded (None: a single-file run, all) and the run's ranks."""

    def __init__(self, path: Path, ranks: tuple[int, ...] | None, threads: int | None = None,
                 temp_dir: Path | None = None):
        self.loaded: list[int] | None = None
        self.all_ranks: list[int] = []
        try:
            if is_sharded(path):
                self.all_ranks = sorted(layout.ready_shards(layout.read_manifest(path.parent)))
            target = path.parent if is_sharded(path) else path
            self.conn, self.loaded = readonly.open_run(target, None if ranks is None else list(ranks),
                                                       memory_limit=MEMORY_LIMIT, threads=threads,
                                                       temp_dir=temp_dir,
                                                       max_temp_size=MAX_TEMP_SIZE if temp_dir else None)
        except (duckdb.Error, OSError, ValueError) as exc:
            raise DamagedDatabase(str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__) from exc

    def close(self) -> None:
        try:
            self.conn.close()
        except duckdb.Error:
            pass


class ConsoleDatabases:
    def __init__(self, max_loaded_ranks: int, max_open: int = MAX_OPEN, *, threads: int | None = None,
                 temp_dir: Path | None = None):
        self.max_loaded_ranks = max_loaded_ranks
        self.threads, self.temp_dir = threads, temp_dir
        self.max_open = max_open
        self._open: OrderedDict[tuple, Console] = OrderedDict()
        self._lock = threading.Lock()

    def scope(self, path: Path, asked: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if not is_sharded(path):
            return None
        ready = sorted(layout.ready_shards(layout.read_manifest(path.parent)))
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
        console = Console(path, ranks, self.threads, self.temp_dir)
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
