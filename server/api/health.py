"""``/api/health``: liveness for container health checks and load balancers (answered without a token)."""

from __future__ import annotations

import os

from fastapi import APIRouter

router = APIRouter(prefix="/api", tags=["health"])


@router.get("/health")
async def health() -> dict:
    """``{"status": "ok", "process": pid}`` while the server is up; ``process`` tells the server processes that
    share the port apart (``--workers``). Answered on the event loop: no thread, no database."""
    return {"status": "ok", "process": os.getpid()}
