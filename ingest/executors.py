"""Where the shard tasks of a sharded ingest run: a local process pool (the default) or a Ray cluster.

:func:`make_executor` gives an object with ``start(fn, calls, order=None) -> Batch``: the batch calls
``fn(**kwargs)`` for every dict of ``calls`` somewhere else, at most ``workers`` at a time, picking each next call
when a slot frees (``order(pending indices)`` puts them in the order wanted *now*: the caller may change its mind
between two picks, e.g. because a user opened a rank). ``batch.poll(timeout_s)`` returns the calls finished
meanwhile as ``(index, result, error)`` (``error`` a one-line text, ``result`` None then), ``batch.done`` says
all are, and ``batch.stop()`` cancels the rest and stops the running ones. ``run(fn, calls)`` iterates over a
batch's results. ``batch.fill()`` starts the next calls in the free slots at once (``poll`` does so only when called
again). ``fn`` must be a picklable module-level function whose arguments name paths every worker can
read and write (with Ray on several nodes: shared storage). ``close()`` frees the workers.

* ``process``: ``concurrent.futures.ProcessPoolExecutor`` with ``workers`` processes (default: every core),
  started by forkserver (spawn where there is none), so a worker shares no threads or DuckDB state with its
  parent, and ``nice`` steps nicer than it when asked. A worker that dies (killed, out of memory) breaks the
  pool: the tasks it took down are run once more in a fresh pool, and fail with the reason if they die again. A
  worker exits as soon as the process that started the pool dies, or the batch is stopped (a multiprocessing
  Event each worker watches), so a killed or interrupted ingest leaves no task writing into the run's folder.
* ``ray``: one ``ray.remote`` task per call on the cluster at ``address`` (``ray.init(address=...)``), or on a
  local one of ``workers`` CPUs; stopped by ``ray.cancel``. Ray is an optional extra (``pip install
  'ascendscope[ray]'``), imported only here.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.util
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

EXECUTORS = ("process", "ray")
POOL_ATTEMPTS = 2  # a task whose worker died is tried this many times in all
MAX_SOCKET_DIR = 70  # the fork server's socket path (this folder + ~30 characters) must stay under 108 bytes
POOL_PRELOAD = ["ascendscope.ingest.pipeline"]  # the module of the shard task (pipeline.ingest_shard)
ORPHAN_POLL_S = 0.1  # how often a pool worker looks whether the process that started the pool is gone


class ExecutorUnavailable(Exception):
    """The executor asked for cannot run here (Ray missing, a cluster that does not answer)."""


def make_executor(kind: str = "process", *, workers: int | None = None, ray_address: str | None = None,
                  nice: int = 0):
    """``nice``: the process pool's workers run at this much lower CPU priority (the Ray executor ignores it)."""
    if kind == "process":
        return ProcessExecutor(workers, nice=nice)
    if kind == "ray":
        return RayExecutor(workers, ray_address)
    raise ValueError(f"unknown executor {kind!r} (choose from {', '.join(EXECUTORS)})")


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def _message(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie not reaped yet is gone too
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _exit_with_owner(owner: int, stop=None, nice: int = 0) -> None:
    """Pool worker initializer: exit at once when the process that started the pool (``owner``) is gone, our
    parent changes (the fork server that started us died) or ``stop`` (a multiprocessing Event) is set. A
    terminal's Ctrl+C reaches the whole process group: the owner decides what it means (it stops the batch), so a
    task is never cut short by it alone. ``nice``: lower this worker's CPU priority by that much."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _join_owner_group(owner)
    if nice:
        try:
            os.nice(nice)
        except OSError:  # (a priority is a courtesy)
            pass
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent and _alive(owner):
            if stop is None:
                time.sleep(ORPHAN_POLL_S)
            elif stop.wait(ORPHAN_POLL_S):
                break
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _join_owner_group(owner: int) -> None:
    """Join the process group of the pool's owner, which a fork server shared by several owners (the worker host's,
    ``share_fork_server``) does not give: whoever waits for that group to end, or kills it (``server.worker``'s
    contract: nothing of a killed worker's group may still write into its run), waits for or kills this process
    too. Exit at once when the owner is gone already: there is nothing to work for (a task starts only after)."""
    try:
        group = os.getpgid(owner)
    except OSError:
        os._exit(1)
    if os.getpgrp() != group:
        try:
            os.setpgid(0, group)
        except OSError:  # (another session's group: the orphan watch below still ends this process)
            pass
    if not _alive(owner):
        os._exit(1)


def _start_context():
    """forkserver, unless its socket would not fit: it listens in multiprocessing's temp dir, which follows
    ``tempfile.tempdir`` (the server's ingest worker points that into the run's folder, often deeper than an
    AF_UNIX path may be); that dir is chosen once per process, so it is chosen here with the system default."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    saved, tempfile.tempdir = tempfile.tempdir, None
    try:
        folder = multiprocessing.util.get_temp_dir()
    finally:
        tempfile.tempdir = saved
    if len(folder) > MAX_SOCKET_DIR:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # the fork server imports the shard task's modules once (added to what this process already asked it to
    # preload): else each pool worker imports them itself, ~1 CPU-s per worker of every pool started
    asked = list(getattr(multiprocessing.forkserver._forkserver, "_preload_modules", None) or ["__main__"])
    ctx.set_forkserver_preload([*asked, *(m for m in POOL_PRELOAD if m not in asked)])
    return ctx


def share_fork_server() -> bool:
    """Start this process's fork server now, with the shard task's modules preloaded, for the processes it forks
    next (the server's ingest worker host): each forked ingest worker then starts its pools in milliseconds
    instead of starting a fork server of its own (~0.4 s of wall and 0.3 CPU-s: a Python that imports the
    pipeline). A forked child takes it with :func:`adopt_fork_server`. False where pools use spawn."""
    if _start_context().get_start_method() != "forkserver":
        return False
    multiprocessing.forkserver.ensure_running()
    return True


def adopt_fork_server() -> None:
    """In a process forked from one that ran :func:`share_fork_server`: start its pools from that fork server
    while it lives, else from one of its own. (multiprocessing asks whether its fork server lives with
    ``waitpid``, which only the process that started it may: in a forked child that raises.)"""
    server = multiprocessing.forkserver._forkserver
    inherited = server._forkserver_pid
    if inherited is None:
        return
    start_own = type(server).ensure_running

    def ensure_running():
        if server._forkserver_pid == inherited:
            if _alive(inherited):
                multiprocessing.resource_tracker.ensure_running()
                return
            # it died: forget it (its parent reaps it), and start one of this process's own
            os.close(server._forkserver_alive_fd)
            server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
        start_own(server)

    server.ensure_running = ensure_running


class Batch:
    """Calls of one ``fn`` spread over the workers, submitted lazily in the order wanted (see the module
    docstring); subclasses submit and collect."""

    def __init__(self, fn: Callable, calls: list[dict], slots: int, order: Callable | None):
        self.fn, self.calls, self.slots, self.order = fn, calls, max(1, slots), order
        self.pending = list(range(len(calls)))
        self.tries = dict.fromkeys(self.pending, 0)
        self.running: dict = {}  # handle -> index

    @property
    def done(self) -> bool:
        return not self.pending and not self.running

    def _next(self) -> int:
        ordered = self.order(list(self.pending)) if self.order else self.pending
        pick = next((i for i in ordered if i in self.pending), self.pending[0])
        self.pending.remove(pick)
        return pick

    def fill(self) -> None:
        """Start the next calls in the free slots now (``poll`` does it first thing too): a caller with work to
        do between two polls calls it at once, so the workers do not wait for that work."""
        while self.pending and len(self.running) < self.slots:
            i = self._next()
            self.running[self._submit(i)] = i

    def _retry(self, i: int, why: str) -> tuple | None:
        """A call whose worker died: queued again, or its failure once it died POOL_ATTEMPTS times."""
        self.tries[i] += 1
        if self.tries[i] < POOL_ATTEMPTS:
            self.pending.insert(0, i)
            return None
        return i, None, f"the worker process died ({why})"

    def poll(self, timeout_s: float | None = None) -> list[tuple[int, object, str | None]]:
        raise NotImplementedError

    def _submit(self, i: int):
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


def iterate(batch: Batch) -> Iterator[tuple[int, object, str | None]]:
    """Every result of ``batch`` as it comes; stops its running calls if the loop is left early."""
    try:
        while not batch.done:
            yield from batch.poll(None)
    except BaseException:  # interrupted (Ctrl+C, the caller gave up): stop the tasks still running
        batch.stop()
        raise


class ProcessExecutor:
    def __init__(self, workers: int | None = None, nice: int = 0):
        self.workers = max(1, int(workers or default_workers()))
        self.nice = nice
        self.context = _start_context()

    def start(self, fn: Callable, calls: list[dict], order: Callable | None = None) -> Batch:
        return _PoolBatch(self, fn, calls, order)

    def run(self, fn: Callable, calls: list[dict]) -> Iterator[tuple[int, object, str | None]]:
        return iterate(self.start(fn, calls))

    def close(self) -> None:
        pass


class _PoolBatch(Batch):
    def __init__(self, ex: ProcessExecutor, fn: Callable, calls: list[dict], order: Callable | None):
        super().__init__(fn, calls, min(ex.workers, len(calls)), order)
        self.ex = ex
        self.pool: ProcessPoolExecutor | None = None
        self.stopping = None

    def _pool(self) -> ProcessPoolExecutor:
        if self.pool is None:
            self.stopping = self.ex.context.Event()  # set by stop(): every worker of this pool exits
            self.pool = ProcessPoolExecutor(max_workers=self.slots, mp_context=self.ex.context,
                                            initializer=_exit_with_owner,
                                            initargs=(os.getpid(), self.stopping, self.ex.nice))
        return self.pool

    def _submit(self, i: int):
        return self._pool().submit(self.fn, **self.calls[i])


    def poll(self, timeout_s: float | None = None) -> list[tuple[int, object, str | None]]:
        self.fill()
        if not self.running:
            return []
        done, _ = wait(list(self.running), timeout=timeout_s, return_when=FIRST_COMPLETED)
        out = []
        broken = None
        for fut in done:
            i = self.running.pop(fut)
            try:
                out.append((i, fut.result(), None))
            except BrokenProcessPool as exc:
                broken = exc
                out += [r for r in [self._retry(i, _message(exc))] if r]
            except Exception as exc:  # noqa: BLE001 - the task's own failure is its result
                out.append((i, None, _message(exc)))
        if broken is not None:  # the pool is gone, and with it every call still running in it
            for fut, i in list(self.running.items()):
                self.running.pop(fut)
                out += [r for r in [self._retry(i, _message(broken))] if r]
            self.pool.shutdown(wait=True)
            self.pool = None
        if self.done:
            self._close()
        return out

    def _close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def stop(self) -> None:
        self.pending.clear()
        if self.pool is None:
            return
        self.stopping.set()  # the workers exit now, whatever they run (see _exit_with_owner)
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool = None
        self.running.clear()


class RayExecutor:
    def __init__(self, workers: int | None = None, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise ExecutorUnavailable("the ray executor needs Ray: pip install 'ascendscope[ray]' (or 'ray>=2.40,<3')"
                                      ) from None
        self.ray = ray
        self.workers = max(1, int(workers or default_workers()))
        self.owned = not ray.is_initialized()
        if self.owned:
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False)
            except Exception as exc:  # Ray raises several kinds for an unreachable cluster
                raise ExecutorUnavailable(f"cannot start Ray{f' at {address}' if address else ''}: "
                                          f"{_message(exc)}") from exc
        if address:  # as many tasks in flight as the cluster has CPUs
            self.workers = max(1, int(ray.cluster_resources().get("CPU", self.workers)))

    def start(self, fn: Callable, calls: list[dict], order: Callable | None = None) -> Batch:
        return _RayBatch(self, fn, calls, order)

    def run(self, fn: Callable, calls: list[dict]) -> Iterator[tuple[int, object, str | None]]:
        return iterate(self.start(fn, calls))

    def close(self) -> None:
        if self.owned:
            self.ray.shutdown()


class _RayBatch(Batch):
    def __init__(self, ex: RayExecutor, fn: Callable, calls: list[dict], order: Callable | None):
        super().__init__(fn, calls, ex.workers, order)
        self.ray = ex.ray
        # a task whose worker died is retried once by Ray itself; an exception the task raises is not
        self.remote = ex.ray.remote(num_cpus=1, max_retries=POOL_ATTEMPTS - 1)(fn)

    def _submit(self, i: int):
        return self.remote.remote(**self.calls[i])

    def poll(self, timeout_s: float | None = None) -> list[tuple[int, object, str | None]]:
        self.fill()
        if not self.running:
            return []
        done, _ = self.ray.wait(list(self.running), num_returns=1, timeout=timeout_s)
        out = []
        for ref in done:
            i = self.running.pop(ref)
            try:
                out.append((i, self.ray.get(ref), None))
            except self.ray.exceptions.RayTaskError as exc:
                out.append((i, None, _message(getattr(exc, "cause", None) or exc)))
            except Exception as exc:  # noqa: BLE001 - a lost worker or node
                out.append((i, None, _message(exc)))
        return out

    def stop(self) -> None:
        self.pending.clear()
        for ref in list(self.running):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or gone: nothing left to stop
                pass
        self.running.clear()
