"""The API reference: ``/docs`` (Swagger UI over ``/openapi.json``), from this server alone; ``/redoc`` leads there.

Clusters are often offline, so the page loads nothing from another host: Swagger UI's files come from the installed
``fastapi-offline`` package (``server.assets``, at versioned URLs), Swagger UI is started by a module of ours
(``frontend/static/js/apidocs/swagger.js``: no inline script, no schema validator badge from validator.swagger.io)
and the favicon is the dashboard's own. It runs under the dashboard's policy with inline styles allowed (Swagger UI
sets style attributes), as the chart pages do. ReDoc, which the same package ships, always asks cdn.redoc.ly for
its logo, so ``/redoc`` (FastAPI's other reference page, which people try) redirects to ``/docs`` instead.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from ascendscope.server import pages
from ascendscope.server.security import CSP_WITH_PLOTLY

router = APIRouter(include_in_schema=False)


@router.get("/docs", response_class=HTMLResponse)
def api_page(request: Request):
    if request.app.state.assets.docs.root is None:  # (an install without fastapi-offline: say so, do not go out)
        return HTMLResponse(pages.error_page(request, 404, "the API reference needs the fastapi-offline package "
                                                           "(pip install fastapi-offline); the schema itself is at "
                                                           "openapi.json"), status_code=404)
    ctx = {"root": pages.root_of(request.scope["path"])}
    return pages.templates.TemplateResponse(request, "api_docs.html", ctx,
                                            headers={"Content-Security-Policy": CSP_WITH_PLOTLY})


@router.get("/redoc")
def redoc_page():
    return RedirectResponse("docs", status_code=307)  # (relative: stays under a proxy's prefix)
