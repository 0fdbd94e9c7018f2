"""Bounded, coalescing database work, shared by every request of one server.

Contract:

* :meth:`QueryPool.slot`: at most ``slots`` threads do database work at once, whatever the number of request
  threads (Starlette runs sync handlers on up to 40): more concurrent DuckDB queries than cores only thrash them
  and the GIL. A thread that already holds a slot takes no second one, so nested use cannot deadlock. Waiting for
  a slot is bounded: after ``timeout_s`` it raises :class:`~server.db.QueryTimeout` (the server is too busy). A
  slot is always given back, whether the work returned, raised or was interrupted by its deadline.
* Heavy work (System View, Range Stats, search, Advice, Compare: ``slot(..., heavy=True)``) takes one of
  ``heavy_slots`` slots shared by every server process of the data dir (an ``flock`` on one of the files
  ``<lock_dir>/.heavy-slot-<i>.lock``) instead of a query slot, so it never makes a viewport request wait, and at
  most that many heavy queries load the machine at once, however many processes serve it.
* A wait for a slot wakes when the request's client goes away (``cancel``, a ``server.requestclock.CancelToken``)
  and raises ``ClientGone``.
* :meth:`QueryPool.shared`: answers by key. A key asked for by several requests at the same time is computed
  once (single flight), inside a slot; every waiter gets its answer, or its exception. Answers are then kept in
  an LRU cache bounded in bytes; errors are never cached. ``store="index"`` keeps them in a second LRU of its own
  budget (``index_bytes``: whole tracks kept to answer viewports from memory, ``server.queries.track_index``),
  so large, long-lived entries and small recent answers do not push each other out; it admits an entry only by
  pushing out entries not used lately (:meth:`QueryPool.index_admits`). A key must name everything its answer
  depends on (the run, the identity of its database file, the parameters), and callers must not mutate what
  they get back: the same objects go to every request.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as futures_wait
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ascendscope.server.db import QueryTimeout
from ascendscope.server.indexfiles import mapped
from ascendscope.server.requestclock import ClientGone
from ascendscope.server.runs import try_flock

log = logging.getLogger("ascendscope.querypool")
HEAVY_POLL_S = 0.02  # how often a heavy request tries the heavy slots
INDEX_FOREGROUND_BYTES = 8 * 10**6  # an "index" entry estimated at most this is read by the request needing it
INDEX_HOT_S = 30.0  # an "index" entry used this recently is never pushed out to admit another
INDEX_REFUSED_KEPT = 4096  # keys of "index" entries found larger than their estimate, remembered
# what an array mapped from an index file (server.indexfiles) counts against the budget: its pages are not this
# process's, but each mapped file is a kernel object: a budget of 256 MB keeps ~2,000 tracks (~7 arrays each) mapped
MAPPED_ARRAY_BYTES = 16 * 1024
MAPPED_ENTRY_BYTES = 8 * MAPPED_ARRAY_BYTES  # an entry (a track, its level of detail, a table's flows) mapped


class QueryPool:
    def __init__(self, slots: int = 0, cache_bytes: int = 64 * 10**6, *, heavy_slots: int = 0,
                 lock_dir: Path | None = None, index_bytes: int = 0):
        """``slots`` 0 means one per core; ``heavy_slots`` 0 half the cores (at least 1); ``lock_dir`` holds the
        heavy slots' lock files (None: a process-local folder, so the budget is per process)."""
        self.slots = slots if slots > 0 else max(1, os.cpu_count() or 1)
        self.heavy_slots = heavy_slots if heavy_slots > 0 else max(1, (os.cpu_count() or 1) // 2)
        self.lock_dir = Path(lock_dir) if lock_dir is not None else _private_lock_dir()
        self._mine_heavy = threading.local()
        self.cache_bytes = cache_bytes
        self.index_bytes = index_bytes
        self._free_slots = self.slots
        self._queue: deque[threading.Lock] = deque()  # threads waiting for a slot, first come first served
        self._mine = threading.local()
        self._lock = threading.Lock()
        self._flights: dict[Hashable, Future] = {}
        self._cache: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._cached_bytes = 0
        self._index: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._index_used = 0
        self._index_touched: dict[Hashable, float] = {}  # key -> when it was last used (monotonic s)
        self._index_refused: OrderedDict[Hashable, None] = OrderedDict()  # computed, found too big to keep
        self.background_index = True  # large index entries read by a background thread (False: by the request)
        self.foreground_bytes = INDEX_FOREGROUND_BYTES  # (smaller ones by the request that needs them)
        self._later: deque = deque()  # (key, job) queued for the background thread, the one it runs first
        self._later_keys: set = set()
        self._later_wake = threading.Condition(self._lock)
        self._later_thread: threading.Thread | None = None
        self.running = 0  # threads inside a slot now, and the most ever (tests and benchmarks read them)
        self.peak = 0
        self.counts: Counter = Counter()  # computed / coalesced / hit keys (indexed / index_hit: the index store)

    @contextmanager
    def slot(self, timeout_s: float, *, heavy: bool = False, cancel=None) -> Iterator[None]:
        if heavy:
            with self._heavy(timeout_s, cancel):
                yield
            return
        if getattr(self._mine, "held", False):
            yield
            return
        if not self._acquire(timeout_s, cancel):
            raise QueryTimeout(f"the server is busy: no database slot became free within {timeout_s:g} s")
        self._mine.held = True
        try:
            yield
        finally:
            self._mine.held = False
            self._release()

    def _acquire(self, timeout_s: float, cancel=None) -> bool:
        with self._lock:
            if self._free_slots and not self._queue:
                self._free_slots -= 1
                self._started()
                return True
            ticket = threading.Lock()
            ticket.acquire()
            self._queue.append(ticket)
        gone = []

        def wake() -> None:  # the client went away: leave the queue now, unless a slot was handed over already
            with self._lock:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                    gone.append(True)
                    ticket.release()

        unwatch = cancel.watch(wake) if cancel is not None else None
        try:
            got = ticket.acquire(timeout=timeout_s)
        finally:
            if unwatch is not None:
                unwatch()
        if gone:
            cancel.check()
        if got:
            return True
        with self._lock:
            if ticket in self._queue:
                self._queue.remove(ticket)
                return False
        return True  # handed a slot just as the wait timed out

    @contextmanager
    def _heavy(self, timeout_s: float, cancel=None) -> Iterator[None]:
        """One of the heavy slots of every process (see the module doc); re-entrant within a thread."""
        if getattr(self._mine_heavy, "fd", None) is not None:
            yield
            return
        deadline = time.monotonic() + timeout_s
        fd = None
        while fd is None:
            for i in range(self.heavy_slots):
                fd = try_flock(self.lock_dir / f".heavy-slot-{i}.lock")
                if fd is not None:
                    break
            else:
                if cancel is not None:
                    cancel.check()
                if time.monotonic() >= deadline:
                    raise QueryTimeout(f"the server is busy with other heavy views: none of its {self.heavy_slots} "
                                       f"heavy query slot(s) became free within {timeout_s:g} s")
                time.sleep(HEAVY_POLL_S)
        self._mine_heavy.fd = fd
        try:
            yield
        finally:
            self._mine_heavy.fd = None
            os.close(fd)

    def _release(self) -> None:
        # the slot goes straight to the longest waiter: a thread arriving meanwhile cannot take it first, so under
        # load requests are served in arrival order and none waits far longer than the others
        with self._lock:
            self.running -= 1
            if self._queue:
                self._started()
                self._queue.popleft().release()
            else:
                self._free_slots += 1

    def _started(self) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)

    def shared(self, keys: list[Hashable], compute: Callable[[list[Hashable]], dict], *, timeout_s: float,
               cancel=None, store: str = "answers") -> dict:
        """key → answer for every key: from the cache (``store``: "answers" or "index"), from a computation in
        flight, or from ``compute(missing keys)`` (which returns a dict holding each of them) run in a slot."""
        answers, todo, waits = {}, [], {}
        cache = self._index if store == "index" else self._cache
        with self._lock:
            for key in dict.fromkeys(keys):
                if key in cache:
                    cache.move_to_end(key)
                    answers[key] = cache[key][0]
                    if cache is self._index:
                        self._index_touched[key] = time.monotonic()
                    self.counts["hit" if cache is self._cache else "index_hit"] += 1
                elif key in self._flights:
                    waits[key] = self._flights[key]
                    self.counts["coalesced"] += 1
                else:
                    self._flights[key] = Future()
                    todo.append(key)
        if todo:
            answers.update(self._compute(todo, compute, timeout_s, cancel, store))
        deadline = time.monotonic() + timeout_s
        for key, flight in waits.items():
            try:
                answers[key] = self._wait(flight, deadline, cancel)
            except FutureTimeout:
                raise QueryTimeout(f"no answer within {timeout_s:g} s (the same query, asked for by another "
                                   f"request, is still running)") from None
            except ClientGone:
                if cancel is not None and cancel.cancelled:
                    raise
                # the request computing it went away, not this one: compute it here
                left = max(0.0, deadline - time.monotonic())
                answers.update(self.shared([key], compute, timeout_s=left, cancel=cancel, store=store))
        return answers

    @staticmethod
    def _wait(flight: Future, deadline: float, cancel) -> object:
        """The flight's answer, waiting until ``deadline`` or until the client goes away (no polling)."""
        if cancel is None:
            return flight.result(timeout=max(0.0, deadline - time.monotonic()))
        gone: Future = Future()
        unwatch = cancel.watch(lambda: gone.done() or gone.set_result(None))
        try:
            futures_wait([flight, gone], timeout=max(0.0, deadline - time.monotonic()), return_when=FIRST_COMPLETED)
        finally:
            unwatch()
        if flight.done():
            return flight.result()
        cancel.check()
        raise FutureTimeout()

    def _compute(self, todo: list, compute: Callable, timeout_s: float, cancel=None, store: str = "answers") -> dict:
        try:
            with self.slot(timeout_s, cancel=cancel):
                done = compute(todo)
                missing = [k for k in todo if k not in done]
                if missing:
                    raise RuntimeError(f"compute() left out {len(missing)} of the keys it was given")
        except BaseException as exc:
            self._settle(todo, error=exc)
            raise
        self._settle(todo, done=done, store=store)
        return {k: done[k] for k in todo}

    def _settle(self, keys: list, *, done: dict | None = None, error: BaseException | None = None,
                store: str = "answers") -> None:
        with self._lock:
            flights = [self._flights.pop(k) for k in keys]
            if done is not None:
                self.counts["computed" if store == "answers" else "indexed"] += len(keys)
                for key in keys:
                    if store == "index":
                        self._keep_index(key, done[key])
                    else:
                        self._remember(key, done[key])
        for key, flight in zip(keys, flights):
            if error is not None:
                flight.set_exception(error)
            else:
                flight.set_result(done[key])

    def _remember(self, key: Hashable, value: object) -> None:
        size = approx_bytes(value)
        if size > self.cache_bytes // 4:  # one huge answer would push out everything else
            return
        self._cache[key] = (value, size)
        self._cached_bytes += size
        while self._cached_bytes > self.cache_bytes:
            _, (_, old) = self._cache.popitem(last=False)
            self._cached_bytes -= old

    def index_has(self, key: Hashable) -> bool:
        """Whether the "index" store holds ``key`` now."""
        with self._lock:
            return key in self._index

    def index_pending(self, key: Hashable) -> bool:
        """Whether ``key`` is queued for (or being read by) the background thread."""
        with self._lock:
            return key in self._later_keys

    def index_later(self, key: Hashable, job: Callable[[], object]) -> bool:
        """Queue ``job`` (which fills the "index" entry ``key``) on the pool's background thread; False when the
        key is queued, being read or kept already. Jobs run one at a time, in order, each in a query slot of its
        own (through :meth:`shared`); an error is logged and leaves the entry out (a later request queues it
        again)."""
        with self._lock:
            if key in self._later_keys or key in self._index:
                return False
            self._later_keys.add(key)
            self._later.append((key, job))
            if self._later_thread is None:
                self._later_thread = threading.Thread(target=self._later_loop, name="ascendscope-index-loader",
                                                      daemon=True)
                self._later_thread.start()
            self._later_wake.notify()
        return True

    def _later_loop(self) -> None:
        while True:
            with self._lock:
                while not self._later:
                    self._later_wake.wait()
                key, job = self._later[0]
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - a run deleted or closed meanwhile: the SQL path still answers
                log.info("reading %s into memory in the background failed: %s", key[2:], exc)
            finally:
                with self._lock:
                    self._later.popleft()
                    self._later_keys.discard(key)
                    self._later_wake.notify_all()

    def index_settled(self, timeout_s: float = 60.0) -> bool:
        """Wait until the background thread has nothing left to read (tests); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._later:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._later_wake.wait(left)
        return True

    def index_admits(self, key: Hashable, size: int) -> bool:
        """Whether the "index" store holds ``key``, or would keep an entry of about ``size`` bytes: one at most a
        quarter of its budget, for which there is room, or room made by pushing out only entries not used for
        ``INDEX_HOT_S``. When the entries in use fill the budget, the others are answered another way, instead
        of being read again and again in turn."""
        with self._lock:
            if key in self._index:
                return True
            if size > self.index_bytes // 4 or key in self._index_refused:  # (the estimate was too low once)
                return False
            need = self._index_used + size - self.index_bytes
            if need <= 0:
                return True
            cold_before = time.monotonic() - INDEX_HOT_S
            for old, (_, old_size) in self._index.items():  # least recently used first
                if self._index_touched.get(old, 0.0) > cold_before:
                    return False
                need -= old_size
                if need <= 0:
                    return True
            return False

    def _keep_index(self, key: Hashable, value: object) -> None:
        size = approx_bytes(value)
        if size > self.index_bytes // 4:  # never again: admitting it would read it for every request
            self._index_refused[key] = None
            while len(self._index_refused) > INDEX_REFUSED_KEPT:
                self._index_refused.popitem(last=False)
            return
        self._index[key] = (value, size)
        self._index_touched[key] = time.monotonic()
        self._index_used += size
        while self._index_used > self.index_bytes:
            old_key, (_, old) = self._index.popitem(last=False)
            self._index_touched.pop(old_key, None)
            self._index_used -= old

    def cached_bytes(self) -> int:
        return self._cached_bytes

    def index_used(self) -> int:
        """Bytes of the "index" store now."""
        return self._index_used


def approx_bytes(value: object) -> int:
    """Rough memory of an answer: numpy buffers, plus a Python object's size for each element of object arrays,
    lists and dicts."""
    if isinstance(value, np.ndarray):
        if mapped(value):  # a file's pages, shared by every process and given back by the kernel at will
            return MAPPED_ARRAY_BYTES
        return value.nbytes + (64 * value.size if value.dtype == object else 0)
    if isinstance(value, dict):
        return 64 + sum(approx_bytes(k) + approx_bytes(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 56 + sum(approx_bytes(v) for v in value)
    return sys.getsizeof(value)


_PRIVATE: list[Path] = []


def _private_lock_dir() -> Path:
    """One temporary folder per process for pools given no lock folder (tests, scripts)."""
    if not _PRIVATE:
        _PRIVATE.append(Path(tempfile.mkdtemp(prefix=f"ascendscope-slots-{os.getpid()}-")))
    return _PRIVATE[0]
