"""ascendscope in JupyterLab: a ``jupyter-server-proxy`` server (the launcher's "ascendscope" tile; the dashboard
under ``<jupyter base url>/ascendscope/``), and ``Run.show`` displaying a view inline as an IFrame.

``pip install 'ascendscope[jupyter]'`` adds jupyter-server-proxy, which finds :func:`server_process` through the
``jupyter_serverproxy_servers`` entry point. Jupyter authenticates every request (its token or password) before
proxying it; the dashboard itself gets a random token of its own, which only the proxy sends (in an
``Authorization`` header added to each proxied request), so other local users cannot reach it on its port. Pages
use relative URLs only, so they work under any prefix.

The proxied server serves the data dir ``ascendscope.open`` ingests into (``$ASCENDSCOPE_DATA_DIR``, else
``~/.ascendscope``), so a run opened in a notebook is on the dashboard too.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from urllib.parse import quote, urlencode

PROXY_NAME = "ascendscope"  # the path under Jupyter's base URL, and the launcher entry's name
VIEWS = ("timeline", "summary", "operator", "memory", "communication", "advice", "cluster")
DEFAULT_WINDOW_NS = 10_000_000  # a timeline opened at start_ns alone shows this much
START_TIMEOUT_S = 60.0
ICON = Path(__file__).resolve().parent / "icon.svg"


def server_process() -> dict:
    """The ``jupyter-server-proxy`` configuration: start ``ascendscope serve`` on the port the proxy picks."""
    token = secrets.token_urlsafe(24)
    # the Python running Jupyter loaded this entry point, so it has this ascendscope (PATH may name another)
    command = [sys.executable, "-m", "ascendscope.server.cli", "serve"]
    return {
        "command": [*command, "--host", "127.0.0.1", "--port", "{port}", "--no-browser"],
        # in the environment, not on the command line where `ps` would show it
        "environment": {"ASCENDSCOPE_TOKEN": token},
        "request_headers_override": {"Authorization": f"Bearer {token}"},
        "timeout": START_TIMEOUT_S,
        "absolute_url": False,  # the dashboard sees paths without the prefix; its pages link relatively
        "new_browser_tab": False,
        "launcher_entry": {"enabled": True, "title": "ascendscope", "icon_path": str(ICON), "category": "Other"},
    }


def jupyter_base_url() -> str:
    """The Jupyter server's base URL as the notebook's page sees it (``/`` or ``/user/<name>/``):
    ``ASCENDSCOPE_JUPYTER_BASE_URL``, else JupyterHub's ``JUPYTERHUB_SERVICE_PREFIX``, else the one running Jupyter
    server's, else ``/``."""
    for var in ("ASCENDSCOPE_JUPYTER_BASE_URL", "JUPYTERHUB_SERVICE_PREFIX"):
        if os.environ.get(var):
            return _slash(os.environ[var])
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return "/"
    servers = list(list_running_servers())
    return _slash(servers[0].get("base_url") or "/") if len(servers) == 1 else "/"


def _slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def view_url(run_id: str, view: str = "timeline", *, server: str | None = None, rank: int | None = None,
             start_ns: int | None = None, end_ns: int | None = None, **params) -> str:
    """The URL of a run's view: under ``server`` (a dashboard's root URL) or the Jupyter proxy's path.
    ``start_ns``/``end_ns`` (epoch ns) open the timeline on that window (``end_ns`` defaults to 10 ms later)."""
    if view not in VIEWS:
        raise ValueError(f"no view {view!r}; choose one of {', '.join(VIEWS)}")
    root = _slash(server) if server else jupyter_base_url() + PROXY_NAME + "/"
    query = {k: v for k, v in params.items() if v is not None}
    if rank is not None:
        query["rank"] = int(rank)
    if start_ns is not None:
        query["start_ns"] = int(start_ns)
        query["end_ns"] = int(end_ns) if end_ns is not None else int(start_ns) + DEFAULT_WINDOW_NS
    elif end_ns is not None:
        raise ValueError("end_ns needs a start_ns")
    return f"{root}runs/{quote(run_id, safe='')}/{view}" + (f"?{urlencode(query)}" if query else "")


def show(run_id: str, view: str = "timeline", *, rank: int | None = None, start_ns: int | None = None,
         end_ns: int | None = None, server: str | None = None, width: str | int = "100%", height: int = 640,
         **params):
    """Display the view of run ``run_id`` in the notebook (an IPython IFrame, also returned)."""
    url = view_url(run_id, view, server=server, rank=rank, start_ns=start_ns, end_ns=end_ns, **params)
    try:
        from IPython.display import IFrame, display
    except ImportError as exc:
        raise RuntimeError(f"Run.show needs IPython (a notebook); open {url} in a browser instead") from exc
    frame = IFrame(url, width=width, height=height)
    display(frame)
    return frame
