"""No page or script names an absolute path of the dashboard: behind a proxy that serves it under a prefix
(JupyterLab's jupyter-server-proxy: ``/user/me/ascendscope/``) ``/api/…`` would reach the proxy's own root.
Templates start every URL with ``{{ root }}`` (``server.pages.root_of``); scripts build them from ``ROOT`` in
``common/urls.js`` and import each other relatively."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ascendscope.server.pages import root_of

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "server" / "templates").glob("*.html"))
SCRIPTS = sorted((ROOT / "frontend" / "static").rglob("*.js"))
STYLES = sorted((ROOT / "frontend" / "static").rglob("*.css"))
ABSOLUTE_ATTR = re.compile(r"""\b(?:href|src|action|content)\s*=\s*["']/""")
ABSOLUTE_LITERAL = re.compile(r"""["'`]/(?:api|runs|static|vendor|docs|compare|favicon|openapi)\b""")
ABSOLUTE_CSS = re.compile(r"""url\(\s*["']?/""")


def _code(text: str) -> str:
    """JS without its comments (the examples in them may name paths)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_templates_name_no_absolute_path(path):
    text = path.read_text()
    assert not ABSOLUTE_ATTR.findall(text), ABSOLUTE_ATTR.findall(text)
    assert not ABSOLUTE_LITERAL.findall(text)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(ROOT / "frontend").as_posix())
def test_scripts_name_no_absolute_path(path):
    found = ABSOLUTE_LITERAL.findall(_code(path.read_text()))
    assert not found, f"{path.name}: {found} (use ROOT / runApi / runPage / appUrl from common/urls.js)"


@pytest.mark.parametrize("path", STYLES, ids=lambda p: p.name)
def test_styles_name_no_absolute_path(path):
    assert not ABSOLUTE_CSS.findall(path.read_text())


def test_the_check_catches_them():
    assert ABSOLUTE_ATTR.findall('<link href="/static/css/base.css">')
    assert ABSOLUTE_LITERAL.findall('const u = "/api/runs";') and ABSOLUTE_LITERAL.findall("`/runs/${id}`")
    assert not ABSOLUTE_LITERAL.findall('const u = `${ROOT}api/runs`;')


@pytest.mark.parametrize("path, root", [("/", "./"), ("/compare", "./"), ("/runs/x", "../"),
                                        ("/runs/x/timeline", "../../"), ("/no/such/page", "../../")])
def test_root_of(path, root):
    assert root_of(path) == root


def test_pages_carry_their_root(client, runs):
    rid = runs.ids["generated"]
    page = client.get(f"/runs/{rid}/summary").text
    assert 'data-root="../../"' in page and re.search(r'href="\.\./\.\./static/v-[0-9a-f]+/css/base\.css"', page)
    assert 'data-root="./"' in client.get("/").text
    moved = client.get(f"/runs/{rid}", follow_redirects=False)
    assert moved.status_code == 307 and moved.headers["location"] == f"{rid}/timeline"
    docs = client.get("/docs").text
    assert 'src="./docs-assets/v-' in docs and 'src="./static/v-' in docs
    assert 'url: "openapi.json"' in (ROOT / "frontend" / "static" / "js" / "apidocs" / "swagger.js").read_text()
