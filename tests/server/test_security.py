"""Sharing safely: security headers on every response, a CSP the pages actually run under (no inline script, no
eval), read-only mode (403, nothing written), token mode (401, bearer, the ?token= cookie flow), no cross-site
writes, strict run ids, and settings from the environment with flags on top."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.archives import zip_folder
from tests.conftest import PYTORCH_TEXT, needs_samples

pytestmark = needs_samples
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token-for-tests"


def make_client(data_dir: Path, **settings) -> TestClient:
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    return TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data_dir), **settings)),
                      follow_redirects=False)


@pytest.fixture(scope="module")
def read_only(runs):
    with make_client(runs.data_dir, read_only=True) as c:
        yield c


@pytest.fixture(scope="module")
def with_token(runs):
    with make_client(runs.data_dir, token=TOKEN) as c:
        yield c


def files_of(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


# -- headers and the content security policy -----------------------------------------------------------------------
def test_security_headers_on_every_response(client, runs):
    level1 = runs.ids["level1"]
    for path in ("/", f"/runs/{level1}/timeline", f"/runs/{level1}/summary", "/api/runs", "/api/health",
                 "/static/css/base.css", "/api/runs/no-such-run", "/no/such/page", "/docs", "/openapi.json"):
        resp = client.get(path)
        headers = resp.headers
        csp = headers["content-security-policy"]
        script_src = re.search(r"script-src ([^;]*)", csp).group(1)
        assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in csp, (path, csp)
        assert "frame-ancestors 'self'" in csp and "object-src 'none'" in csp, path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["referrer-policy"] == "no-referrer", path
        assert headers["x-frame-options"] == "SAMEORIGIN", path
    assert "style-src 'self';" in client.get("/").headers["content-security-policy"]  # no plotly, no inline style


def test_templates_and_scripts_need_no_inline_code():
    for template in (ROOT / "server" / "templates").glob("*.html"):
        html = template.read_text()
        for attrs in re.findall(r"<script([^>]*)>", html):
            assert "src=" in attrs or 'type="application/json"' in attrs, (template.name, attrs)
        assert not re.search(r"\son[a-z]+\s*=", html), template.name  # inline handlers
        assert not re.search(r"\sstyle\s*=", html) and "<style" not in html, template.name
        assert "javascript:" not in html, template.name
    for script in (ROOT / "frontend" / "static" / "js").rglob("*.js"):
        code = script.read_text()
        assert not re.search(r"\beval\(|new Function\(|setAttribute\(\s*[\"']style", code), script.name


@pytest.mark.browser
def test_every_page_runs_under_the_policy(live_server, page):
    """A CSP violation is a console error, which fails ``page`` at teardown."""
    run = live_server.runs["level1"]
    page.goto(f"{live_server.base_url}/")
    page.locator(f"#runs-body tr[data-run-id='{run}']").wait_for()
    page.goto(f"{live_server.base_url}/runs/{run}/timeline")
    page.locator("#timeline canvas").first.wait_for()
    for view in ("operator", "memory", "summary", "communication"):
        page.goto(f"{live_server.base_url}/runs/{run}/{view}")
        page.locator(".js-plotly-plot").first.wait_for()


# -- read-only -----------------------------------------------------------------------------------------------------
def test_read_only_refuses_changes_and_writes_nothing(read_only, runs):
    level1 = runs.ids["level1"]
    before = files_of(runs.data_dir)
    upload = read_only.post("/api/runs", files={"file": ("level1.zip", zip_folder(PYTORCH_TEXT / "level1"))})
    rename = read_only.patch(f"/api/runs/{level1}", json={"name": "x"})
    delete = read_only.delete(f"/api/runs/{level1}")
    for resp in (upload, rename, delete):
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "read_only"
    assert files_of(runs.data_dir) == before
    assert read_only.get(f"/api/runs/{level1}").json()["status"] == "ready"
    page = read_only.get("/").text
    assert 'id="read-only-badge"' in page and 'id="dropzone"' not in page and 'id="upload-input"' not in page


# -- token -----------------------------------------------------------------------------------------------------------
def test_token_is_required_everywhere_but_health(with_token, runs):
    level1 = runs.ids["level1"]
    for path in ("/", "/api/runs", f"/api/runs/{level1}", f"/runs/{level1}/timeline", "/static/css/base.css",
                 "/openapi.json", "/docs"):
        resp = with_token.get(path)
        assert resp.status_code == 401, path
        assert resp.headers["www-authenticate"].startswith("Bearer")
    assert with_token.get("/api/runs").json()["error"]["code"] == "token_required"
    assert with_token.get("/", headers={"accept": "text/html"}).headers["content-type"].startswith("text/html")
    assert with_token.get("/api/health").json()["status"] == "ok"
    assert with_token.get("/api/runs", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert with_token.get("/api/runs", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert with_token.post("/api/runs", headers={"authorization": "Bearer wrong"}).status_code == 401


def test_token_link_sets_a_cookie_and_drops_the_token_from_the_url(runs):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    app = create_app(Settings.from_env(environ={}, data_dir=str(runs.data_dir), token=TOKEN))
    level1 = runs.ids["level1"]
    with TestClient(app, follow_redirects=False) as browser:
        bad = browser.get(f"/runs/{level1}/summary?token=nope")
        assert bad.status_code == 401 and "set-cookie" not in bad.headers
        visit = browser.get(f"/runs/{level1}/summary?rank=1&token={TOKEN}")
        assert visit.status_code == 303 and visit.headers["location"] == "./summary?rank=1"  # relative: proxies
        cookie = visit.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and TOKEN not in cookie
        assert browser.get(f"/runs/{level1}/summary?rank=1").status_code == 200  # the client kept the cookie
        assert browser.get("/api/runs").status_code == 200
    with TestClient(app, follow_redirects=False) as stranger:
        stranger.cookies.set(cookie.split("=", 1)[0], "forged")
        assert stranger.get("/api/runs").status_code == 401


# -- host names (DNS rebinding) ---------------------------------------------------------------------------------------
def host_status(client, host: str, path: str = "/api/runs") -> int:
    return client.get(path, headers={"host": host}).status_code


def test_foreign_host_names_are_refused_without_a_token(client, runs):
    """A rebinding page reaches 127.0.0.1 under the attacker's name: the Host header gives it away."""
    for path in ("/api/runs", f"/api/runs/{runs.ids['level1']}", "/", "/static/css/base.css", "/openapi.json"):
        resp = client.get(path, headers={"host": "evil.example"})
        assert resp.status_code == 400, path
    resp = client.get("/api/runs", headers={"host": "evil.example:8000"})
    err = resp.json()["error"]
    assert err["code"] == "host_not_allowed" and "--allowed-hosts evil.example" in err["message"]
    assert "content-security-policy" in resp.headers
    page = client.get("/", headers={"host": "evil.example", "accept": "text/html"})
    assert page.status_code == 400 and page.headers["content-type"].startswith("text/html")
    assert client.patch(f"/api/runs/{runs.ids['level1']}", json={"name": "x"},
                        headers={"host": "evil.example"}).status_code == 400
    for host in ("localhost", "localhost:8000", "LOCALHOST.", "127.0.0.1:8000", "[::1]:8000", "127.0.0.2",
                 "app.localhost:8000", "testserver"):  # the last: the address this client connected to
        assert host_status(client, host) == 200, host
    for host in ("192.168.1.5:8000", "localhost.evil.example", "127.0.0.1.evil.example", "[::2]"):
        assert host_status(client, host) == 400, host
    assert host_status(client, "evil.example", "/api/health") == 200  # probes use names of their own


def test_allowed_hosts_and_a_token_let_other_names_in(runs):
    with make_client(runs.data_dir, allowed_hosts="dash.example, Other.Example:8000") as c:
        for host in ("dash.example", "dash.example:8000", "other.example", "localhost"):
            assert host_status(c, host) == 200, host
        assert host_status(c, "evil.example") == 400
    with make_client(runs.data_dir, allowed_hosts="*") as c:
        assert host_status(c, "evil.example") == 200
    with make_client(runs.data_dir, token=TOKEN) as c:  # a rebinding page has no token: the token is the guard
        assert host_status(c, "evil.example") == 401
        assert c.get("/api/runs", headers={"host": "evil.example", "authorization": f"Bearer {TOKEN}"}
                     ).status_code == 200


def test_listening_everywhere_answers_any_ip_but_only_known_names(runs):
    """Behind Docker's port mapping the browser's address for the server is unknown; an IP cannot be rebound."""
    with make_client(runs.data_dir, host="0.0.0.0") as c:
        for host in ("192.168.1.5:8000", "[2001:db8::5]:8000", "localhost:8000"):
            assert host_status(c, host) == 200, host
        assert host_status(c, "gpu-box:8000") == 400
    with make_client(runs.data_dir, host="gpu-box") as c:  # the name it was told to listen on
        assert host_status(c, "gpu-box:8000") == 200 and host_status(c, "192.168.1.5") == 400


def test_a_live_server_refuses_foreign_host_names(live_server):
    assert httpx.get(f"{live_server.base_url}/api/runs", headers={"host": "evil.example"}).status_code == 400
    assert httpx.get(f"{live_server.base_url}/api/runs").status_code == 200  # Host: 127.0.0.1:PORT
    port = live_server.base_url.rsplit(":", 1)[1]
    assert httpx.get(f"{live_server.base_url}/api/runs", headers={"host": f"localhost:{port}"}).status_code == 200


# -- cross-site writes and ids ---------------------------------------------------------------------------------------
def test_cross_site_writes_are_refused(client, runs):
    level1 = runs.ids["level1"]
    before = files_of(runs.data_dir)
    for headers in ({"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site"}, {"origin": "null"}):
        resp = client.patch(f"/api/runs/{level1}", json={"name": "pwned"}, headers=headers)
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "cross_site_request", headers
        assert client.delete(f"/api/runs/{level1}", headers=headers).status_code == 403
    assert files_of(runs.data_dir) == before
    same = client.get(f"/api/runs/{level1}", headers={"origin": "https://evil.example"})
    assert same.status_code == 200  # reading is not a change (and CORS keeps the answer from the other site)


@pytest.mark.parametrize("run_id", ["..", "...", "%2e%2e", "..%2f..%2fetc", "LEVEL1", "a" * 65, ".upload-x",
                                    "level1%00", "-x", "runs"])
def test_run_ids_are_strict(client, run_id):
    assert client.get(f"/api/runs/{run_id}").status_code == 404
    assert client.get(f"/api/runs/{run_id}/summary").status_code in (404, 422)


def test_no_path_reaches_outside(client):
    for path in ("/static/../server/app.py", "/static/%2e%2e/%2e%2e/pyproject.toml", "/runs/../../etc/passwd",
                 "/api/runs/%2e%2e%2f%2e%2e%2fpyproject.toml"):
        resp = client.get(path)
        assert resp.status_code == 404 and "[build-system]" not in resp.text, path


# -- settings: environment, then flags ---------------------------------------------------------------------------------
def test_settings_from_env_and_flags(tmp_path):
    from ascendscope.server.cli import build_parser
    from ascendscope.server.settings import Settings

    env = {"ASCENDSCOPE_HOST": "0.0.0.0", "ASCENDSCOPE_DATA_DIR": str(tmp_path), "ASCENDSCOPE_NO_BROWSER": "1",
           "ASCENDSCOPE_READ_ONLY": "yes", "ASCENDSCOPE_TOKEN": "t", "ASCENDSCOPE_PORT": "9000"}
    s = Settings.from_env(env)
    assert (s.host, s.data_dir, s.no_browser, s.read_only, s.token, s.port) == ("0.0.0.0", tmp_path, True, True,
                                                                                "t", 9000)
    args = build_parser().parse_args(["serve", "--host", "127.0.0.1", "--port", "8123", "--token", "u"])
    flags = Settings.from_env(env, host=args.host, port=args.port, token=args.token, no_browser=args.no_browser,
                              read_only=args.read_only)
    assert (flags.host, flags.port, flags.token, flags.no_browser, flags.read_only) == ("127.0.0.1", 8123, "u",
                                                                                        True, True)
    assert Settings.from_env({}).host == "127.0.0.1" and Settings.from_env({}).token is None
    assert Settings.from_env({"ASCENDSCOPE_ALLOWED_HOSTS": "a.example,b"}).allowed_hosts == "a.example,b"
    args = build_parser().parse_args(["serve", "--allowed-hosts", "c.example"])
    assert Settings.from_env(env, allowed_hosts=args.allowed_hosts).allowed_hosts == "c.example"
    assert Settings.from_env({}).allowed_hosts is None
    with pytest.raises(ValueError):
        Settings.from_env({"ASCENDSCOPE_READ_ONLY": "maybe"})


def test_help_explains_allowed_hosts(capsys):
    from ascendscope.server.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = capsys.readouterr().out
    assert "--allowed-hosts" in text and "ASCENDSCOPE_ALLOWED_HOSTS" in text and "rebinding" in text


def test_serving_a_folder_of_runs_opens_one_run_each(tmp_path):
    from ascendscope.server.cli import split_sources

    assert split_sources(PYTORCH_TEXT / "level1") == [PYTORCH_TEXT / "level1"]  # a folder of ranks is one run
    assert split_sources(PYTORCH_TEXT) == sorted(p for p in PYTORCH_TEXT.iterdir() if p.is_dir())
    (tmp_path / "one").mkdir()
    assert split_sources(tmp_path) == [tmp_path]


def test_live_server_health(live_server):
    assert httpx.get(f"{live_server.base_url}/api/health").json()["status"] == "ok"
