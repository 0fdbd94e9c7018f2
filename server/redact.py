"""What a client may see of the server's own paths (run sources, the data dir).

A request straight from this machine — a loopback peer with no proxy forwarding headers — comes from whoever
started the server: it sees run sources and messages as they are. Anyone else sees a source as its last path
component and messages with the source and the data dir replaced, so a shared dashboard does not map out the
server's disk. Behind a reverse proxy on the same host every request arrives from loopback, which is why a
request carrying forwarding headers counts as remote.

An uploaded run's source is the client's own file name, shown as ``uploaded NAME`` wherever a path would be.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from pathlib import Path, PurePath

FORWARDING_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
DATA_DIR_SHOWN = "<data dir>"


def is_local(request) -> bool:
    client = request.client
    if client is None or any(h in request.headers for h in FORWARDING_HEADERS):
        return False
    try:
        return ipaddress.ip_address(client.host).is_loopback
    except ValueError:  # not an IP address: an in-process client, treated like a remote one
        return False


def source_label(request, run, path: str | None = None) -> str | None:
    """Where ``run`` came from as this client may see it; ``path`` is the source as the database recorded it."""
    if run.origin == "upload":
        return f"uploaded {run.source}"
    path = path or run.source
    return path if path is None or is_local(request) else (PurePath(path).name or path)


def public_run(request, run, data_dir: Path):
    """``run`` with its source and error text as this client may see them (the record itself is unchanged)."""
    if is_local(request):
        return run
    source = run.source if run.origin == "upload" else source_label(request, run)
    return replace(run, source=source, error=scrub(run.error, request, run, data_dir))


def scrub(text: str | None, request, run, data_dir: Path) -> str | None:
    """``text`` with the run's source path and the data dir replaced, for a client that is not local."""
    if not text or is_local(request):
        return text
    swaps = {str(data_dir): DATA_DIR_SHOWN, str(Path(data_dir).resolve()): DATA_DIR_SHOWN}
    if run.origin != "upload" and run.source:
        swaps[run.source] = source_label(request, run)
    for old in sorted(swaps, key=len, reverse=True):  # longest first: the source may lie inside the data dir
        text = text.replace(old, swaps[old])
    return text
