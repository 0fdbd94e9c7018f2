"""A query process (``server.queryprocs``): the app over the server's settings, answering the viewport requests
its server process hands it, one after another, until their socket closes."""

from __future__ import annotations

import pickle

from starlette.requests import Request

from ascendscope.server.app import create_app
from ascendscope.server.fastlane import respond
from ascendscope.server.requestclock import ClientGone


def serve(conn, settings) -> None:
    """Answer each request of ``conn`` (``multiprocessing.Connection``): ``(seq, (run_id, kind, args, path,
    query string, headers, arrival))`` in, ``(seq, (status, raw headers, body) or None)`` out; None lets the
    router answer it (it then explains any error as it always does)."""
    app = create_app(settings)
    while True:
        try:
            seq, (run_id, kind, args, path, query_string, headers, arrived) = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        # the request as the server process got it; its deadline counts from its arrival there
        scope = {"type": "http", "method": "GET", "path": path, "query_string": query_string, "headers": headers,
                 "app": app, "path_params": {"run_id": run_id}, "state": {"arrived": arrived}}
        try:
            response = respond(Request(scope), run_id, kind, args)
            answer = (response.status_code, response.raw_headers, response.body)
        except ClientGone:
            answer = None
        except Exception:  # noqa: BLE001 - the router answers it, and explains any error as it always does
            answer = None
        try:
            conn.send_bytes(pickle.dumps((seq, answer), protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            return
