"""`asyncio.run` for tests that may share a process with the browser tests.

Playwright's sync API keeps its event loop marked as running in the main thread for the whole session, so a plain
`asyncio.run` there fails ("cannot be called from a running event loop") whenever a browser test ran first on the
same xdist worker. A thread of its own has no running loop.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor


def run(coro):
    """Run `coro` to its end on a new event loop in a thread of its own; its answer or its exception."""
    with ThreadPoolExecutor(1, thread_name_prefix="asyncrun") as pool:
        return pool.submit(asyncio.run, coro).result()
