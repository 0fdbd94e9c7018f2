"""Ingest progress in run.json: :class:`RunProgress` mirrors what the pipeline reports (phase, bytes done /
total, an estimated percentage, MB/s, ETA) into the run's record, at most every :data:`PROGRESS_INTERVAL_S` for
file events and at least every :data:`TICK_S` while the worker runs. The worker process (``server.workerprocess``)
makes one per ingest.
"""

from __future__ import annotations

import threading
import time

from ascendscope.server.runs import RunNotFound, RunStore

PROGRESS_INTERVAL_S = 0.5  # run.json is rewritten at most this often for file events …
TICK_S = 1.0  # … and at least this often (elapsed time, ETA) while the worker runs
READ_SHARE_PCT = 90.0  # reading the files is this share of the estimated percentage, the phases after it the rest
PHASE_STEP_PCT = 2.0


class RunProgress:
    """Mirrors ingest progress into run.json: phase, bytes done / total, an estimated percentage, MB/s, ETA.

    Bytes advance as files finish and, for a trace, while it loads (DuckDB's own scan progress, then the
    derivation steps). Implements :class:`ingest.pipeline.Progress`.
    """

    def __init__(self, store: RunStore, run_id: str):
        self.store, self.run_id = store, run_id
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.read_started: float | None = None
        self.phase_name, self.text = "starting", "starting"
        self.total = self.done = 0
        self.partial: dict[str, int] = {}  # bytes done of files still loading
        self.files_done = 0
        self.ranks: int | None = None
        self.current: list[str] = []
        self.after_read = 0
        self.last_write = 0.0
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="progress-ticker", daemon=True)
        self._ticker.start()

    def begin(self, total_bytes: int, ranks: int) -> None:
        with self.lock:
            self.total, self.ranks = max(1, total_bytes), ranks
            self.phase_name, self.read_started = "reading", time.monotonic()
        self.write(force=True)

    def file_start(self, rank: int, name: str, size: int) -> None:
        with self.lock:
            self.current.append(_current(rank, name))
        self.write()

    def file_progress(self, rank: int, name: str, done_bytes: int) -> None:
        with self.lock:
            self.partial[name] = done_bytes
        self.write()

    def file_done(self, rank: int, name: str, size: int, seconds: float) -> None:
        with self.lock:
            self.partial.pop(name, None)
            self.done += size
            self.files_done += 1
            label = _current(rank, name)
            if label in self.current:
                self.current.remove(label)
        self.write()

    def phase(self, text: str) -> None:
        with self.lock:
            if self.read_started is None:
                self.phase_name = "extracting" if text.startswith("extracting") else "preparing"
            elif text.startswith("reading"):  # a step of reading the files (the small ones, then the ranks)
                self.phase_name = "reading"
            else:
                self.phase_name = "finishing"
                self.after_read += 1
            self.text, self.current = str(text)[:200], []
        self.write(force=True)

    def snapshot(self) -> dict:
        now = time.monotonic()
        percent, rate, eta = 0.0, None, None
        done = self.done + sum(self.partial.values())
        if self.read_started is not None:
            frac = min(1.0, done / self.total)
            percent = READ_SHARE_PCT * frac + min(100.0 - READ_SHARE_PCT - 1, PHASE_STEP_PCT * self.after_read)
            seconds = now - self.read_started
            if done and seconds > 0:
                rate = done / seconds
                if not self.after_read and done < self.total:
                    eta = (self.total - done) / rate
        if self.phase_name == "reading":
            shown = ", ".join(self.current[:2]) + (f" +{len(self.current) - 2}" if len(self.current) > 2 else "")
            text = f"reading {shown}" if shown else "reading"
        else:
            text = self.text
        return {"phase": self.phase_name, "text": text, "done_bytes": done, "total_bytes": self.total,
                "files_done": self.files_done, "ranks": self.ranks, "percent": round(percent, 1),
                "mb_per_s": round(rate / 1e6, 2) if rate else None, "eta_s": round(eta, 1) if eta else None,
                "elapsed_s": round(now - self.started, 1)}

    def write(self, force: bool = False) -> None:
        now = time.monotonic()
        with self.lock:
            if self._stop.is_set() or (not force and now - self.last_write < PROGRESS_INTERVAL_S):
                return
            self.last_write = now
            try:  # under the lock, so nothing lands after close()
                self.store.update(self.run_id, progress=self.snapshot())
            except (RunNotFound, OSError):  # the run was deleted under us; the queue is about to kill this worker
                pass

    def close(self) -> None:
        with self.lock:
            self._stop.set()
        self._ticker.join(TICK_S + 1)

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self.write(force=True)


def _current(rank: int, name: str) -> str:
    """How a file (or a shard: "ranks 0–99") being read is named in the progress line."""
    return name if name.startswith("rank") else f"rank {rank}: {name.rsplit('/', 1)[-1]}"
