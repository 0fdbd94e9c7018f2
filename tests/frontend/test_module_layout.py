"""The browser's module graph holds together: every import names a file that exists, and every JS module under
``frontend/static/js`` is reached from a page (a ``<script type="module">`` of a template, then its imports).

No build step stands between the files and the browser, so a moved or renamed module shows up here instead of as a
404 on one page. A view page is ``<view>.html`` extending ``analysis_view.html``, whose script tag names
``/static/js/views/{{ view }}.js``: that tag stands for every template extending it (directly or through another).
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "frontend" / "static"
JS = STATIC / "js"
TEMPLATES = ROOT / "server" / "templates"

SCRIPT = re.compile(r"""<script\b[^>]*\btype=["']module["'][^>]*\bsrc=["']([^"']+)["']""")
EXTENDS = re.compile(r"""{%-?\s*extends\s+["']([^"']+)["']""")
# static imports and re-exports at the start of a statement, side-effect imports, and dynamic import("…")
FROM = re.compile(r"""^\s*(?:import|export)\b[^;'"]*?\bfrom\s*["']([^"']+)["']""", re.M)
BARE = re.compile(r"""^\s*import\s*["']([^"']+)["']""", re.M)
DYNAMIC = re.compile(r"""\bimport\(\s*["']([^"']+)["']\s*\)""")
VIEW = "{{ view }}"
ROOT_VAR = "{{ root }}"  # templates name URLs from the dashboard's root (server.pages.root_of): "/" stands for it
STATIC_VAR = "{{ static }}"  # … and static files from the versioned static folder (server.assets): "/static/" here


def specifiers(code: str) -> list[str]:
    return [m.group(1) for rx in (FROM, BARE, DYNAMIC) for m in rx.finditer(code)]


def resolve(spec: str, importer: str | None) -> str | None:
    """The module a specifier names, as a path under /static (``js/common/api.js``), or None if it names none."""
    if spec.startswith("/static/"):
        path = posixpath.normpath(spec[len("/static/"):])
    elif spec.startswith(("./", "../")) and importer is not None:
        path = posixpath.normpath(posixpath.join(posixpath.dirname(importer), spec))
    else:
        return None  # a bare name or another origin: the browser has no import map to resolve it
    return None if path.startswith("..") else path


def _from_root(src: str) -> str:
    if src.startswith(STATIC_VAR):
        return "/static/" + src[len(STATIC_VAR):]
    return src.replace(ROOT_VAR, "/", 1) if src.startswith(ROOT_VAR) else src


def template_entries(templates: dict[str, str]) -> dict[str, list[str]]:
    """Module script URLs per template; a ``{{ view }}`` URL is expanded for each template extending its own."""
    parent = {name: m.group(1) for name, html in templates.items() if (m := EXTENDS.search(html))}

    def extends(name: str, base: str) -> bool:
        seen = set()
        while name in parent and name not in seen:
            seen.add(name)
            name = parent[name]
            if name == base:
                return True
        return False

    out: dict[str, list[str]] = {}
    for name, html in templates.items():
        for src in (_from_root(s) for s in SCRIPT.findall(html)):
            if VIEW in src:
                views = [other for other in templates if extends(other, name)]
                out.setdefault(name, []).extend(src.replace(VIEW, Path(v).stem) for v in views)
            else:
                out.setdefault(name, []).append(src)
    return out


def check(modules: dict[str, str], templates: dict[str, str]) -> tuple[list[str], list[str]]:
    """(broken imports, orphan modules) of a tree: modules maps paths under /static (``js/x.js``) to their code."""
    broken: list[str] = []
    reached: set[str] = set()
    todo: list[str] = []
    for name, urls in template_entries(templates).items():
        for url in urls:
            path = resolve(url, None)
            if path not in modules:
                broken.append(f"{name}: {url}")
            else:
                todo.append(path)
    while todo:
        path = todo.pop()
        if path in reached:
            continue
        reached.add(path)
        for spec in specifiers(modules[path]):
            target = resolve(spec, path)
            if target not in modules:
                broken.append(f"{path}: {spec}")
            else:
                todo.append(target)
    orphans = sorted(set(modules) - reached)
    # an unreached module's own imports must resolve too
    for path in orphans:
        broken += [f"{path}: {spec}" for spec in specifiers(modules[path]) if resolve(spec, path) not in modules]
    return sorted(set(broken)), orphans


def real_tree() -> tuple[dict[str, str], dict[str, str]]:
    modules = {p.relative_to(STATIC).as_posix(): p.read_text() for p in JS.rglob("*.js")}
    templates = {p.name: p.read_text() for p in TEMPLATES.glob("*.html")}
    return modules, templates


def test_every_import_resolves_and_every_module_is_used():
    broken, orphans = check(*real_tree())
    assert broken == [], f"imports of files that do not exist: {broken}"
    assert orphans == [], f"modules no page reaches: {orphans}"


def test_the_tree_has_pages_and_modules():
    """Guards the check itself: it reads the real templates and reaches the real modules."""
    modules, templates = real_tree()
    entries = {url for urls in template_entries(templates).values() for url in urls}
    assert "/static/js/timeline/main.js" in entries and "/static/js/views/memory.js" in entries
    assert len(modules) > 20


# -- the checker on small inline trees ------------------------------------------------------------------------------
PAGE = {"page.html": '<script type="module" src="/static/js/app/main.js"></script>'}


def test_finds_an_orphan():
    modules = {"js/app/main.js": 'import { a } from "./a.js";\n', "js/app/a.js": "export const a = 1;\n",
               "js/app/old.js": 'import { a } from "./a.js";\n'}
    assert check(modules, PAGE) == ([], ["js/app/old.js"])


def test_finds_a_broken_import_of_every_kind():
    modules = {"js/app/main.js": ('import { a } from "./gone.js";\n'
                                  'import "/static/js/app/side.js";\n'
                                  "export { b } from '../lib/b.js';\n"
                                  'const later = () => import("./lazy.js");\n'
                                  'import { c } from "bare-package";\n')}
    broken, orphans = check(modules, PAGE)
    assert broken == ["js/app/main.js: ../lib/b.js", "js/app/main.js: ./gone.js", "js/app/main.js: ./lazy.js",
                      "js/app/main.js: /static/js/app/side.js", "js/app/main.js: bare-package"]
    assert orphans == []


def test_a_template_naming_a_missing_script_is_broken():
    assert check({}, PAGE) == (["page.html: /static/js/app/main.js"], [])


def test_imports_across_lines_and_folders_count():
    modules = {"js/app/main.js": 'import {\n  a,\n  b,\n} from "../lib/ab.js";\nexport * from "/static/js/lib/c.js";\n',
               "js/lib/ab.js": "export const a = 1, b = 2;\n", "js/lib/c.js": "export const c = 3;\n"}
    assert check(modules, PAGE) == ([], [])


def test_view_placeholder_stands_for_each_view_template():
    templates = {
        "base.html": "<html>{% block scripts %}{% endblock %}</html>",
        "analysis_view.html": '{% extends "base.html" %}<script type="module" src="/static/js/views/{{ view }}.js">',
        "memory.html": '{% extends "analysis_view.html" %}',
        "deep.html": '{% extends "memory.html" %}',
        "runs.html": '{% extends "base.html" %}',
    }
    modules = {"js/views/memory.js": "", "js/views/deep.js": "", "js/views/runs.js": ""}
    assert check(modules, templates) == ([], ["js/views/runs.js"])
