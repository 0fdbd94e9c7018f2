"""What a client may see of the server's own paths (run sources, the data dir).

A request straight from this machine — a loopback peer with no proxy forwarding headers — comes from whoever
started the server: it sees run sources and messages as they are. Anyone else sees a source as its last path
component and messages with the source and the data dir replaced, so a shared dashboard does not map out the
server's disk. Behind a reverse proxy on the same host every request arrives from loopback, which is why a
request carrying forwarding headers counts as remote.

An uploaded run's source is the client's own file name, shown as ``uploaded NAME`` wherever a path would be.
Where Python and ascendscope are installed, and the home dir of the user serving — what a traceback or a warning
in an ingest log names — are shown as ``<python>``, ``<site-packages>``, ``<ascendscope>`` and ``<home>``.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import site
import sys
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
    """``text`` with the run's source path, the data dir and the install paths replaced, for a client that is not
    local."""
    if not text or is_local(request):
        return text
    swaps = {str(data_dir): DATA_DIR_SHOWN, str(Path(data_dir).resolve()): DATA_DIR_SHOWN}
    if run.origin != "upload" and run.source:
        swaps[run.source] = source_label(request, run)
    for old in sorted(swaps, key=len, reverse=True):  # longest first: the source may lie inside the data dir
        text = text.replace(old, swaps[old])
    return install_paths().sub(lambda m: INSTALL_SHOWN[m.group(0)], text)


INSTALL_SHOWN: dict[str, str] = {}


@functools.cache
def install_paths() -> re.Pattern:
    """A pattern of this server's install paths (as given and resolved), longest first, each a whole path
    component; :data:`INSTALL_SHOWN` maps each to what a remote client sees instead."""
    from ascendscope import ingest

    named = [(p, "<site-packages>") for p in [*site.getsitepackages(), site.getusersitepackages()]]
    named += [(Path(ingest.__file__).parent.parent, "<ascendscope>")]  # the package (or the editable checkout)
    named += [(p, "<python>") for p in {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}]
    named += [(Path.home(), "<home>")]
    for path, shown in named:
        for form in {str(path), str(Path(path).resolve())}:
            if len(form) > 1:  # never "/" itself
                INSTALL_SHOWN.setdefault(form, shown)
    paths = sorted(INSTALL_SHOWN, key=len, reverse=True)
    return re.compile("|".join(f"{re.escape(p)}(?![\\w.-])" for p in paths))
