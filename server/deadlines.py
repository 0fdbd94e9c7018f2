"""Deadlines for many queries from one thread.

:data:`DEADLINES`\\ ``.call_later(delay_s, fn)`` calls ``fn()`` once ``delay_s`` has passed, unless the returned
``cancel()`` ran first; after ``cancel()`` returns, ``fn`` will not be called. One daemon thread serves every
deadline: a ``threading.Timer`` per query starts a thread each time, which costs more than a short query and
makes the query wait for that thread to start. ``fn`` runs on that thread with its lock held, so it must be
quick and must not call back in (``cursor.interrupt`` only raises a flag).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("ascendscope.deadlines")


class Deadlines:
    def __init__(self):
        self._heap: list[list] = []  # [due (monotonic s), sequence, fn or None once cancelled]
        self._wake = threading.Condition()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def call_later(self, delay_s: float, fn: Callable[[], object]) -> Callable[[], None]:
        entry = [time.monotonic() + delay_s, next(self._order), fn]
        with self._wake:
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ascendscope-deadlines", daemon=True)
                self._thread.start()
            if self._heap[0] is entry:
                self._wake.notify()

        def cancel() -> None:
            with self._wake:
                entry[2] = None  # left in the heap; dropped when it reaches the top

        return cancel

    def pending(self) -> int:
        with self._wake:
            return sum(e[2] is not None for e in self._heap)

    def _run(self) -> None:
        with self._wake:
            while True:
                while self._heap and self._heap[0][2] is None:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake.wait()
                    continue
                delay = self._heap[0][0] - time.monotonic()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
                fn = heapq.heappop(self._heap)[2]
                try:
                    fn()
                except Exception:  # one failing callback must not stop the others' deadlines
                    log.exception("deadline callback failed")


DEADLINES = Deadlines()
