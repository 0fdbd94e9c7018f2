"""A worker process of ``ascendscope.sqlproc``: its limits applied, then one job at a time until its socket closes.

    python -m ascendscope.sqlworker FD     # FD: its end of a socket pair; its Limits come first

``arrow`` jobs (``Run.sql``) are answered here; a console worker (``server.consoleworker``) adds the console's
(``handlers``). The messages and the limits are those of ``ascendscope.sqlproc``.
"""

from __future__ import annotations

import os
import pickle
import queue
import resource
import shutil
import signal
import sys
import tempfile
import threading
from multiprocessing.connection import Connection
from pathlib import Path

import duckdb

from ascendscope.sqlproc import PART_BYTES, Limits
from ascendscope.sqlrules import ReadOnlyQueryError, first_line


class Worker:
    """The state of one worker process: its limits, spill folder, open runs and the job being run."""

    def __init__(self, limits: Limits, temp_dir: Path, handlers: dict | None = None):
        self.limits, self.temp_dir = limits, temp_dir
        self.handlers = handlers or {}  # job kind -> handler(worker, job) -> (meta, payload), beside "arrow"
        self.runs: dict[tuple, duckdb.DuckDBPyConnection] = {}
        self.console = None  # server.console.ConsoleDatabases, made by the first console job
        self.interrupt = None  # the running query's interrupt
        self.halted = False  # the running job was stopped (its deadline, or its client gone)
        self.lock = threading.Lock()
        self.stopped: set[int] = set()

    def run_conn(self, path: str) -> duckdb.DuckDBPyConnection:
        from ascendscope import readonly

        target = Path(path)
        key = (str(target), (target / "manifest.json" if target.is_dir() else target).stat().st_mtime_ns)
        conn = self.runs.get(key)
        if conn is None:
            for old in self.runs.values():
                old.close()
            self.runs.clear()
            conn = self.runs[key] = readonly.open_run(
                target, None, memory_limit=self.limits.memory_limit, threads=self.limits.threads,
                temp_dir=self.temp_dir, max_temp_size=self.limits.max_temp_size)[0]
        return conn

    def watch(self, interrupt) -> None:
        """``interrupt`` stops the job's query from now on (None: no query runs); a job stopped already (its
        deadline passed while it opened the run or checked the query) is interrupted at once."""
        with self.lock:
            self.interrupt = interrupt
            if interrupt is not None and self.halted:
                self._interrupt()

    def stop(self) -> None:
        """Stop the running job: its query now, and any query it starts later."""
        with self.lock:
            self.halted = True
            self._interrupt()

    def _interrupt(self) -> None:
        if self.interrupt is not None:
            try:
                self.interrupt()
            except duckdb.Error:
                pass


def arrow_job(worker: Worker, job: dict, part) -> dict:
    """``Run.sql``: check, run and stream the whole result as Arrow IPC, a few MB at a time through ``part``, so
    that the worker holds one batch of it beside DuckDB's own memory."""
    import pyarrow as pa

    from ascendscope import readonly

    conn = worker.run_conn(job["path"])
    params = job.get("params")
    bound = params if isinstance(params, dict) else list(params or ())
    readonly.check_query(conn, job["sql"], bound)
    cur = conn.cursor()
    worker.watch(cur.interrupt)
    try:
        reader = cur.sql(job["sql"], params=bound or None).to_arrow_reader(64 * 1024)
        rows = 0
        sink = pa.BufferedOutputStream(pa.PythonFile(_Parts(part), mode="w"), buffer_size=PART_BYTES)
        with pa.ipc.new_stream(sink, reader.schema) as out:
            for batch in reader:
                out.write_batch(batch)
                rows += batch.num_rows
        sink.flush()
        return {"rows": rows}
    finally:
        worker.watch(None)
        cur.close()


class _Parts:
    """A write-only file whose writes go to the owner as parts of the answer."""

    closed = False

    def __init__(self, part):
        self.part = part

    def write(self, data) -> int:
        self.part(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def do_job(worker: Worker, job: dict, part) -> tuple[dict, bytes]:
    """(meta, payload) of ``job``; ``part(bytes)`` sends a piece of the payload ahead of the answer."""
    if job["kind"] == "arrow":
        return arrow_job(worker, job, part), b""
    handler = worker.handlers.get(job["kind"])
    if handler is None:
        raise ValueError(f"no such job here: {job['kind']!r}")
    return handler(worker, job)


def failure(exc: BaseException, timeout_s: float | None, stopped: bool) -> tuple[str, str]:
    """(code, message) of a job that raised ``exc``; ``timeout_s``: its deadline had passed."""
    text = first_line(exc)
    if timeout_s is not None:
        return "query_timeout", f"the query took longer than {timeout_s:.3g} s and was stopped"
    if stopped:
        return "query_stopped", "the query was stopped: its client went away"
    if isinstance(exc, ReadOnlyQueryError):
        return exc.code, str(exc)
    if isinstance(exc, (MemoryError, duckdb.OutOfMemoryException)) or "out of memory" in text.lower():
        return "out_of_memory", f"the query needed more memory than its limit and was stopped ({text})"
    if isinstance(exc, (duckdb.Error, OSError)) or type(exc).__module__.startswith("pyarrow"):
        return "query_failed", text
    return "internal_error", f"{type(exc).__name__}: {text}"


def serve(conn: Connection, worker: Worker) -> None:
    """Answer each job of ``conn``, one at a time; a thread reads ``conn`` so that a stop reaches a running job."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:
        while True:
            try:
                message = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):  # its owner is gone: nobody reads what runs now
                shutil.rmtree(worker.temp_dir, ignore_errors=True)
                os._exit(0)
            if message[0] == "stop":
                worker.stopped.add(message[1])
                worker.stop()
            else:
                inbox.put(message)

    threading.Thread(target=read, name="ascendscope-sql-inbox", daemon=True).start()
    while True:
        _, seq, job, timeout_s = inbox.get()
        with worker.lock:
            worker.halted = seq in worker.stopped
        timer = None
        state = {"timed_out": False}
        if timeout_s is not None:
            def expire(state: dict = state) -> None:
                state["timed_out"] = True
                worker.stop()

            timer = threading.Timer(max(0.0, timeout_s), expire)
            timer.daemon = True
            timer.start()
        def part(data: bytes, seq: int = seq) -> None:
            conn.send_bytes(pickle.dumps((seq, "part", data), protocol=pickle.HIGHEST_PROTOCOL))

        try:
            meta, payload = do_job(worker, job, part)
            meta["rss"] = rss_bytes()
            answer = (seq, "ok", meta, payload)
        except BaseException as exc:  # noqa: BLE001 - every failure is answered; the owner decides what follows
            answer = (seq, "error", *failure(exc, timeout_s if state["timed_out"] else None, seq in worker.stopped))
        finally:
            if timer is not None:
                timer.cancel()
        worker.stopped.discard(seq)
        try:
            conn.send_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            return


def rss_bytes() -> int:
    try:
        with open(f"/proc/{os.getpid()}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def confine(limits: Limits) -> Path:
    """This process's address space and spill folder, as ``limits`` say (its priority its owner set); the
    folder."""
    space = limits.address_space()
    if space is not None:
        resource.setrlimit(resource.RLIMIT_AS, (space, space))
    root = Path(limits.temp_root) if limits.temp_root else Path(tempfile.gettempdir()) / "ascendscope-sql"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"w{os.getpid()}-", dir=root))


def main(argv: list[str], handlers: dict | None = None) -> None:
    """A worker's life: its limits read, applied, then jobs until its socket closes; ``handlers``: job kinds it
    answers beside ``arrow`` (the console's: ``server.consoleworker``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # its owner stops it (a session of its own: no Ctrl+C)
    conn = Connection(int(argv[0]))
    try:
        limits = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        return
    temp_dir = confine(limits)
    worker = Worker(limits, temp_dir, handlers)
    try:
        conn.send_bytes(pickle.dumps({"pid": os.getpid(), "temp_dir": str(temp_dir)}))
        serve(conn, worker)
    except OSError:  # its owner went away (closed while this one started)
        pass
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
