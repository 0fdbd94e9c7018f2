"""HTML pages: the runs list, one page per run view (``/runs/{id}/{view}``) and the Compare page (``/compare``).

Pages name every URL relative to the dashboard's root (``root``: ``../../`` on a run's view), never as an absolute
path, so a proxy may serve the dashboard under a prefix of its own (JupyterLab: ``ascendscope.jupyter``).

A view page is the template ``server/templates/<view>.html`` extending ``base.html`` (which carries the run tabs
and the rank selector); adding a view's page means adding its template. A view whose template does not exist yet
renders a placeholder, so the tabs never lead to a 404.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from jinja2 import TemplateNotFound

from ascendscope.server.api.answers import ApiError
from ascendscope.server.db import DamagedDatabase
from ascendscope.server.redact import public_run
from ascendscope.server.runs import RunNotFound
from ascendscope.server.schema_check import OutdatedDatabase, mark_outdated
from ascendscope.server.security import CSP_WITH_PLOTLY

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


def asset_urls(request: Request) -> dict:
    """What every template names its static files with (``server.assets``): ``static`` (the versioned
    ``static/`` folder, from the page's root), ``plotly_js`` and ``docs_asset(file)``."""
    assets = request.app.state.assets
    root = root_of(request.scope["path"])
    return {"static": root + assets.static_url(""), "plotly_js": root + assets.plotly_url(),
            "docs_asset": assets.docs_url}


templates = Jinja2Templates(directory=str(TEMPLATE_DIR), context_processors=[asset_urls])

# (path segment, tab label), in tab order
VIEWS = (
    ("timeline", "Timeline"),
    ("operator", "Operator"),
    ("memory", "Memory"),
    ("summary", "Summary"),
    ("communication", "Communication"),
    ("advice", "Advice"),
    ("cluster", "Cluster"),
    ("phases", "Phases"),
    ("serving", "Serving"),
    ("query", "SQL"),
)
VIEW_NAMES = tuple(v for v, _ in VIEWS)
# the module each page starts (its template's <script type="module">), by page; a view not named is views/<view>.js
PAGE_MODULES = {"runs": "js/runs/runs.js", "timeline": "js/timeline/main.js", "compare": "js/views/compare.js"}
# their templates load /vendor/plotly.min.js
PLOTLY_VIEWS = ("operator", "memory", "summary", "communication", "cluster", "phases", "serving", "query")

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request):
    return templates.TemplateResponse(request, "runs.html", _context(request, None, "runs"))


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request):
    """Two runs (or two ranks / steps) side by side; the sides are picked on the page (``?a=&b=&rank_a=…``)."""
    return templates.TemplateResponse(request, "compare.html", _context(request, None, "compare"),
                                      headers={"Content-Security-Policy": CSP_WITH_PLOTLY})


@router.get("/runs/{run_id}")
def run_page(run_id: str):
    # relative, so that it stays under the prefix of a proxy in front of us (/runs/x -> /runs/x/timeline)
    return RedirectResponse(f"{quote(run_id, safe='')}/timeline", status_code=307)


@router.get("/runs/{run_id}/{view}", response_class=HTMLResponse)
def view_page(request: Request, run_id: str, view: str):
    if view not in VIEW_NAMES:
        raise ApiError(404, "view_not_found", f"no view {view!r}; views are {', '.join(VIEW_NAMES)}")
    try:
        run = request.app.state.store.get(run_id)
    except RunNotFound:
        raise ApiError(404, "run_not_found", f"no run with id {run_id!r}") from None
    ctx = _context(request, run, view)
    headers = {"Content-Security-Policy": CSP_WITH_PLOTLY} if view in PLOTLY_VIEWS else None
    try:
        return templates.TemplateResponse(request, f"{view}.html", ctx, headers=headers)
    except TemplateNotFound:
        ctx["placeholder"] = f"The {dict(VIEWS)[view]} view is not available yet."
        return templates.TemplateResponse(request, "base.html", ctx)


def root_of(path: str) -> str:
    """The relative way from a page at ``path`` back to the dashboard's root: ``/`` → ``./``,
    ``/runs/x/timeline`` → ``../../``. Every URL a page names starts with it, so the pages work unchanged under
    a proxy's prefix (``/user/me/ascendscope/runs/x/timeline``)."""
    return "../" * (path.count("/") - 1) or "./"


def _context(request: Request, run, view: str) -> dict:
    ranks: list[int] = []
    ingest = None  # a run served while it ingests: its ranks by state
    store = request.app.state.store
    servable = run is not None and store.servable(run)
    if servable:
        databases = request.app.state.databases
        try:
            info = databases.info(run.id, store.db_path(run.id))
            ranks = info.ranks
            if run.status != "ready":
                ingest = {"pending": info.pending_ranks, "failed": info.failed_ranks,
                          "partial": sorted(info.partial)}  # (pending ranks shown from their overview)
                asked = _rank_param(request)
                if asked is not None and asked in info.pending_ranks:  # the rank the user opened loads next
                    store.want_ranks(run.id, [asked])
        except (DamagedDatabase, FileNotFoundError) as exc:  # the page says the run failed, and why
            try:
                reason = str(exc) if isinstance(exc, DamagedDatabase) else "the file is missing"
                run = store.mark_damaged(run.id, reason)
            except RunNotFound:
                pass
        except OutdatedDatabase as exc:
            try:
                run = mark_outdated(store, run, str(exc))
            except RunNotFound:
                pass
        except Exception:  # noqa: BLE001 - a broken database still gets a page; the API reports the error
            ranks = []
        servable = store.servable(run)  # (the run may have been marked failed just now)
    run_json = None
    if run is not None:
        run = public_run(request, run, request.app.state.store.data_dir)
        run_json = {k: v for k, v in run.to_json().items() if k not in ("summary", "source_fingerprint", "worker_pid")}
        run_json["warning_count"] = (run.summary or {}).get("warning_count") or 0
    settings = request.app.state.settings
    warning_count = run_json["warning_count"] if run_json and run.status == "ready" else 0
    page = {"view": view, "run_id": run.id if run else None, "run": run_json, "ranks": ranks,
            "read_only": settings.read_only, "max_upload_bytes": settings.max_upload_mb * 1_000_000,
            "ingest": ingest}
    return {
        "root": root_of(request.scope["path"]),
        "view": view,
        "views": VIEWS,
        "run": run,
        "servable": servable,
        "run_id": run.id if run else None,
        "ranks": ranks,
        "all_ranks_option": view in ("timeline", "communication"),  # views that can show every rank at once
        "page_json": json.dumps(page).replace("</", "<\\/"),
        "placeholder": None,
        "read_only": settings.read_only,
        "warning_count": warning_count,
        "module_preloads": _preloads(request, view, run, servable, warning_count),
    }


def _preloads(request: Request, view: str, run, servable: bool, warning_count: int) -> list[str]:
    """The URLs of every module the page runs (base.html's, then the view's), for ``<link rel="modulepreload">``:
    the browser then asks for the whole graph at once instead of one level of imports per round trip."""
    entries = ["js/common/nav.js"]
    if warning_count:
        entries.append("js/common/warnings.js")
    if servable and run.status != "ready":
        entries.append("js/common/ingest.js")
    if view in ("runs", "compare") or servable:
        entries.append(PAGE_MODULES.get(view, f"js/views/{view}.js"))
    root = root_of(request.scope["path"])
    return [root + url for url in request.app.state.assets.preloads(entries)]


def _rank_param(request: Request) -> int | None:
    try:
        return int(request.query_params.get("rank", ""))
    except ValueError:
        return None


def error_page(request: Request, status: int, message: str) -> str:
    ctx = {"request": request, "root": root_of(request.scope["path"]), "view": "error", "views": VIEWS, "run": None,
           "servable": False, "run_id": None, "ranks": [],
           "page_json": "{}", "placeholder": None, "error_status": status, "error_message": message,
           **asset_urls(request)}
    return templates.get_template("base.html").render(ctx)
