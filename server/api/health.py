"""``/api/health``: liveness for container health checks and load balancers (answered without a token)."""

from __future__ import annotations

import os

from fastapi import APIRouter

from ascendscope.server import queryprocs

router = APIRouter(prefix="/api", tags=["health"])


@router.get("/health")
async def health() -> dict:
    """``{"status": "ok", "process": pid}`` while the server is up; ``process`` tells the server processes that
    share the port apart (``--workers``). With query processes (``serve``), ``query_processes`` says how many of
    this server process's are ready (``{"ready": n, "wanted": m}``): until they all are, viewport requests are
    answered on its threads too. Answered on the event loop: no thread, no database."""
    out = {"status": "ok", "process": os.getpid()}
    qp = queryprocs.status()
    if qp is not None:
        out["query_processes"] = qp
    return out
