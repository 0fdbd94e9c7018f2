"""A query process (``server.queryprocs``): the app over the server's settings, answering the viewport requests
its server process hands it, one after another, until their socket closes.

    python -m ascendscope.server.queryserver FD     # FD: its end of a socket pair; the server's settings come first
"""

from __future__ import annotations

import pickle
import queue
import signal
import sys
import threading
from multiprocessing.connection import Connection

from starlette.requests import Request

from ascendscope.server.app import create_app
from ascendscope.server.fastlane import respond
from ascendscope.server.queryprocs import GONE
from ascendscope.server.requestclock import CancelToken, ClientGone


def serve(conn, settings) -> None:
    """Answer each request of ``conn`` (``multiprocessing.Connection``): ``(seq, (run_id, kind, args, path,
    query string, headers, arrival))`` in, ``(seq, (status, raw headers, body) or None or GONE)`` out; None lets
    the router answer it (it then explains any error as it always does). ``(seq, None)`` in says that request's
    client went away: its query is interrupted (or never started) and it is answered GONE. The app is built
    before the first answer, an empty message saying it is ready.

    A thread reads the socket, so that a cancellation reaches a request while it runs; the requests themselves
    are answered one at a time on the main thread."""
    app = create_app(settings)
    try:
        conn.send_bytes(b"")
    except OSError:  # (its server process has gone meanwhile)
        return
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    tokens: dict[int, CancelToken] = {}  # the requests received and not yet answered
    lock = threading.Lock()

    def read() -> None:
        while True:
            try:
                seq, message = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):  # its server process has gone: nobody will read what runs now
                with lock:
                    running = list(tokens.values())
                for token in running:
                    token.cancel()
                inbox.put(None)
                return
            with lock:
                if message is not None:
                    tokens[seq] = CancelToken()
                token = tokens.get(seq)
            if message is None:
                if token is not None:  # (else answered already)
                    token.cancel()
            else:
                inbox.put((seq, message, token))

    threading.Thread(target=read, name="ascendscope-query-inbox", daemon=True).start()
    while (item := inbox.get()) is not None:
        seq, (run_id, kind, args, path, query_string, headers, arrived), token = item
        # the request as the server process got it; its deadline counts from its arrival there
        scope = {"type": "http", "method": "GET", "path": path, "query_string": query_string, "headers": headers,
                 "app": app, "path_params": {"run_id": run_id}, "state": {"arrived": arrived, "cancel": token}}
        try:
            response = respond(Request(scope), run_id, kind, args)
            answer = (response.status_code, response.raw_headers, response.body)
        except ClientGone:
            answer = GONE
        except Exception:  # noqa: BLE001 - the router answers it, and explains any error as it always does
            answer = None
        with lock:
            tokens.pop(seq, None)
        try:
            conn.send_bytes(pickle.dumps((seq, answer), protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            return


def main(argv: list[str]) -> None:
    # it runs in a session of its own (no Ctrl+C from the terminal); its server process stops it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[0]))
    try:
        settings = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        return
    serve(conn, settings)


if __name__ == "__main__":
    main(sys.argv[1:])
