"""Where the rank tasks of a sharded ingest run: a local process pool (the default) or a Ray cluster.

:func:`make_executor` gives an object with ``run(fn, calls)``: it calls ``fn(**kwargs)`` for every dict of
``calls`` somewhere else and yields ``(index, result, error)`` as each finishes, in any order (``error`` is a
one-line text, ``result`` None then). ``fn`` must be a picklable module-level function whose arguments name
paths every worker can read and write (with Ray on several nodes: shared storage). ``close()`` frees the workers.

* ``process``: ``concurrent.futures.ProcessPoolExecutor`` with ``workers`` processes (default: every core),
  started by forkserver (spawn where there is none), so a worker shares no threads or DuckDB state with its
  parent. A worker that dies (killed, out of memory) breaks the pool: the tasks it took down are run once more in
  a fresh pool, and fail with the reason if they die again. A worker exits as soon as the process that started
  the pool dies, so a killed ingest leaves no orphan writing into the run's folder.
* ``ray``: one ``ray.remote`` task per call on the cluster at ``address`` (``ray.init(address=...)``), or on a
  local one of ``workers`` CPUs. Ray is an optional extra (``pip install 'ascendscope[ray]'``), imported only here.
"""

from __future__ import annotations

import multiprocessing
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
ORPHAN_POLL_S = 0.1  # how often a pool worker looks whether the process that started the pool is gone


class ExecutorUnavailable(Exception):
    """The executor asked for cannot run here (Ray missing, a cluster that does not answer)."""


def make_executor(kind: str = "process", *, workers: int | None = None, ray_address: str | None = None):
    if kind == "process":
        return ProcessExecutor(workers)
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


def _exit_with_owner(owner: int) -> None:
    """Pool worker initializer: exit at once when the process that started the pool (``owner``) is gone, or
    our parent changes (the fork server that started us died). A terminal's Ctrl+C reaches the whole process
    group: the owner decides what it means (it stops the pool), so a task is never cut short by it alone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent and _alive(owner):
            time.sleep(ORPHAN_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


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
    return multiprocessing.get_context("forkserver")


class ProcessExecutor:
    def __init__(self, workers: int | None = None):
        self.workers = max(1, int(workers or default_workers()))
        self.context = _start_context()

    def run(self, fn: Callable, calls: list[dict]) -> Iterator[tuple[int, object, str | None]]:
        todo = list(range(len(calls)))
        tries = dict.fromkeys(todo, 0)
        while todo:
            died: list[int] = []
            pool = ProcessPoolExecutor(max_workers=min(self.workers, len(todo)), mp_context=self.context,
                                       initializer=_exit_with_owner, initargs=(os.getpid(),))
            try:
                futures = {pool.submit(fn, **calls[i]): i for i in todo}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        i = futures[fut]
                        try:
                            yield i, fut.result(), None
                        except BrokenProcessPool as exc:
                            tries[i] += 1
                            if tries[i] < POOL_ATTEMPTS:
                                died.append(i)
                            else:
                                yield i, None, f"the worker process died ({_message(exc)})"
                        except Exception as exc:  # noqa: BLE001 - the task's own failure is its result
                            yield i, None, _message(exc)
            except BaseException:  # interrupted (Ctrl+C, the caller gave up): stop the tasks still running
                for proc in list((pool._processes or {}).values()):
                    proc.terminate()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown(wait=True)
            todo = sorted(died)

    def close(self) -> None:
        pass


class RayExecutor:
    def __init__(self, workers: int | None = None, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise ExecutorUnavailable("the ray executor needs Ray: pip install 'ascendscope[ray]' (or 'ray>=2.40,<3')"
                                      ) from None
        self.ray = ray
        self.owned = not ray.is_initialized()
        if self.owned:
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(num_cpus=max(1, int(workers or default_workers())), include_dashboard=False,
                             log_to_driver=False)
            except Exception as exc:  # Ray raises several kinds for an unreachable cluster
                raise ExecutorUnavailable(f"cannot start Ray{f' at {address}' if address else ''}: "
                                          f"{_message(exc)}") from exc

    def run(self, fn: Callable, calls: list[dict]) -> Iterator[tuple[int, object, str | None]]:
        ray = self.ray
        # a task whose worker died is retried once by Ray itself; an exception the task raises is not
        remote = ray.remote(num_cpus=1, max_retries=POOL_ATTEMPTS - 1)(fn)
        refs = {remote.remote(**kwargs): i for i, kwargs in enumerate(calls)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    yield refs[ref], ray.get(ref), None
                except ray.exceptions.RayTaskError as exc:
                    yield refs[ref], None, _message(getattr(exc, "cause", None) or exc)
                except Exception as exc:  # noqa: BLE001 - a lost worker or node
                    yield refs[ref], None, _message(exc)

    def close(self) -> None:
        if self.owned:
            self.ray.shutdown()
