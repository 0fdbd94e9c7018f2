"""The SQL console's connections and answers, inside a console worker process (``ascendscope.sqlproc``, started
and held to its limits by ``server.consolepool``): :func:`answer` runs a console job there and hands back the
answer's bytes, already cut and encoded (JSON, CSV), so the server process never holds more of it than its cap.

A console connection is never the views' connection (``server.db``): it is opened for the console alone by
``ascendscope.readonly`` — the read-only rules ``Run.sql`` follows too — and locked before any query runs:

* an in-memory database of its own that attaches a single-file run's file read-only, its tables as views, or a
  sharded run's ``cluster.duckdb`` and the scope's shards with the documented table names as views
  (``layout.connect``, as the views read it);
* then ``readonly.lock_down``: no file, network, ATTACH, COPY, INSTALL or LOAD from then on, no extension
  auto-install or auto-load, the worker's memory limit and DuckDB threads, spill to the worker's own folder
  (made at its start under a random name: no query can name it, and the rules refuse every file-reading
  function anyway) of at most ``MAX_TEMP_SIZE``, and no ``SET`` of any setting afterwards.

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
import orjson

from ascendscope import readonly, sqlproc, sqlworker
from ascendscope.ingest import layout
from ascendscope.server.db import DamagedDatabase, is_sharded, scope
from ascendscope.server.queries import csv_text
from ascendscope.server.queries import sql_console as sc
from ascendscope.sqlrules import ReadOnlyQueryError

MEMORY_LIMIT = sqlproc.MEMORY_LIMIT
MAX_TEMP_SIZE = sqlproc.MAX_TEMP_SIZE  # what one console worker may spill to its folder
MAX_OPEN = 4


class Console:
    """A locked connection, the ranks it loaded (None: a single-file run, all) and the run's ranks."""

    def __init__(self, path: Path, ranks: tuple[int, ...] | None, threads: int | None = None,
                 temp_dir: Path | None = None, memory_limit: str | None = MEMORY_LIMIT):
        self.loaded: list[int] | None = None
        self.all_ranks: list[int] = []
        try:
            if is_sharded(path):
                self.all_ranks = sorted(layout.ready_shards(layout.read_manifest(path.parent)))
            target = path.parent if is_sharded(path) else path
            self.conn, self.loaded = readonly.open_run(target, None if ranks is None else list(ranks),
                                                       memory_limit=memory_limit, threads=threads,
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
                 temp_dir: Path | None = None, memory_limit: str | None = MEMORY_LIMIT):
        self.max_loaded_ranks = max_loaded_ranks
        self.threads, self.temp_dir, self.memory_limit = threads, temp_dir, memory_limit
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
        console = Console(path, ranks, self.threads, self.temp_dir, self.memory_limit)
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


def answer(worker: sqlworker.Worker, job: dict) -> tuple[dict, bytes]:
    """A console job in its worker: ``job["what"]`` ``json`` (``/query``), ``csv`` (``/query.csv``) or ``schema``
    (``/query/schema``) over the run at ``job["path"]``; (meta: the answer's media type and headers, its body)."""
    if worker.console is None:
        worker.console = ConsoleDatabases(job["max_loaded_ranks"], threads=worker.limits.threads,
                                          temp_dir=worker.temp_dir, memory_limit=worker.limits.memory_limit)
    try:
        c = worker.console.get(job["run_id"], Path(job["path"]), job.get("ranks"))
    except (FileNotFoundError, DamagedDatabase) as exc:
        # the console's own connection (memory, file handles, a lock) failing to open says nothing sure about the
        # run, which the views read through another: an error for this query, the run stays as it is
        raise ReadOnlyQueryError(f"the SQL console could not open this run: "
                                 f"{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}",
                                 "console_unavailable") from exc
    scope = {"loaded_ranks": c.loaded, "ranks": len(c.all_ranks) if c.loaded is not None else None}
    if job["what"] == "schema":
        body = {"tables": sc.schema(c.conn), "examples": sc.examples(), "row_cap": sc.MAX_ROWS,
                "max_sql_chars": sc.MAX_SQL_CHARS} | scope
        return {"media_type": "application/json"}, orjson.dumps(body)
    out = sc.run(c.conn, job["sql"], max_rows=job["max_rows"], max_bytes=job["max_bytes"], watch=worker.watch)
    if job["what"] == "json":
        return {"media_type": "application/json"}, orjson.dumps(out | scope)
    found = csv_text(out["columns"], out["rows"])
    return {"media_type": "text/csv; charset=utf-8", "rows": found.rows,
            "truncated": found.truncated or out["truncated_by"] == "bytes"}, found.text.encode("utf-8")
