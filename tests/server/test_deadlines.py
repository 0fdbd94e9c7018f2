"""Query deadlines (server.deadlines): one thread for all of them; a query past its deadline is interrupted and
raises QueryTimeout; a cancelled deadline never fires; a failing callback does not stop the others."""

from __future__ import annotations

import threading

import duckdb
import pytest

from ascendscope.server.db import QueryTimeout, query
from ascendscope.server.deadlines import Deadlines


def test_a_query_past_its_deadline_is_interrupted():
    con = duckdb.connect()
    with pytest.raises(QueryTimeout, match="longer than 0.2 s"):
        query(con.cursor(), "SELECT sum(i * i % 7) FROM range(100000000000) t(i)", timeout_s=0.2)
    assert query(con.cursor(), "SELECT 42", fetch="one") == (42,)  # the next query on the connection runs


def test_queries_start_no_thread_each(monkeypatch):
    con = duckdb.connect()
    query(con.cursor(), "SELECT 1")  # the deadline thread, started once
    starts, real_start = [], threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (starts.append(self.name), real_start(self))[1])
    for _ in range(20):
        query(con.cursor(), "SELECT 1")
    assert starts == []


def test_due_callbacks_fire_in_order_and_cancelled_ones_never():
    # (due times far apart: on a loaded machine this thread may stall tens of ms between two calls, which must not
    # change their order or let the cancelled one fire before cancel())
    deadlines, fired, done = Deadlines(), [], threading.Event()
    deadlines.call_later(0.9, lambda: fired.append("b"))
    cancel = deadlines.call_later(0.6, lambda: fired.append("cancelled"))
    deadlines.call_later(0.2, lambda: fired.append("a"))
    deadlines.call_later(0.6, lambda: 1 / 0)  # logged; the others still fire
    deadlines.call_later(1.2, done.set)
    cancel()
    assert done.wait(10)
    assert fired == ["a", "b"]
    assert deadlines.pending() == 0
