"""The web server's processes: the app served by one or several of them (``ascendscope serve --workers N``).

One process is GIL-bound near 130–140 timeline requests/s whatever the cores (docs/benchmarks.md), so the
dashboard is served by ``workers`` processes that share the listening socket (uvicorn's
supervisor binds it, starts the processes and replaces one that dies). Each process builds its own app with
:func:`app_from_env` from the ``ASCENDSCOPE_*`` variables, the one channel every setting already has; its own
read-only DuckDB connections and its own answer cache, both keyed on the identity of the files they come from.
Ingestion is one queue for all of them (:mod:`server.coordinator`). With ``workers == 1`` the app runs in this
process, as before.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

from ascendscope.server import tls
from ascendscope.server.settings import SETTINGS, Settings, worker_count

APP_FACTORY = "ascendscope.server.webworkers:app_from_env"
READY_POLL_S = 0.1
SUPERVISOR_ENV = "ASCENDSCOPE_SUPERVISOR_PID"  # set for worker processes: the supervisor they die with
ORPHAN_POLL_S = 0.25


def settings_env(settings: Settings) -> dict[str, str]:
    """The ``ASCENDSCOPE_*`` variables that give ``settings`` back through ``Settings.from_env``."""
    env = {}
    for s in SETTINGS:
        value = getattr(settings, s.name)
        if isinstance(value, bool):
            env[s.env] = "1" if value else "0"
        else:
            env[s.env] = "" if value is None else str(value)
    return env


def app_from_env():
    """The app of one server process: settings from the environment, the ingest coordinator started and stopped
    with the app (uvicorn calls this in each worker process)."""
    from ascendscope.server.app import create_app
    from ascendscope.server.coordinator import IngestCoordinator
    from ascendscope.server.runs import RunStore

    settings = Settings.from_env()
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if supervisor:
        _exit_with(int(supervisor))
    store = RunStore(settings.data_dir)
    coordinator = IngestCoordinator(store, workers=settings.ingest_workers, retries=settings.ingest_retries)
    return create_app(settings, store=store, ingest_queue=coordinator, own_ingest=True, query_processes=True)


def run(settings: Settings, log_level: str, on_listening: Callable[[int], None]) -> bool:
    """Serve until stopped (Ctrl+C, SIGTERM); ``on_listening(port)`` is called once requests are answered.
    False if the server could not start."""
    import uvicorn

    workers = worker_count(settings)
    os.environ.update(settings_env(settings))  # what each worker process reads (they inherit the environment)
    config = uvicorn.Config(APP_FACTORY, factory=True, host=settings.host, port=settings.port, workers=workers,
                            log_level=log_level, access_log=log_level == "debug", **tls.uvicorn_options(settings))
    if workers == 1:
        server = _server_class()(config)

        def announce() -> None:
            while not server.started and not server.should_exit:
                time.sleep(READY_POLL_S / 2)
            if server.started:
                on_listening(_bound_port(server) or settings.port)

        threading.Thread(target=announce, name="ascendscope-announce", daemon=True).start()
        server.run()
        if server.interrupted:  # (uvicorn raises the Ctrl+C again once it has shut down, but not always: we do)
            raise KeyboardInterrupt
        return server.started

    os.environ[SUPERVISOR_ENV] = str(os.getpid())
    sock = config.bind_socket()
    port = sock.getsockname()[1]
    supervisor = _supervisor_class()(config, sockets=[sock])
    stop_watch = threading.Event()
    threading.Thread(target=_announce_when_ready,
                     args=(_local(settings.host), port, settings, on_listening, stop_watch),
                     name="ascendscope-announce", daemon=True).start()
    try:
        supervisor.run()
    finally:
        stop_watch.set()
        sock.close()
    if supervisor.interrupted:  # Ctrl+C: the CLI says "stopped" and exits 130, as with one process
        raise KeyboardInterrupt
    return True


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, remembering whether it stopped on Ctrl+C. It raises the signal again once it has shut
        down, for the CLI to say "stopped" and exit 130; a full test run once saw it exit 0 instead, with no
        cause found, so the CLI does not depend on that."""

        interrupted = False

        def handle_exit(self, sig: int, frame) -> None:
            if sig == signal.SIGINT:
                self.interrupted = True
            super().handle_exit(sig, frame)

    return Server


def _supervisor_class():
    from uvicorn.supervisors import Multiprocess

    class Supervisor(Multiprocess):
        """uvicorn's supervisor, remembering whether it stopped on Ctrl+C."""

        interrupted = False

        def handle_int(self) -> None:
            self.interrupted = True
            super().handle_int()

    return Supervisor


def _exit_with(supervisor_pid: int) -> None:
    """A worker process stops (as on SIGTERM: its ingest worker is stopped and its run queued again) once its
    supervisor is gone, even SIGKILLed: otherwise it would keep the port, the ingest queue's lead and its ingest
    worker from the server started next."""

    def watch() -> None:
        while os.getppid() == supervisor_pid:
            time.sleep(ORPHAN_POLL_S)
        from ascendscope.server import coordinator

        coordinator.leaving()  # (before its shutdown begins: no lead taken while it lasts)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="ascendscope-orphan-watch", daemon=True).start()


def _local(host: str) -> str:
    """The address to reach a server listening on ``host`` from this machine."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def _announce_when_ready(host: str, port: int, settings: Settings, on_listening: Callable[[int], None],
                         stop: threading.Event) -> None:
    """Waits until a worker answers on the shared socket (``/api/health`` needs no token; ``server.tls.probe``),
    then announces."""
    while not stop.is_set():
        if tls.probe(host, port, settings):
            on_listening(port)
            return
        stop.wait(READY_POLL_S)


def _bound_port(server) -> int | None:
    for srv in getattr(server, "servers", []) or []:
        for sock in getattr(srv, "sockets", []) or []:
            return sock.getsockname()[1]
    return None
