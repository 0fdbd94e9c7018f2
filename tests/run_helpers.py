"""Helpers of the tests that follow runs as they ingest: waiting for a condition, and pinning a sharded run
half-way (its manifest saying some shards are still pending)."""

from __future__ import annotations

import json
import time
from pathlib import Path


def wait(fn, timeout_s: float = 60.0, every_s: float = 0.02):
    """The first truthy value of ``fn()``, polled every ``every_s``; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s")


def pin(run_dir: Path, pending: list[int]) -> None:
    """The run's manifest as it is while the shards holding ``pending`` are still being written."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for e in manifest["shards"]:
        e["status"] = "pending" if set(e["ranks"]) & set(pending) else "ready"
    manifest["status"] = "ingesting" if pending else "complete"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
