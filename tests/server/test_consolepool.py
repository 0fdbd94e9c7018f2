"""The SQL console's worker pool (``server.consolepool``): the queue is bounded and fair per client, waiting costs
no thread, an answer larger than the cap is never read, and the worker's address-space headroom lets a large
ORDER BY spill and answer. Over the real 2-rank sample (or its twin)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from ascendscope.server import consolepool
from ascendscope.server.consolepool import ConsoleBusy, ConsoleFailed, ConsolePool
from ascendscope.server.runs import RunStore
from tests import asyncrun

SLOW = "SELECT sum(a.range * b.range) AS s FROM range({n}) a, range({n}) b"


def job(runs, sql: str) -> dict:
    run = runs.ids["level1"]
    return {"kind": "console", "what": "json", "run_id": run, "path": str(RunStore(runs.data_dir).db_path(run)),
            "ranks": None, "max_rows": 100, "max_bytes": 10**6, "sql": sql}


def test_the_queue_is_fair_per_client_and_bounded(runs, monkeypatch):
    """One worker: client A's running query and two waiting, then B's. B is served before A's third (round robin
    by client), A's fourth is refused (its share is waiting), and so is anyone's once the queue is full; waiting
    requests hold no thread."""
    from ascendscope.server.requestclock import CancelToken, ClientGone

    monkeypatch.setattr(consolepool, "QUEUE_MAX", 3)
    pool = ConsolePool(runs.data_dir, size=1, timeout_s=120, max_loaded_ranks=64)
    done: list[str] = []

    async def one(name: str, client: str):
        await pool.run(job(runs, f"SELECT '{name}' AS who"), client=client, deadline=time.monotonic() + 120)
        done.append(name)

    async def scenario():
        await pool.ready()
        threads = threading.active_count()
        hold = CancelToken()  # A's first query runs until its client goes
        first = asyncio.create_task(pool.run(job(runs, SLOW.format(n=300000)), client="a",
                                             deadline=time.monotonic() + 120, cancel=hold))
        await asyncio.sleep(0.2)
        waiting = [asyncio.create_task(one(n, "a")) for n in ("a2", "a3")]
        await asyncio.sleep(0.1)
        with pytest.raises(ConsoleBusy, match="already have 2"):
            await pool.run(job(runs, "SELECT 1"), client="a", deadline=time.monotonic() + 60)
        waiting.append(asyncio.create_task(one("b1", "b")))
        await asyncio.sleep(0.1)
        with pytest.raises(ConsoleBusy, match="busy") as full:
            await pool.run(job(runs, "SELECT 1"), client="c", deadline=time.monotonic() + 60)
        assert full.value.retry_after_s >= 1
        assert threading.active_count() <= threads + 1  # (at most the executor's thread that started a process)
        assert not done
        hold.cancel()
        with pytest.raises(ClientGone):
            await first
        await asyncio.gather(*waiting)
        pool.close_all()

    asyncrun.run(scenario())
    assert done == ["a2", "b1", "a3"]


def test_a_wait_past_the_deadline_leaves_the_queue(runs):
    from ascendscope.server.db import QueryTimeout

    pool = ConsolePool(runs.data_dir, size=1, timeout_s=1, max_loaded_ranks=64)

    async def scenario():
        await pool.ready()
        running = asyncio.create_task(pool.run(job(runs, SLOW.format(n=300000)), client="a",
                                               deadline=time.monotonic() + 3))
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        with pytest.raises(QueryTimeout, match="no SQL console worker became free"):
            await pool.run(job(runs, "SELECT 1"), client="b", deadline=time.monotonic() + 0.5)
        waited = time.monotonic() - t0
        with pytest.raises(QueryTimeout):
            await running
        here = pool._here()
        pool.close_all()
        return waited, here.waiting, dict(here.queues)

    waited, waiting, queues = asyncrun.run(scenario())
    assert waited < 2 and waiting == 0 and not queues


def test_an_answer_larger_than_the_cap_is_never_read():
    async def scenario():
        reader = asyncio.StreamReader()
        reader.feed_data(consolepool._HEADER.pack(consolepool.MAX_ANSWER_BYTES + 1))
        with pytest.raises(ValueError, match="larger than the server takes"):
            await consolepool._frame(reader, consolepool.MAX_ANSWER_BYTES)
        return len(reader._buffer)

    assert asyncrun.run(scenario()) == 0


def test_the_headroom_lets_a_large_order_by_spill_and_answer(runs):
    """An ORDER BY over more than DuckDB's memory_limit: at an address-space limit of memory_limit alone it fails;
    with the headroom it spills to the worker's folder and answers (here at 128 MB, so that the test is small)."""
    pool = ConsolePool(runs.data_dir, size=1, timeout_s=300, max_loaded_ranks=64, memory_limit="128MB")
    sql = "SELECT range AS a, hash(range) AS b, 'name_' || (range % 1000) AS c FROM range(4000000) ORDER BY b"

    async def scenario():
        await pool.ready()
        meta, body = await pool.run(job(runs, sql), client="a", deadline=time.monotonic() + 300)
        pool.close_all()
        return json.loads(body)

    answer = asyncrun.run(scenario())
    hashes = [int(r[1]) for r in answer["rows"]]
    assert answer["row_count"] == 100 and answer["truncated_by"] == "rows" and hashes == sorted(hashes)


def test_a_worker_that_cannot_start_fails_the_waiting_requests(runs, monkeypatch):
    monkeypatch.setattr(consolepool, "MODULE", "ascendscope.no_such_module")
    pool = ConsolePool(runs.data_dir, size=1, timeout_s=60, max_loaded_ranks=64)

    async def scenario():
        t0 = time.monotonic()
        with pytest.raises(ConsoleFailed) as failed:
            await pool.run(job(runs, "SELECT 1"), client="a", deadline=time.monotonic() + 60)
        pool.close_all()
        return failed.value.code, time.monotonic() - t0

    code, took = asyncrun.run(scenario())
    assert code == "console_unavailable" and took < 30
