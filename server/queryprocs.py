"""Query processes: the short path's viewport answers (``server.fastlane``) computed outside the server process.

A server process that answers viewport requests on its own threads shares one GIL between them and its event
loop. Under many users the loop then waits for the GIL each time it wakes, and every request it has not read
yet waits with it: ``/api/health`` took 40-60 ms at the 99th percentile at 50 clients (``docs/benchmarks.md``,
issue #18). Here each server process starts ``query_processes`` processes that each build the app
over the same settings and answer with the same function as the thread path (``fastlane.respond``), so the
bytes are the same. The loop only passes each request to one of them (a small pickled message over a socket
pair) and reads the answer back without blocking (asyncio streams), so no thread of the server process runs
Python beside its loop.

* At most :data:`IN_FLIGHT` requests are handed to one process at once (one answered, the next waiting in its
  socket); the others wait on the loop, where a request whose client has gone is answered 499 before it costs a
  query. A request's deadline still counts from its arrival (its arrival time goes with it). When the client of
  a request already handed over goes away, the process is told: its query is interrupted, as on the thread
  path, and the request answered 499.
* The processes start in the background when the app starts; until one is ready, and whenever none is,
  requests take the thread path. A process that dies is replaced (up to :data:`MAX_STARTS` times each); the
  requests it held go to the router, as any failure of the short path does.
* Each is a new interpreter (``python -m ascendscope.server.queryserver``) in a session of its own, so a Ctrl+C
  in the terminal reaches only the server, which stops them, never a query process in the middle of its start.
* Only server processes that ``ascendscope serve`` runs start them (``create_app(query_processes=True)``); an
  app built otherwise (a test's client, an embedding) answers on its threads.
* They exit when their server process does, however it ends: their socket closes. It stops them itself
  (socket closed, then SIGTERM) when it exits normally.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pickle
import socket
import struct
import subprocess
import sys
import weakref

from ascendscope.server.requestclock import ClientGone

log = logging.getLogger(__name__)

IN_FLIGHT = 2  # requests handed to one query process at once
QUERY_SERVER = "ascendscope.server.queryserver"  # what a query process runs
GONE = "gone"  # a query process's answer to a request whose client went away
MAX_STARTS = 5  # starts per process wanted (the first and its replacements), after which threads answer
START_S = 120  # how long a new query process may take to say it is ready before it is given up
_HEADER = struct.Struct("!i")  # multiprocessing.Connection's framing: a signed 32-bit big-endian length
_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its QueryProcesses


class _Process:
    def __init__(self, proc, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.proc, self.reader, self.writer = proc, reader, writer
        self.waiting: dict[int, asyncio.Future] = {}
        self.alive = True


class QueryProcesses:
    """The query processes of one event loop (one server process)."""

    def __init__(self, settings, size: int):
        self.settings = dataclasses.replace(settings, query_processes=0)  # (theirs start none of their own)
        self.size = size
        self.procs: list[_Process] = []
        self.seq = 0
        self.slots = asyncio.Semaphore(IN_FLIGHT * size)
        self.starting = 0
        self.starts_left = MAX_STARTS * size  # a process that keeps dying is not started forever
        self.closed = False
        self.tasks: set[asyncio.Task] = set()  # (the loop holds its tasks weakly: these are kept until done)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def ready(self) -> bool:
        """Whether a process can take requests (else the thread path answers); starts the missing ones."""
        while len(self.procs) + self.starting < self.size and self.starts_left > 0:
            self.starting += 1
            self.starts_left -= 1
            self._spawn(self._start())
        return any(p.alive for p in self.procs)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        proc = ours = writer = None
        try:
            ours, theirs = socket.socketpair()
            with theirs:
                proc = await loop.run_in_executor(None, lambda: subprocess.Popen(
                    [sys.executable, "-m", QUERY_SERVER, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                    stdin=subprocess.DEVNULL, start_new_session=True))
            reader, writer = await asyncio.open_unix_connection(sock=ours, limit=1 << 26)
            data = pickle.dumps(self.settings, protocol=pickle.HIGHEST_PROTOCOL)
            writer.write(_HEADER.pack(len(data)) + data)
            # it answers its first message when its app is built, so that no request waits for that
            (n,) = _HEADER.unpack(await asyncio.wait_for(reader.readexactly(_HEADER.size), START_S))
            await reader.readexactly(n)
            p = _Process(proc, reader, writer)
            if self.closed:  # (the app stopped while this one started)
                _stop(p)
                return
            self.procs.append(p)
            self._spawn(self._read(p))
        except Exception:  # no process: the thread path answers
            log.exception("a query process could not start")
            if writer is not None:
                writer.close()
            elif ours is not None:
                ours.close()
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is None:
                self.starts_left = 0  # (none can be started here): threads from now on
        finally:
            self.starting -= 1

    def close(self) -> None:
        """End the processes (their sockets closed, then SIGTERM) and start no more."""
        self.starts_left, self.closed = 0, True
        for p in list(self.procs):
            _stop(p)
        for p in self.procs:
            try:
                p.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.proc.kill()
        self.procs.clear()

    async def _read(self, p: _Process) -> None:
        """The answers of ``p``, in the order it gives them, to the requests that wait for them."""
        try:
            while True:
                (n,) = _HEADER.unpack(await p.reader.readexactly(_HEADER.size))
                seq, answer = pickle.loads(await p.reader.readexactly(n))
                fut = p.waiting.pop(seq, None)
                if fut is not None and not fut.done():
                    fut.set_result(answer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, EOFError, pickle.UnpicklingError):
            pass
        finally:  # the process is gone (or its pipe broken): its requests go to the router, a new one starts
            p.alive = False
            if p in self.procs:
                self.procs.remove(p)
            for fut in p.waiting.values():
                if not fut.done():
                    fut.set_result(None)
            p.waiting.clear()
            p.writer.close()

    async def answer(self, message: tuple, gone=None):
        """``(status, raw headers, body)`` of the request ``message`` (see ``server.queryserver``), or None when
        no process could answer it (the caller then lets the router answer). ``gone``: the request's cancel
        token: checked when it is about to be handed over, and watched while a process holds it (a client that
        goes away then interrupts its query there). ClientGone when it went away."""
        async with self.slots:  # (first come, first handed over; one waiter woken per answer)
            if gone is not None:
                gone.check()  # ClientGone: nothing handed over
            live = [p for p in self.procs if p.alive]
            if not live:
                return None
            p = min(live, key=lambda q: len(q.waiting))
            self.seq += 1
            seq = self.seq
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            p.waiting[seq] = fut
            _send(p, (seq, message))
            # a client that goes away now stops the query in the process (it answers GONE at once)
            unwatch = gone.watch(lambda: loop.call_soon_threadsafe(_cancel, p, seq)) if gone is not None else None
            try:
                answer = await fut
            finally:
                if unwatch is not None:
                    unwatch()
        if answer == GONE:
            raise ClientGone("the client went away before the answer was ready")
        return answer


def pool_for(settings, size: int) -> QueryProcesses | None:
    """The running loop's ``size`` query processes, once one is ready; None for the thread path."""
    if size <= 0:
        return None
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = _pools[loop] = QueryProcesses(settings, size)
    return pool if pool.ready() else None


def _send(p: _Process, item: tuple) -> None:
    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    p.writer.write(_HEADER.pack(len(data)) + data)


def _cancel(p: _Process, seq: int) -> None:
    """Tell ``p`` that the client of request ``seq`` went away (if it still holds it)."""
    if p.alive and seq in p.waiting:
        _send(p, (seq, None))


def _stop(p: _Process) -> None:
    p.alive = False
    p.writer.close()
    if p.proc.poll() is None:
        p.proc.terminate()


def status() -> dict | None:
    """``{"ready": n, "wanted": m}`` of the running loop's query processes; None when it has none."""
    try:
        pool = _pools.get(asyncio.get_running_loop())
    except RuntimeError:
        return None
    if pool is None:
        return None
    return {"ready": sum(1 for p in pool.procs if p.alive), "wanted": pool.size}


def close() -> None:
    """Stop the running event loop's query processes (the app's shutdown)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    pool = _pools.pop(loop, None)
    if pool is not None:
        pool.close()
