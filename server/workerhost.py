"""The ingest workers' host: a process started from our own entry point that forks each ingest worker.

:class:`server.worker.IngestQueue` asks for a worker per run (:class:`HostedWorker`). Why a process of our own:
multiprocessing's fork server and spawn prepare every child by importing the caller's ``__main__`` again, so a
script without an ``if __name__ == "__main__":`` guard (or one read from stdin) that calls ``ascendscope.open()``
would run itself again in the worker and die there. The host is ``python -c`` importing this module, with the
caller's ``sys.path``: nothing of the caller's ``__main__`` is ever imported, in the host, its workers or their
ingest pools. It imports the pipeline once (:data:`PRELOAD`), starts the fork server every worker's ingest pools
start from (``ingest.executors.share_fork_server``: a worker would otherwise start its own, ~0.4 s a run), and
forks a worker per request, in milliseconds; it runs one thread, so a fork copies no lock that another thread
holds.

One host per process, started with the first worker asked for and shared by every queue of that process (a worker
gets the environment and working folder of the request, not those the host started with). Requests and answers are
pickles over the host's stdin and stdout. The host ends when its stdin closes (the process that started it exited,
however it died). Its workers hold the read end of a lifeline pipe whose write end only that process has, and kill
themselves when it closes (``workerprocess._die_with_server``). A worker's stdout and stderr are its run's
ingest.log from its first instruction on, so whatever kills it leaves its traceback there. What a worker says on its
report pipe (``ingest_worker``'s ``report``: why its run's folder could not be written) comes back with its exit
code (:attr:`HostedWorker.said`).
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

# what the host imports once, before its first fork, rather than each worker
PRELOAD = ["ascendscope.server.workerprocess", "ascendscope.ingest.pipeline", "ascendscope.ingest.shards",
           "ascendscope.server.prewarm"]
REAP_POLL_S = 1.0  # the host looks for exited workers at least this often (SIGCHLD wakes it at once)
LOST_POLL_S = 0.1  # how often a worker whose host died is looked at until it has exited
LOST_WAIT_S = 5.0  # how long a host that closed its answers may take to exit, for its exit code

_HOST: _Host | None = None
_HOST_LOCK = threading.Lock()


class HostUnavailable(RuntimeError):
    """The host could not start a worker (it died, or the fork failed); the message has its reason."""


class HostedWorker:
    """One ingest worker, forked by the host; offers what the queue uses of a ``multiprocessing.Process``."""

    def __init__(self, data_dir: str, run_id: str, options: dict | None = None):
        self.request = (str(data_dir), run_id, options)
        self.pid: int | None = None
        self.exitcode: int | None = None
        self.lost = False  # its host died first: the exit code is unknown
        self.said: str | None = None  # what it sent on its report pipe (its run's folder could not be written)
        self._started = threading.Event()
        self._exited = threading.Event()
        self._error: str | None = None

    def start(self) -> None:
        """Ask the host for the worker; returns once it runs (its pid is known). Raises HostUnavailable."""
        _host().launch(self)
        self._started.wait()
        if self._error is not None:
            raise HostUnavailable(self._error)

    def is_alive(self) -> bool:
        return self.pid is not None and not self._exited.is_set()

    def join(self, timeout: float | None = None) -> None:
        if self.pid is not None:
            self._exited.wait(timeout)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.is_alive():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


def _host() -> _Host:
    """This process's host, started on first use (a forked child of a process with one starts its own)."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is None or not _HOST.usable():
            _HOST = _Host()
        return _HOST


class _Host:
    """The client's side of the host process: sends requests, and a thread reads what the host answers."""

    def __init__(self):
        self.owner = os.getpid()
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._starting: dict[int, HostedWorker] = {}
        self._running: dict[int, HostedWorker] = {}
        self._dead = False
        life_r, self._lifeline = os.pipe()  # the write end stays here for this process's life
        req_r, req_w = os.pipe()
        ev_r, ev_w = os.pipe()
        code = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
                "from ascendscope.server.workerhost import main; main(int(sys.argv[2]))")
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(sys.path), str(life_r)],
                                         stdin=req_r, stdout=ev_w, pass_fds=(life_r,), close_fds=True)
        finally:
            for fd in (life_r, req_r, ev_w):
                os.close(fd)
        self._requests = Connection(req_w, readable=False)
        self._events = Connection(ev_r, writable=False)
        threading.Thread(target=self._read, name="ascendscope-worker-host", daemon=True).start()

    def usable(self) -> bool:
        return self.owner == os.getpid() and not self._dead

    def launch(self, worker: HostedWorker) -> None:
        with self._lock:
            if self._dead:
                raise HostUnavailable("the ingest worker host has exited")
            token = next(self._tokens)
            self._starting[token] = worker
            try:
                self._requests.send(("start", token, *worker.request, dict(os.environ), os.getcwd()))
            except OSError as exc:
                self._starting.pop(token, None)
                raise HostUnavailable(f"the ingest worker host does not answer: {exc}") from None

    def _read(self) -> None:
        while True:
            try:
                kind, key, value = self._events.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                if kind == "started":
                    worker = self._starting.pop(key)
                    worker.pid = value
                    self._running[value] = worker
                    worker._started.set()
                elif kind == "refused":
                    worker = self._starting.pop(key)
                    worker._error = value
                    worker._started.set()
                elif kind == "exited" and key in self._running:
                    worker = self._running.pop(key)
                    worker.exitcode, worker.said = value
                    worker._exited.set()
        self._lost()

    def _lost(self) -> None:
        """The host exited: no worker starts any more, and those it ran are watched until they have exited."""
        with self._lock:
            self._dead = True
            starting, self._starting = list(self._starting.values()), {}
            running, self._running = list(self._running.values()), {}
        try:
            code = self.proc.wait(LOST_WAIT_S)
        except subprocess.TimeoutExpired:
            code = None
        why = "the ingest worker host exited" + (f" with code {code}" if code is not None else "")
        for worker in starting:
            worker._error = why
            worker._started.set()
        while running:
            for worker in [w for w in running if not _alive(w.pid)]:
                worker.lost = True
                worker._exited.set()
                running.remove(worker)
            time.sleep(LOST_POLL_S)
        os.close(self._lifeline)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (not when it is a zombie: an orphan's is reaped by another process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


def main(lifeline: int) -> None:
    """The host's body: preload, then fork a worker per request and report each worker's exit, until stdin closes
    (or nobody reads the answers any more)."""
    try:
        _serve(lifeline)
    except (EOFError, BrokenPipeError):
        pass


def _serve(lifeline: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl+C is for the process that started us to act on
    events = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # what anything prints goes to stderr, never into the answers
    requests = Connection(0, writable=False)
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a worker imports it again and says why in its run's log
            traceback.print_exc()
    try:  # one fork server for every worker's ingest pools (each would start its own: ~0.4 s a run)
        from ascendscope.ingest.executors import share_fork_server

        share_fork_server()
    except Exception:  # noqa: BLE001 - each worker starts a fork server of its own, as without a host
        traceback.print_exc()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(requests.fileno(), selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    own = (events.fileno(), wake_r, wake_w)
    reports: dict[int, Connection] = {}  # a worker's pid: the read end of its report pipe
    while True:
        for key, _ in selector.select(REAP_POLL_S):
            if key.fd == wake_r:
                while _drain(wake_r):
                    pass
                continue
            _, token, *args = requests.recv()
            try:
                pid, reports_r = _fork(args, lifeline, own + tuple(c.fileno() for c in reports.values()))
            except OSError as exc:  # (out of processes or memory)
                events.send(("refused", token, f"could not start an ingest worker: {exc}"))
                continue
            reports[pid] = reports_r
            events.send(("started", token, pid))
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            said = reports.pop(pid, None)
            events.send(("exited", pid, (os.waitstatus_to_exitcode(status), _said(said))))


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def _said(said: Connection | None) -> str | None:
    """What an exited worker sent on its report pipe, if anything; the pipe is closed."""
    if said is None:
        return None
    try:
        return said.recv_bytes().decode("utf-8", "replace") if said.poll() else None
    except (EOFError, OSError):
        return None
    finally:
        said.close()


def _fork(args: list, lifeline: int, own: tuple[int, ...]) -> tuple[int, Connection]:
    """Fork one worker running ``args`` (data dir, run id, options, environment, working folder): its pid and the
    read end of its report pipe (``workerprocess.ingest_worker``'s ``report``)."""
    said_fd, report_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(said_fd)
        os.close(report_fd)
        raise
    if pid:
        os.close(report_fd)
        return pid, Connection(said_fd, writable=False)
    code = 1
    try:
        os.close(said_fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for fd in own:
            os.close(fd)
        data_dir, run_id, options, env, cwd = args
        _output_to_log(data_dir, run_id)
        os.environ.clear()
        os.environ.update(env)
        try:
            os.chdir(cwd)
        except OSError:
            pass
        from ascendscope.ingest.executors import adopt_fork_server
        from ascendscope.server.workerprocess import ingest_worker

        adopt_fork_server()
        ingest_worker(data_dir, run_id, Connection(lifeline, writable=False), options,
                      report=Connection(report_fd, readable=False))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever it is, its traceback goes to the run's log
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return 0, None  # (never reached)


def _output_to_log(data_dir: str, run_id: str) -> None:
    """Point this worker's stdin at nothing and its stdout and stderr at the run's ingest.log (or at nothing
    when the run is gone)."""
    from ascendscope.server.runs import LOG_FILE, RunNotFound, RunStore

    null = os.open(os.devnull, os.O_RDWR)
    try:
        out = os.open(RunStore(data_dir).run_dir(run_id) / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except (OSError, RunNotFound):
        out = os.dup(null)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
