"""The SQL console's worker processes and its queue, on the server's event loop.

A console query runs in a console worker (``python -m ascendscope.server.consoleworker``: ``ascendscope.sqlproc``'s
worker with the console's jobs), never in the server process:

* **Workers.** At most ``size`` per server process (the heavy slots), started when the console is first used and
  kept; each under ``sqlproc.Limits``: DuckDB's 2 GB ``memory_limit`` plus an address-space limit a little above
  it, a lower CPU priority, a spill folder of its own under ``<data dir>/.console-tmp`` with a random name. A
  worker that crashed or was killed is replaced at once; one that holds more than :data:`RECYCLE_BYTES` after a
  job is replaced too, so memory a big query took goes back. Across the server processes of a data dir, a job
  runs only while it holds one of ``size`` lock files (``.console-slot-<i>.lock``): at most ``size`` console
  queries load the machine at once, whatever ``--workers``.
* **Queue.** A request waiting for a worker awaits a future on the event loop: it holds no thread and no slot of
  the views. The queue holds at most :data:`QUEUE_MAX` requests and is served round robin by client (its remote
  address: see :func:`client_key`), so one heavy user cannot take every turn; a
  client that already has :data:`PER_CLIENT` requests waiting, or a full queue, is answered :class:`ConsoleBusy`
  (429 with ``Retry-After``).
* **Deadline.** From the request's arrival: the wait, and the job in its worker (parsing, the checks, planning,
  execution, conversion). The worker interrupts its query :data:`~ascendscope.sqlproc.KILL_GRACE_S` before the
  deadline (a fifth of the time left, if less); a worker that has not answered :data:`LATE_S` after it (DuckDB
  plans without looking at interrupts: constant folding of ``repeat('x', 10^9)``) is killed: ``QueryTimeout``,
  within a quarter second of the deadline either way. A client that goes away takes its request out of the
  queue, or stops its job (killed too if it does not stop).
* **Answers** come back already cut and encoded; a frame longer than :data:`MAX_ANSWER_BYTES` is never read (the
  worker is killed): the server process never holds a console answer larger than its cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import pickle
import shutil
import socket
import struct
import subprocess
import time
import weakref
from collections import OrderedDict, deque
from pathlib import Path

from ascendscope import sqlproc
from ascendscope.server.consoleworker import MODULE
from ascendscope.server.db import QueryTimeout
from ascendscope.server.queries import sql_console as sc
from ascendscope.server.requestclock import ClientGone
from ascendscope.server.runlayout import try_flock

log = logging.getLogger("ascendscope.console")

QUEUE_MAX = 16  # requests waiting for a console worker, all clients together
PER_CLIENT = 2  # requests one client may have waiting
RECYCLE_BYTES = 512 * 2**20  # a worker holding more than this after a job is replaced
MAX_ANSWER_BYTES = sc.MAX_CSV_BYTES + 4 * 2**20  # an answer frame past this is never read
LATE_S = 0.25  # how long past the deadline a worker told to stop may take to answer before it is killed
SLOT_POLL_S = 0.05  # how often a waiting queue tries the cross-process slots another server process holds
TEMP_FOLDER = ".console-tmp"
_HEADER = struct.Struct("!i")
_LONG = struct.Struct("!Q")


class ConsoleBusy(Exception):
    """The console's queue is full, or this client already has its share waiting: try again later."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ConsoleFailed(Exception):
    """A console job that ended without an answer: ``code`` names why (a rule of the query checks, its memory, its
    process's end)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class _Worker:
    def __init__(self, proc: subprocess.Popen, reader, writer, temp_dir: str):
        self.proc, self.reader, self.writer, self.temp_dir = proc, reader, writer, temp_dir
        self.busy = False
        self.alive = True
        self.seq = 0


class ConsolePool:
    """The console workers and queue of one app (its event loop's: each loop gets its own, as a test's app may run
    under several)."""

    def __init__(self, data_dir: Path, *, size: int, timeout_s: float, max_loaded_ranks: int,
                 threads: int | None = None, memory_limit: str = sqlproc.MEMORY_LIMIT):
        self.data_dir = Path(data_dir)
        self.size = max(1, size)
        self.timeout_s = timeout_s
        self.max_loaded_ranks = max_loaded_ranks
        self.limits = sqlproc.Limits(memory_limit=memory_limit, threads=threads,
                                     temp_root=str(self.data_dir / TEMP_FOLDER))
        self._loops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        _sweep(self.data_dir / TEMP_FOLDER)

    def _here(self) -> _LoopPool:
        loop = asyncio.get_running_loop()
        pool = self._loops.get(loop)
        if pool is None:
            pool = self._loops[loop] = _LoopPool(self, loop)
        return pool

    async def run(self, job: dict, *, client: str, deadline: float, cancel=None) -> tuple[dict, bytes]:
        """``job``'s answer (meta, body) from a console worker, within ``deadline`` (``time.monotonic()``).
        Raises :class:`ConsoleBusy`, ``QueryTimeout``, ``ClientGone`` or :class:`ConsoleFailed`."""
        return await self._here().run(dict(job, max_loaded_ranks=self.max_loaded_ranks), client, deadline, cancel)

    async def ready(self, timeout_s: float = sqlproc.START_S) -> int:
        """Start the workers that are missing and wait until all are up (a console page's first look, tests,
        benchmarks); how many are."""
        pool = self._here()
        pool._start_missing()
        end = time.monotonic() + timeout_s
        while len(self.workers()) < self.size and time.monotonic() < end:
            await asyncio.sleep(0.05)
        return len(self.workers())

    def workers(self) -> list[_Worker]:
        """The running loop's live workers (tests, benchmarks)."""
        return [w for w in self._here().workers if w.alive]

    def close_all(self) -> None:
        """End every worker of every loop (the app's shutdown)."""
        for pool in list(self._loops.values()):
            pool.close()
        self._loops.clear()


class _LoopPool:
    def __init__(self, owner: ConsolePool, loop: asyncio.AbstractEventLoop):
        self.owner, self.loop = owner, loop
        self.workers: list[_Worker] = []
        self.starting = 0
        self.queues: OrderedDict[str, deque[asyncio.Future]] = OrderedDict()
        self.waiting = 0
        self.retry: asyncio.TimerHandle | None = None
        self.closed = False
        self.tasks: set[asyncio.Task] = set()

    # ---- the queue -------------------------------------------------------------------------------------------
    async def run(self, job: dict, client: str, deadline: float, cancel) -> tuple[dict, bytes]:
        worker, slot = await self._acquire(client, deadline, cancel)
        try:
            return await self._execute(worker, job, deadline, cancel)
        finally:
            os.close(slot)
            worker.busy = False
            self._dispatch()

    async def _acquire(self, client: str, deadline: float, cancel) -> tuple[_Worker, int]:
        if cancel is not None:
            cancel.check()
        if deadline <= time.monotonic():
            raise QueryTimeout(f"no time left for the query within {self.owner.timeout_s:g} s of the request's "
                               "arrival (the server was busy)")
        retry = max(1, math.ceil(self.owner.timeout_s))
        if self.waiting >= QUEUE_MAX:
            raise ConsoleBusy(f"the SQL console is busy: {self.waiting} queries are waiting for it; try again in "
                              f"{retry} s", retry)
        mine = self.queues.get(client)
        if mine is not None and len(mine) >= PER_CLIENT:
            raise ConsoleBusy(f"you already have {len(mine)} SQL console queries waiting; try again when they are "
                              f"answered (in {retry} s at most)", retry)
        turn = self.loop.create_future()
        self.queues.setdefault(client, deque()).append(turn)
        self.waiting += 1
        self._dispatch()
        gone = self.loop.create_future()
        unwatch = cancel.watch(lambda: self.loop.call_soon_threadsafe(_settle, gone)) if cancel is not None else None
        try:
            await asyncio.wait({turn, gone}, timeout=max(0.0, deadline - time.monotonic()),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            if unwatch is not None:
                unwatch()
        if turn.done() and not turn.cancelled():
            if not gone.done():
                return turn.result()
            worker, slot = turn.result()  # handed a worker just as the client went: give it back
            os.close(slot)
            worker.busy = False
            self._dispatch()
        else:
            self._leave(client, turn)
        if gone.done():
            raise ClientGone("the client went away before the answer was ready")
        raise QueryTimeout(f"no SQL console worker became free within {self.owner.timeout_s:g} s of the request's "
                           "arrival (other console queries were running): try again, or narrow the query")

    def _leave(self, client: str, turn: asyncio.Future) -> None:
        queue = self.queues.get(client)
        if queue is not None and turn in queue:
            queue.remove(turn)
            self.waiting -= 1
            if not queue:
                del self.queues[client]
        turn.cancel()

    def _dispatch(self) -> None:
        """Hand free workers to waiting requests, one client at a time in turn; start workers that are missing."""
        if self.closed:
            return
        while self.queues:
            for dead in [w for w in self.workers if not w.busy and w.proc.poll() is not None]:
                self._kill(dead)  # (ended while idle: killed from outside, or the machine's OOM killer)
            worker = next((w for w in self.workers if w.alive and not w.busy), None)
            if worker is None:
                break
            slot = self._slot()
            if slot is None:  # another server process holds every slot: try again shortly
                if self.retry is None:
                    self.retry = self.loop.call_later(SLOT_POLL_S, self._retry)
                break
            client, queue = next(iter(self.queues.items()))
            turn = queue.popleft()
            self.waiting -= 1
            if queue:
                self.queues.move_to_end(client)  # round robin: this client's next request waits its turn
            else:
                del self.queues[client]
            worker.busy = True
            turn.set_result((worker, slot))
        self._start_missing()

    def _retry(self) -> None:
        self.retry = None
        self._dispatch()

    def _slot(self) -> int | None:
        for i in range(self.owner.size):
            fd = try_flock(self.owner.data_dir / f".console-slot-{i}.lock")
            if fd is not None:
                return fd
        return None

    # ---- workers ---------------------------------------------------------------------------------------------
    def _start_missing(self) -> None:
        while len(self.workers) + self.starting < self.owner.size and not self.closed:
            self.starting += 1
            task = self.loop.create_task(self._start())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _start(self) -> None:
        proc = writer = ours = None
        try:
            ours, theirs = socket.socketpair()
            with theirs:
                proc = await self.loop.run_in_executor(None, lambda: subprocess.Popen(
                    sqlproc.command(theirs.fileno(), MODULE), pass_fds=[theirs.fileno()], env=sqlproc.environment(),
                    stdin=subprocess.DEVNULL, start_new_session=True))
            sqlproc.lower_priority(proc.pid, self.owner.limits.nice)
            reader, writer = await asyncio.open_unix_connection(sock=ours, limit=2**16)
            _send(writer, self.owner.limits)
            ready = pickle.loads(await asyncio.wait_for(_frame(reader, 2**16), sqlproc.START_S))
            worker = _Worker(proc, reader, writer, ready["temp_dir"])
            if self.closed:
                self._kill(worker)
                return
            self.workers.append(worker)
        except Exception as exc:  # no worker: the waiting requests are told, not left to time out
            log.exception("a SQL console worker could not start")
            if writer is not None:
                writer.close()
            elif ours is not None:
                ours.close()
            if proc is not None and proc.poll() is None:
                proc.kill()
            if not any(w.alive for w in self.workers):
                self._fail_waiting(ConsoleFailed("console_unavailable", f"the SQL console could not start its "
                                                                        f"worker process ({type(exc).__name__})"))
            return
        finally:
            self.starting -= 1
        self._dispatch()

    def _fail_waiting(self, error: Exception) -> None:
        for queue in self.queues.values():
            for turn in queue:
                if not turn.done():
                    turn.set_exception(error)
        self.queues.clear()
        self.waiting = 0

    def _kill(self, worker: _Worker) -> None:
        """End ``worker`` now, forget it and remove its spill folder; a replacement starts when one is needed."""
        worker.alive = False
        if worker in self.workers:
            self.workers.remove(worker)
        worker.writer.close()
        if worker.proc.poll() is None:
            worker.proc.kill()
        folder = worker.temp_dir

        def reap() -> None:
            worker.proc.wait()
            shutil.rmtree(folder, ignore_errors=True)

        if not self.closed:
            self.loop.run_in_executor(None, reap)
        else:
            reap()

    def close(self) -> None:
        self.closed = True
        if self.retry is not None:
            self.retry.cancel()
        self._fail_waiting(ConsoleFailed("console_unavailable", "the server is stopping"))
        for worker in list(self.workers):
            self._kill(worker)

    # ---- one job ---------------------------------------------------------------------------------------------
    async def _execute(self, worker: _Worker, job: dict, deadline: float, cancel) -> tuple[dict, bytes]:
        if deadline <= time.monotonic():  # (no time left: the worker is not even asked)
            raise QueryTimeout(f"no time left for the query within {self.owner.timeout_s:g} s of the request's "
                               "arrival (the server was busy)")
        worker.seq += 1
        seq = worker.seq
        # the worker stops its query a little before the deadline (a fifth of the time left at most), so that it can
        # answer by then; if it has not answered LATE_S after it, it is killed
        left = deadline - time.monotonic()
        _send(worker.writer, ("job", seq, job, max(0.0, left - min(sqlproc.KILL_GRACE_S, left / 5))))
        stop = None

        def gone() -> None:  # the client went away: stop the job, and end the worker if it does not stop
            nonlocal stop
            if worker.alive and worker.busy and worker.seq == seq:
                _send(worker.writer, ("stop", seq))
                stop = self.loop.call_later(sqlproc.KILL_GRACE_S, lambda: worker.seq == seq and self._kill(worker))

        unwatch = cancel.watch(lambda: self.loop.call_soon_threadsafe(gone)) if cancel is not None else None
        try:
            answer = pickle.loads(await asyncio.wait_for(
                _frame(worker.reader, MAX_ANSWER_BYTES),
                timeout=max(0.0, deadline - time.monotonic()) + LATE_S))
        except TimeoutError:
            self._kill(worker)
            raise QueryTimeout(f"the query ran longer than {self.owner.timeout_s:g} s (from the request's arrival) "
                               "and was stopped, its worker process ended") from None
        except (asyncio.IncompleteReadError, ConnectionError, OSError, pickle.UnpicklingError, ValueError) as exc:
            self._kill(worker)
            code = await self.loop.run_in_executor(None, worker.proc.wait)
            if cancel is not None and cancel.cancelled:
                raise ClientGone("the client went away before the answer was ready") from None
            if isinstance(exc, ValueError):
                raise ConsoleFailed("answer_too_large", str(exc)) from None
            raise ConsoleFailed("query_crashed", sqlproc.ended(code, self.owner.limits)) from None
        finally:
            if unwatch is not None:
                unwatch()
            if stop is not None:
                stop.cancel()
        if answer[1] != "ok":
            _seq, _, code, message = answer
            if cancel is not None and cancel.cancelled:
                raise ClientGone("the client went away before the answer was ready")
            if code == "query_timeout":
                raise QueryTimeout(message)
            raise ConsoleFailed(code, message)
        meta, body = answer[2], answer[3]
        if meta.get("rss", 0) > RECYCLE_BYTES:  # memory a big query took goes back with the process
            self._kill(worker)
        return meta, body


def _settle(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _send(writer, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_HEADER.pack(len(data)) + data)


async def _frame(reader: asyncio.StreamReader, cap: int) -> bytes:
    """One frame (``multiprocessing.connection``'s framing), refused unread when longer than ``cap``."""
    (n,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if n == -1:
        (n,) = _LONG.unpack(await reader.readexactly(_LONG.size))
    if n > cap:
        raise ValueError(f"the console worker's answer ({n:,} bytes) is larger than the server takes ({cap:,})")
    return await reader.readexactly(n)


def _sweep(folder: Path) -> None:
    """Remove the spill folders of console workers that are gone (a server killed before it could)."""
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            pid = entry.name[1:].split("-", 1)[0]
            if entry.is_dir() and entry.name.startswith("w") and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def client_key(request) -> str:
    """Who a request comes from, for the queue's fairness: its remote address (behind a reverse proxy on this
    machine, the address the proxy names: uvicorn reads ``X-Forwarded-For`` from trusted proxies). Not a cookie or
    token: this dashboard's token is one secret shared by all its users, and without a token nothing vouches for
    one, so a client could name itself anew with each request."""
    return request.client.host if request.client else "?"
