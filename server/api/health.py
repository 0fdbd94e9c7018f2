"""``/api/health``: liveness for container health checks and load balancers (answered without a token)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api", tags=["health"])


@router.get("/health")
def health() -> dict:
    """``{"status": "ok"}`` while the server is up."""
    return {"status": "ok"}
