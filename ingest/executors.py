"""Where the rank tasks of a sharded ingest run: a local process pool (the default) or a Ray cluster.

:func:`make_executor` gives an object with ``run(fn, calls)``: it calls ``fn(**kwargs)`` for every dict of
``calls`` somewhere else and yields ``(index, result, error)`` as each finishes, in any order (``error`` is a
one-line text, ``result`` None then). ``fn`` must be a picklable module-level function whose arguments name
paths every worker can read and write (with Ray on several nodes: shared storage). ``close()`` frees the workers.

* ``process``: ``concurrent.futures.ProcessPoolExecutor`` with ``workers`` processes (default: every core),
  started by forkserver (spawn where there is none), so a worker shares no threads or DuckDB state with its
  parent. A worker that dies (killed, out of memory) breaks the pool: the tasks it took down are run once more in
  a fresh pool, and fail with the reason if they die again.
* ``ray``: one ``ray.remote`` task per call on the cluster at ``address`` (``ray.init(address=...)``), or on a
  local one of ``workers`` CPUs. Ray is an optional extra (``pip install 'ascendscope[ray]'``), imported only here.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

EXECUTORS = ("process", "ray")
POOL_ATTEMPTS = 2  # a task whose worker died is tried this many times in all


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


class ProcessExecutor:
    def __init__(self, workers: int | None = None):
        self.workers = max(1, int(workers or default_workers()))
        methods = multiprocessing.get_all_start_methods()
        self.context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")

    def run(self, fn: Callable, calls: list[dict]) -> Iterator[tuple[int, object, str | None]]:
        todo = list(range(len(calls)))
        tries = dict.fromkeys(todo, 0)
        while todo:
            died: list[int] = []
            with ProcessPoolExecutor(max_workers=min(self.workers, len(todo)), mp_context=self.context) as pool:
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
