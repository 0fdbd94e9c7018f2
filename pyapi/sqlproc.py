"""User-written SQL in a process of its own, bounded before it costs: ``Run.sql`` and the server's SQL console.

    python -m ascendscope.sqlworker FD     # a worker (FD: its end of a socket pair; its Limits come first)

A query in the caller's own process can take it down: constant folding (``repeat('x', 10^9)``) runs while DuckDB
plans, before any deadline and outside its memory accounting, and a result becomes Python objects before any cap.
So a worker process runs it, under limits set before the first query:

* an address-space limit (``RLIMIT_AS``) of DuckDB's ``memory_limit`` plus :data:`HEADROOM_BYTES` for the
  interpreter, its libraries, thread stacks and the answer being built: an allocation past it fails (DuckDB's
  out-of-memory error, or the process dies), never the machine. At ``memory_limit`` alone an ordinary 20 M-row
  ``ORDER BY`` fails; with the headroom it runs, spilling to the worker's own folder;
* a lower CPU priority than its owner's (:data:`NICE` steps), set as soon as it is started;
* a spill folder of its own, made at start under a random name (in ``temp_root``, else ``ascendscope-sql`` in
  the system's temp folder), its size capped, removed when the worker ends (and by its owner when it had to kill
  it);
* a deadline: the worker interrupts its query when the job's time is up, and its owner kills it
  :data:`KILL_GRACE_S` later if it has not answered (planning cannot be interrupted); the console's owner gives
  the job that much less than the request has left, so that the request ends at its deadline either way. A
  killed or crashed worker is replaced.

A worker (``ascendscope.sqlworker``) answers one job at a time: ``arrow`` (``Run.sql``: the whole result as an
Arrow IPC stream), and in a console worker (``python -m ascendscope.server.consoleworker``) ``console`` (the SQL
console's answer, made by ``ascendscope.server.console.answer``: already cut and encoded).
:class:`SqlProcess` is the owner a ``Run`` uses (blocking); the server's is ``server.consolepool`` (asyncio).
Messages are pickled and framed as ``multiprocessing.connection`` frames them: ``Limits`` in, ``{"pid",
"temp_dir"}`` out once ready; then ``("job", seq, job, timeout_s)`` or ``("stop", seq)`` in; ``(seq, "part",
bytes)`` (an answer's payload, a piece at a time) and then ``(seq, "ok", meta, payload)`` or ``(seq, "error",
code, message)`` out.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

from ascendscope.sqlrules import QueryTimedOut, ReadOnlyQueryError

MEMORY_LIMIT = "2GB"  # DuckDB's memory_limit for a user's query (the console's, and Run.sql's by default)
DEFAULT_TIMEOUT_S = 10.0  # Run.sql's deadline by default (the server's query_timeout_s default)
HEADROOM_BYTES = 768 * 2**20  # address space beyond memory_limit: an idle worker maps ~0.4 GB of it already
MAX_TEMP_SIZE = "4GB"
NICE = 10
KILL_GRACE_S = 0.5
PART_BYTES = 8 * 2**20  # an Arrow answer leaves the worker in parts of this size
START_S = 60.0
MODULE = "ascendscope.sqlworker"  # what a worker runs (``python -m``)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*$", re.I)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
          "GIB": 2**30, "TIB": 2**40}


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a worker is held to. ``memory_limit`` None: neither DuckDB's limit nor an address-space limit."""

    memory_limit: str | None = MEMORY_LIMIT
    threads: int | None = None
    nice: int = NICE  # steps of CPU priority below its owner's
    temp_root: str | None = None
    max_temp_size: str = MAX_TEMP_SIZE

    def address_space(self) -> int | None:
        """Bytes of address space a worker may map (RLIMIT_AS), or None."""
        return None if self.memory_limit is None else size_bytes(self.memory_limit) + HEADROOM_BYTES


def size_bytes(text: str) -> int:
    """``'2GB'`` → 2_000_000_000, as DuckDB reads a memory limit (``GiB`` for powers of two)."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (write it as 2GB, 512MB, 1.5GiB)")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").upper()])


def command(fd: int, module: str = MODULE) -> list[str]:
    return [sys.executable, "-m", module, str(fd)]


def environment() -> dict[str, str]:
    """A worker's environment: two malloc arenas (each thread's own 64 MB arena would count against RLIMIT_AS)."""
    return dict(os.environ, MALLOC_ARENA_MAX="2")


# ---- the owner's side (blocking: Run.sql) ---------------------------------------------------------------------
class SqlProcess:
    """A worker owned by one caller (a ``Run``), started at its first job and replaced after a kill or crash; its
    jobs run one at a time (the caller's lock)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self.temp_dir: str | None = None
        self._seq = 0
        self._lock = threading.Lock()

    def arrow(self, path: str | os.PathLike, sql: str, params, timeout_s: float | None):
        """The whole result of ``sql`` over the run at ``path`` as a ``pyarrow.Table``; raises
        :class:`ReadOnlyQueryError` (:class:`QueryTimedOut` past ``timeout_s``)."""
        import pyarrow as pa

        job = {"kind": "arrow", "path": str(path), "sql": sql, "params": params}
        _meta, payload = self.run(job, timeout_s)
        return pa.ipc.open_stream(payload).read_all()

    def run(self, job: dict, timeout_s: float | None) -> tuple[dict, bytes]:
        with self._lock:
            conn = self._started()  # (a start is not the query's time: the deadline counts from here)
            self._seq += 1
            seq = self._seq
            left = timeout_s
            try:
                conn.send_bytes(pickle.dumps(("job", seq, job, left), protocol=pickle.HIGHEST_PROTOCOL))
                end = None if left is None else time.monotonic() + left + KILL_GRACE_S
                parts = []
                while True:
                    if not conn.poll(None if end is None else max(0.0, end - time.monotonic())):
                        self.kill()
                        raise QueryTimedOut(f"the query took longer than {timeout_s:g} s and was stopped "
                                            "(its process was ended: it could not be interrupted)")
                    answer = pickle.loads(conn.recv_bytes())
                    if answer[1] != "part":
                        break
                    parts.append(answer[2])
            except (EOFError, OSError) as exc:
                code = self.kill()
                raise ReadOnlyQueryError(ended(code, self.limits), "query_crashed") from exc
            except BaseException:  # (Ctrl+C in a notebook): the query must not go on, nor answer the next one
                self.kill()
                raise
            meta, payload = unpack(answer)
            return meta, b"".join(parts) + payload

    def _started(self) -> Connection:
        if self._proc is not None and self._proc.poll() is None and self._conn is not None:
            return self._conn
        self.kill()
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc = subprocess.Popen(command(theirs.fileno()), pass_fds=[theirs.fileno()], env=environment(),
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        lower_priority(self._proc.pid, self.limits.nice)
        self._conn = Connection(ours.detach())
        self._conn.send_bytes(pickle.dumps(self.limits, protocol=pickle.HIGHEST_PROTOCOL))
        if not self._conn.poll(START_S):
            self.kill()
            raise ReadOnlyQueryError("the query's process did not start", "query_crashed")
        try:
            self.temp_dir = pickle.loads(self._conn.recv_bytes())["temp_dir"]
        except (EOFError, OSError) as exc:
            self.kill()
            raise ReadOnlyQueryError("the query's process ended while starting", "query_crashed") from exc
        return self._conn

    def kill(self) -> int | None:
        """End the worker now (SIGKILL) and remove its spill folder; its exit code, if it had one."""
        code = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            code = self._proc.wait()
            self._proc = None
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None
        return code

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._proc is not None and self._proc.poll() is None:
                self._conn.close()  # it exits on its own when its socket closes, removing its folder
                self._conn = None
                try:
                    self._proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            self.kill()


def unpack(answer: tuple) -> tuple[dict, bytes]:
    """A worker's answer: (meta, payload), or its error raised."""
    if answer[1] == "ok":
        return answer[2], answer[3]
    _seq, _, code, message = answer
    if code == "query_timeout":
        raise QueryTimedOut(message)
    raise ReadOnlyQueryError(message, code)


def ended(code: int | None, limits: Limits) -> str:
    """Why a worker that ended mid-query did, in words."""
    limit = f" ({limits.memory_limit} for DuckDB, plus headroom)" if limits.memory_limit else ""
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return (f"the query's process ended ({how}) before it answered: most likely the query needed more memory than "
            f"its limit{limit}; narrow it")


def lower_priority(pid: int, nice: int) -> None:
    """Make process ``pid`` (a worker its owner has just started, so that even its start — its imports, ~0.7
    CPU-s — yields to the views) ``nice`` steps less favoured than this process (at most 19)."""
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
        except OSError:
            pass
