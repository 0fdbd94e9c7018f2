"""Static files: versioned URLs a browser keeps for good, compressed once, and the module graph a page preloads.

Three folders are served, each at two kinds of URL:

* ``static/v-<version>/<path>`` (``frontend/static``), ``vendor/v-<version>/plotly.min.js`` (plotly.js of the
  installed ``plotly`` package) and ``docs-assets/v-<version>/<file>`` (Swagger UI and ReDoc of the installed
  ``fastapi-offline`` package). ``<version>`` is a digest of every file of the folder, so a changed file changes
  every URL of its folder, and the answer is ``Cache-Control: public, max-age=31536000, immutable``: a browser
  asks again only for another version. Pages name only these (``static_url`` and friends, through
  ``server.pages``); modules import each other relatively, so a module's imports stay under its version.
* ``static/<path>`` and ``vendor/plotly.min.js``, the URLs of older pages and of anyone's bookmarks: the same file,
  ``Cache-Control: no-cache`` with an ETag, so a browser checks it each time (304 when unchanged). A version that
  is not the current one (a page rendered before the files changed) is answered the same way, with the current file.

A text file (JS, CSS, SVG, HTML, JSON) of :data:`MIN_GZIP_BYTES` or more goes out gzipped to a client that accepts
it: compressed once per process (level 9: plotly.js, 4.8 MB, becomes 1.47 MB in 0.3 CPU-s, in a worker thread, and
:func:`warm` does plotly's at start-up), kept in memory, refreshed when the file changes. A ``Range`` request gets
the plain file. plotly.js goes out after one line of its own, V8's compile hint (:data:`PLOTLY_PREAMBLE`),
kept in memory with it. The folder's files are stat'ed off the event loop, and its version is re-checked at most every
:data:`RECHECK_S` (a file edited in a checkout shows up without a restart).

:func:`module_graph` lists every module an entry module imports, directly or not (the same static imports the
browser follows), so that a page can ask for the whole graph at once (``<link rel="modulepreload">``) instead of
discovering it one level per round trip.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import os
import posixpath
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, Response
from starlette.exceptions import HTTPException

from ascendscope import frontend

STATIC_DIR = Path(frontend.__file__).resolve().parent / "static"
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
VERSION_PREFIX = "v-"
MIN_GZIP_BYTES = 1024
GZIP_LEVEL = 9
RECHECK_S = 2.0
# V8's compile hint: compile every function of plotly.js eagerly, on the streaming thread while it downloads, not
# lazily on the main thread as its start-up calls them (the first chart of a fresh browser came 0.07-0.16 s sooner
# and took 0.1-0.2 CPU-s less, bench firstview 2026-12-02; docs/benchmarks.md)
PLOTLY_PREAMBLE = b"//# allFunctionsCalledOnLoad\n"
TEXT_TYPES = {".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
              ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".html": "text/html; charset=utf-8",
              ".json": "application/json", ".map": "application/json", ".txt": "text/plain; charset=utf-8"}
# the imports a browser follows before running a module (static ones; a dynamic import() loads later, on demand)
IMPORT = re.compile(r"""^\s*(?:import|export)\b[^;'"]*?\bfrom\s*["']([^"']+)["']|^\s*import\s*["']([^"']+)["']""",
                    re.M)


@dataclass
class _File:
    path: Path
    key: tuple[int, int]  # (mtime_ns, size): a change makes a new entry
    digest: str
    preamble: bytes = b""  # served before the file's bytes (see PLOTLY_PREAMBLE)
    gz: bytes | None = None
    body: bytes | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def size(self) -> int:
        return len(self.preamble) + self.key[1]

    def plain(self) -> bytes:
        """The bytes served (the preamble, then the file), kept once made."""
        with self.lock:
            if self.body is None:
                self.body = self.preamble + self.path.read_bytes()
            return self.body

    def gzipped(self) -> bytes:
        with self.lock:  # (two first requests at once compress it once)
            if self.gz is None:
                self.gz = gzip.compress(self.preamble + self.path.read_bytes(), GZIP_LEVEL, mtime=0)
            return self.gz


class AssetDir:
    """The files of one folder (or only ``names`` of it), by path relative to it, with their digests."""

    def __init__(self, root: Path | None, names: tuple[str, ...] | None = None,
                 preambles: dict[str, bytes] | None = None):
        self.root = root.resolve() if root is not None else None
        self.names = names
        self.preambles = preambles or {}
        self._files: dict[str, _File] = {}
        self._lock = threading.Lock()
        self._version: str | None = None
        self._checked = 0.0

    def file(self, rel: str) -> _File | None:
        """The file at ``rel`` (None if there is none, or ``rel`` leaves the folder or names a hidden file)."""
        if self.root is None or (self.names is not None and rel not in self.names):
            return None
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            return None
        path = self.root.joinpath(*parts)
        try:
            st = path.stat()
        except OSError:
            return None
        if not path.is_file():
            return None
        key = (st.st_mtime_ns, st.st_size)
        known = self._files.get(rel)
        if known is not None and known.key == key:
            return known
        preamble = self.preambles.get(rel, b"")
        digest = hashlib.sha256(preamble + path.read_bytes()).hexdigest()[:16]
        with self._lock:
            entry = self._files[rel] = _File(path, key, digest, preamble)
        return entry

    def rel_paths(self) -> list[str]:
        if self.root is None:
            return []
        if self.names is not None:
            return sorted(n for n in self.names if (self.root / n).is_file())
        out = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            base = Path(folder).relative_to(self.root).as_posix()
            out += [posixpath.join(base, f) if base != "." else f for f in files
                    if not f.startswith(".") and not f.endswith((".py", ".pyc"))]
        return sorted(out)

    def version(self) -> str:
        """A digest of every file's digest: the ``v-…`` segment of this folder's URLs."""
        now = time.monotonic()
        if self._version is None or now - self._checked > RECHECK_S:
            digests = [f"{rel}:{entry.digest}" for rel in self.rel_paths() if (entry := self.file(rel)) is not None]
            self._version = hashlib.sha256("\n".join(digests).encode()).hexdigest()[:12]
            self._checked = now
        return self._version

    def module_graph(self, entry: str) -> list[str]:
        """``entry`` and every module it imports statically, directly or not, as paths relative to the folder,
        in the order found (breadth first)."""
        seen, todo, found_all = [entry], [entry], []
        while todo:
            rel = todo.pop(0)
            found = self.file(rel)
            if found is None:
                continue
            found_all.append(rel)
            for m in IMPORT.finditer(found.path.read_text(encoding="utf-8")):
                spec = m.group(1) or m.group(2)
                if not spec.startswith(("./", "../")):
                    continue
                target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), spec))
                if not target.startswith("..") and target not in seen:
                    seen.append(target)
                    todo.append(target)
        return found_all


@dataclass
class Assets:
    """The three served folders; ``app.state.assets``."""

    static: AssetDir
    vendor: AssetDir
    docs: AssetDir
    _graphs: dict = field(default_factory=dict)

    def static_url(self, rel: str) -> str:
        """``rel``'s versioned URL under ``static/``, relative to the dashboard's root."""
        return f"static/{VERSION_PREFIX}{self.static.version()}/{rel}"

    def plotly_url(self) -> str:
        return f"vendor/{VERSION_PREFIX}{self.vendor.version()}/plotly.min.js"

    def docs_url(self, rel: str) -> str:
        return f"docs-assets/{VERSION_PREFIX}{self.docs.version()}/{rel}"

    def preloads(self, entries: list[str]) -> list[str]:
        """The versioned URLs of every module the ``entries`` load (the entries' own first)."""
        version = self.static.version()
        key = (version, tuple(entries))
        if key not in self._graphs:
            urls: list[str] = []
            for entry in entries:
                urls += [u for u in map(self.static_url, self.static.module_graph(entry)) if u not in urls]
            self._graphs = {k: v for k, v in self._graphs.items() if k[0] == version}  # (an old version's go)
            self._graphs[key] = urls
        return self._graphs[key]


def plotly_dir() -> Path:
    import plotly  # only needed to locate the bundled file

    return Path(plotly.__file__).resolve().parent / "package_data"


def docs_dir() -> Path | None:
    """fastapi-offline's folder of Swagger UI and ReDoc, or None when the package is missing."""
    try:
        import fastapi_offline  # only its files are used
    except ImportError:
        return None
    return Path(fastapi_offline.__file__).resolve().parent / "static"


def split_version(path: str) -> tuple[str | None, str]:
    """``v-abc/js/x.js`` → ``("abc", "js/x.js")``; an unversioned path → ``(None, path)``."""
    head, sep, rest = path.partition("/")
    if sep and head.startswith(VERSION_PREFIX):
        return head[len(VERSION_PREFIX):], rest
    return None, path


def accepts_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        token, _, params = part.strip().partition(";")
        if token.strip().lower() in ("gzip", "*"):
            q = params.strip()
            return not (q.startswith("q=") and _q(q[2:]) == 0)
    return False


def _q(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 1.0


async def answer(folder: AssetDir, path: str, request: Request) -> Response:
    """One file of ``folder`` for ``path`` (``v-<version>/<rel>`` or ``<rel>``): immutable under the current
    version, revalidated otherwise; gzipped when it pays and the client takes it."""
    version, rel = split_version(path)
    entry, current_version = await anyio.to_thread.run_sync(lambda: (folder.file(rel), folder.version()))
    if entry is None:
        raise HTTPException(404, f"no file {path!r}")
    current = version is not None and version == current_version
    suffix = entry.path.suffix.lower()
    ctype = TEXT_TYPES.get(suffix) or mimetypes.guess_type(entry.path.name)[0] or "application/octet-stream"
    compressible = suffix in TEXT_TYPES and entry.size >= MIN_GZIP_BYTES
    headers = {"Cache-Control": IMMUTABLE if current else REVALIDATE}
    if compressible:
        headers["Vary"] = "Accept-Encoding"
    gz = compressible and "range" not in request.headers and accepts_gzip(request)
    etag = f'"{entry.digest}{"-gz" if gz else ""}"'
    headers["ETag"] = etag
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    if gz:
        body = await anyio.to_thread.run_sync(entry.gzipped)
        return Response(body, media_type=ctype, headers={**headers, "Content-Encoding": "gzip"})
    if entry.preamble:
        return await _plain_with_preamble(entry, ctype, headers, request)
    return FileResponse(entry.path, media_type=ctype, headers=headers)


_ONE_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


async def _plain_with_preamble(entry: _File, ctype: str, headers: dict, request: Request) -> Response:
    """A file served with a preamble, from memory: a single byte range is answered (206), any other range
    request gets the whole file (a server may ignore Range), an unsatisfiable one 416."""
    body = await anyio.to_thread.run_sync(entry.plain)
    headers = {**headers, "Accept-Ranges": "bytes"}
    m = _ONE_RANGE.match(request.headers.get("range", "").replace(" ", ""))
    if m is None or m.groups() == ("", ""):
        return Response(body, media_type=ctype, headers=headers)
    n = len(body)
    first, last = m.groups()
    if first:
        start, end = int(first), min(int(last), n - 1) if last else n - 1
    else:  # the last N bytes
        start, end = max(n - int(last), 0), n - 1
    if start >= n or start > end:
        return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{n}"})
    return Response(body[start:end + 1], status_code=206, media_type=ctype,
                    headers={**headers, "Content-Range": f"bytes {start}-{end}/{n}"})


def install(app: FastAPI) -> Assets:
    """Serves the three folders on ``app`` (``app.state.assets``)."""
    assets = Assets(static=AssetDir(STATIC_DIR),
                    vendor=AssetDir(plotly_dir(), ("plotly.min.js",), {"plotly.min.js": PLOTLY_PREAMBLE}),
                    docs=AssetDir(docs_dir()))
    app.state.assets = assets
    router = APIRouter(include_in_schema=False)

    @router.api_route("/static/{path:path}", methods=["GET", "HEAD"])
    async def static_file(request: Request, path: str) -> Response:
        return await answer(assets.static, path, request)

    @router.api_route("/vendor/{path:path}", methods=["GET", "HEAD"])
    async def vendor_file(request: Request, path: str) -> Response:
        return await answer(assets.vendor, path, request)

    @router.api_route("/docs-assets/{path:path}", methods=["GET", "HEAD"])
    async def docs_file(request: Request, path: str) -> Response:
        return await answer(assets.docs, path, request)

    app.include_router(router)
    return assets


def warm(assets: Assets) -> None:
    """Compresses plotly.js ahead of the first page that loads it (in a daemon thread: start-up does not wait)."""
    def run():
        entry = assets.vendor.file("plotly.min.js")
        if entry is not None:
            entry.gzipped()
        assets.static.version()

    threading.Thread(target=run, name="assets-warm", daemon=True).start()
