"""Static files and answers on the wire (server.assets, server.compression): pages name every static file and
plotly.js at a versioned URL, answered ``immutable`` and gzipped; the old unversioned URLs still answer, checked
each time (ETag, 304); every module a page runs is preloaded; JSON answers and pages above 1 KB go out gzipped,
streamed and binary answers as they are."""

from __future__ import annotations

import gzip
import re

import pytest

from ascendscope.server import assets as assets_mod
from ascendscope.server.assets import IMMUTABLE, MIN_GZIP_BYTES, AssetDir
from tests.frontend.test_module_layout import BARE, FROM, resolve

GZ = {"Accept-Encoding": "gzip"}
PLAIN = {"Accept-Encoding": "identity"}
STATIC_REF = re.compile(r"""(?:href|src)="((?:\./|(?:\.\./)+)(?:static|vendor|docs-assets)/[^"]+)\"""")
ANY_REF = re.compile(r"""(?:href|src)="((?:\./|(?:\.\./)+)[^"]*\.(?:js|css))\"""")


def raw(client, url, headers=None):
    """(response, the bytes as they came on the wire, not decoded)."""
    with client.stream("GET", url, headers=headers or {}) as r:
        return r, b"".join(r.iter_raw())


def pages(runs):
    rid = runs.ids["generated"]
    from ascendscope.server.pages import VIEW_NAMES

    return ["/", "/compare", "/docs", *(f"/runs/{rid}/{v}" for v in VIEW_NAMES)]


def absolute(page: str, ref: str) -> str:
    """The path a page's relative ``ref`` names (pages name everything from their root, ``./`` or ``../../``)."""
    depth = page.count("/") - 1
    return "/" + ref[len("../") * depth if depth else len("./"):]


def test_pages_name_every_script_and_stylesheet_at_a_versioned_url(client, runs):
    for page in pages(runs):
        html = client.get(page).text
        refs = ANY_REF.findall(html)
        assert refs, page
        for ref in refs:
            assert re.search(r"(?:static|vendor|docs-assets)/v-[0-9a-f]{12}/", ref), (page, ref)


def test_a_versioned_file_is_immutable_and_gzipped(client, runs):
    html = client.get(f"/runs/{runs.ids['generated']}/operator").text
    refs = {absolute(f"/runs/{runs.ids['generated']}/operator", r) for r in STATIC_REF.findall(html)}
    assert any(r.endswith("/plotly.min.js") for r in refs) and any(r.endswith("/base.css") for r in refs)
    for url in refs:
        r, body = raw(client, url, GZ)
        assert r.status_code == 200, url
        assert r.headers["cache-control"] == IMMUTABLE, url
        plain, plain_body = raw(client, url, PLAIN)
        assert "content-encoding" not in plain.headers, url
        if len(plain_body) < MIN_GZIP_BYTES:  # (a file smaller than a packet goes as it is)
            assert "content-encoding" not in r.headers and body == plain_body, url
            continue
        assert r.headers["content-encoding"] == "gzip" and "Accept-Encoding" in r.headers["vary"], url
        assert gzip.decompress(body) == plain_body, url
        assert plain.headers["etag"] != r.headers["etag"]  # (the two encodings are two representations)
    plotly = next(u for u in refs if u.endswith("/plotly.min.js"))
    r, body = raw(client, plotly, GZ)
    assert len(body) < 1_700_000 < 4_000_000 < len(gzip.decompress(body))  # 4.8 MB as 1.47 MB
    assert r.headers["content-type"].startswith("text/javascript")


def test_old_unversioned_urls_still_answer_and_are_checked_each_time(client):
    for url in ("/static/css/base.css", "/static/js/timeline/main.js", "/vendor/plotly.min.js"):
        r = client.get(url, headers=GZ)
        assert r.status_code == 200 and r.headers["cache-control"] == "no-cache", url
        again = client.get(url, headers={**GZ, "If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b"", url
    # a page rendered before the files changed names an older version: the current file, not kept for good
    stale = client.get("/static/v-000000000000/css/base.css")
    assert stale.status_code == 200 and stale.headers["cache-control"] == "no-cache"
    assert stale.content == client.get("/static/css/base.css").content


def test_a_range_gets_the_plain_file_and_nothing_leaves_the_folders(client):
    r = client.get("/vendor/plotly.min.js", headers={**GZ, "Range": "bytes=0-99"})
    assert r.status_code == 206 and len(r.content) == 100 and "content-encoding" not in r.headers
    for url in ("/static/v-x/../../server/app.py", "/static/%2e%2e/server/app.py", "/static/.hidden",
                "/vendor/v-x/plotly.js", "/vendor/../pyproject.toml", "/docs-assets/v-x/../core.py",
                "/static/js/", "/static/v-abc/"):
        assert client.get(url).status_code == 404, url


def test_plotly_goes_out_after_the_compile_hint_in_every_encoding_and_range(client):
    from ascendscope.server.assets import PLOTLY_PREAMBLE, plotly_dir

    file = (plotly_dir() / "plotly.min.js").read_bytes()
    whole = PLOTLY_PREAMBLE + file
    assert PLOTLY_PREAMBLE.startswith(b"//# allFunctionsCalledOnLoad") and PLOTLY_PREAMBLE.endswith(b"\n")
    plain = client.get("/vendor/plotly.min.js", headers=PLAIN)
    assert plain.status_code == 200 and plain.content == whole and plain.headers["accept-ranges"] == "bytes"
    r, body = raw(client, "/vendor/plotly.min.js", GZ)
    assert r.headers["content-encoding"] == "gzip" and gzip.decompress(body) == whole
    n = len(whole)
    for rng, status, part, content_range in (
            ("bytes=0-99", 206, whole[:100], f"bytes 0-99/{n}"),
            (f"bytes={n - 10}-", 206, whole[-10:], f"bytes {n - 10}-{n - 1}/{n}"),
            ("bytes=-5", 206, whole[-5:], f"bytes {n - 5}-{n - 1}/{n}"),
            (f"bytes=100-{n + 50}", 206, whole[100:], f"bytes 100-{n - 1}/{n}"),
            (f"bytes={n}-", 416, b"", f"bytes */{n}"),
            ("bytes=0-9,20-29", 200, whole, None)):  # several ranges: the whole file (Range may be ignored)
        got = client.get("/vendor/plotly.min.js", headers={**PLAIN, "Range": rng})
        assert got.status_code == status and got.content == part, rng
        assert got.headers.get("content-range") == content_range, rng
    head = client.head("/vendor/plotly.min.js", headers=PLAIN)
    assert head.status_code == 200 and int(head.headers["content-length"]) == n


def test_a_changed_file_changes_its_folders_version(tmp_path, monkeypatch):
    monkeypatch.setattr(assets_mod, "RECHECK_S", 0.0)
    (tmp_path / "js").mkdir()
    (tmp_path / "js" / "a.js").write_text('import { b } from "./b.js";\nexport const a = b;\n')
    (tmp_path / "js" / "b.js").write_text("export const b = 1;\n")
    folder = AssetDir(tmp_path)
    first = folder.version()
    assert folder.version() == first and folder.module_graph("js/a.js") == ["js/a.js", "js/b.js"]
    (tmp_path / "js" / "b.js").write_text("export const b = 22;\n")
    assert folder.version() != first


def test_every_module_a_page_runs_is_preloaded(client, runs):
    """The page asks for its whole module graph at once (``<link rel="modulepreload">``); found here with the module
    layout test's own reading of the static imports, not the server's (a dynamic ``import()`` loads on demand)."""
    from ascendscope.server.assets import STATIC_DIR

    for page in pages(runs):
        if page == "/docs":
            continue
        html = client.get(page).text
        preloads = {absolute(page, u) for u in re.findall(r'<link rel="modulepreload" href="([^"]+)"', html)}
        entries = [absolute(page, u) for u in re.findall(r'<script type="module" src="([^"]+)"', html)]
        assert entries, page
        version = re.search(r"/static/(v-[0-9a-f]+)/", entries[0]).group(1)
        todo = [e.split(f"/static/{version}/", 1)[1] for e in entries]
        graph = set()
        while todo:
            rel = todo.pop()
            if rel in graph:
                continue
            graph.add(rel)
            code = (STATIC_DIR / rel).read_text()
            todo += [p for rx in (FROM, BARE) for m in rx.finditer(code) if (p := resolve(m.group(1), rel))]
        assert {f"/static/{version}/{rel}" for rel in graph} <= preloads, page
        assert len(graph) >= 5, page


def test_json_answers_and_pages_go_out_gzipped_above_a_kilobyte(client, runs):
    rid = runs.ids["generated"]
    for url in (f"/api/runs/{rid}/operators", "/openapi.json", f"/runs/{rid}/timeline", f"/runs/{rid}/operator"):
        r, body = raw(client, url, GZ)
        assert r.status_code == 200, url
        assert r.headers.get("content-encoding") == "gzip", url
        assert "Accept-Encoding" in r.headers["vary"] and int(r.headers["content-length"]) == len(body)
        plain, plain_body = raw(client, url, PLAIN)
        assert "content-encoding" not in plain.headers and len(plain_body) > len(body)
        assert gzip.decompress(body) == plain_body or url.startswith("/runs/")  # (a page holds no nonce: the same)
    small, body = raw(client, "/api/health", GZ)
    assert len(body) < 1024 and "content-encoding" not in small.headers


def test_binary_streamed_and_head_answers_pass_as_they_are(client, runs):
    rid = runs.ids["generated"]
    tracks = client.get(f"/api/runs/{rid}/timeline/tracks").json()["tracks"]
    track = max((t for t in tracks if t["kind"] != "counter"), key=lambda t: t["slice_count"])
    columns, body = raw(client, f"/api/runs/{rid}/timeline/slices?track_id={track['track_id']}&start_ns=0"
                                f"&end_ns={2**62}&width_px=1600",
                        {**GZ, "Accept": "application/vnd.ascendscope.columns"})
    assert columns.status_code == 200 and columns.headers["content-type"].startswith("application/vnd.ascendscope")
    assert "content-encoding" not in columns.headers and len(body) > 1024
    export, body = raw(client, f"/api/runs/{rid}/export/timeline.json?ranks=0", GZ)
    assert export.status_code == 200 and "content-encoding" not in export.headers and len(body) > 1024


@pytest.mark.parametrize("accept", ["gzip;q=0", "br", ""])
def test_no_gzip_to_a_client_that_does_not_take_it(client, accept):
    r, body = raw(client, "/openapi.json", {"Accept-Encoding": accept})
    assert "content-encoding" not in r.headers and body.startswith(b"{")
