"""``ascendscope serve`` over TLS (uvicorn's own), with a CA, server and client certificates made at test time:
HTTPS answers and plain HTTP does not, the session cookie is ``Secure``, mutual TLS refuses a client without a
certificate (or with one of another CA) and takes one with; serving beyond loopback over plain HTTP warns, and TLS
settings that cannot work stop ``serve`` with an error naming them."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.server.test_cli_serve import ONE_PROCESS, stop
from tests.tlscerts import make_pki, needs_openssl

pytestmark = needs_openssl
TOKEN = "tls-test-token"
PLAIN_HTTP_WARNING = "over plain HTTP"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture()
def data_dir(tmp_path):
    """A data dir holding one (failed) run, so that ``serve`` with no PATH opens it rather than ingesting the
    bundled sample."""
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path / "data")
    store.set_status(store.create_run("placeholder", "/nowhere").id, "failed", error="a placeholder")
    return store.data_dir


def serve(data_dir: Path, log: Path, *flags: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDSCOPE_")}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ascendscope.server.cli", "serve", "--no-browser", "--port",
                                 str(port), "--data-dir", str(data_dir), "--log-level", "warning", *flags],
                                stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    return proc, port


def announced(proc: subprocess.Popen, log: Path, timeout_s: float = 90) -> str:
    """The line ``serve`` prints once it answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("ascendscope is serving"):
                return line
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError(f"not announced: {log.read_text()}")


def client_context(pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """A client's TLS context that trusts the test CA, presenting ``cert`` when given."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def test_https_answers_and_the_session_cookie_is_secure(pki, data_dir, tmp_path):
    log = tmp_path / "serve.log"
    proc, port = serve(data_dir, log, "--host", "0.0.0.0", "--token", TOKEN, "--tls-cert", str(pki.server_cert),
                       "--tls-key", str(pki.server_key), *ONE_PROCESS)
    try:
        assert f"at https://127.0.0.1:{port}/?token={TOKEN}" in announced(proc, log)
        with httpx.Client(verify=client_context(pki), timeout=10) as https:
            assert https.get(f"https://127.0.0.1:{port}/api/health").json()["status"] == "ok"
            login = https.get(f"https://127.0.0.1:{port}/?token={TOKEN}", follow_redirects=False)
            assert login.status_code == 303
            cookie = login.headers["set-cookie"]
            assert "; Secure" in cookie and "HttpOnly" in cookie
            assert https.get(f"https://127.0.0.1:{port}/api/runs").status_code == 200  # (the cookie, kept)
            assert https.head(f"https://127.0.0.1:{port}/api/health").status_code == 200
        with pytest.raises(httpx.TransportError):  # the port speaks TLS only
            httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=10)
    finally:
        out = stop(proc) + log.read_text()
    assert PLAIN_HTTP_WARNING not in out and "without --token" not in out


def test_serving_beyond_loopback_over_plain_http_warns(data_dir, tmp_path):
    log = tmp_path / "serve.log"
    proc, port = serve(data_dir, log, "--host", "0.0.0.0", "--token", TOKEN, *ONE_PROCESS)
    try:
        assert f"at http://127.0.0.1:{port}/" in announced(proc, log)
    finally:
        stop(proc)
    assert f"warning: serving on 0.0.0.0 {PLAIN_HTTP_WARNING}" in log.read_text()


def test_mutual_tls_refuses_a_client_without_a_certificate(pki, data_dir, tmp_path):
    """Two server processes sharing the port (so ``serve`` sees them answer through a TLS handshake it cannot
    finish, having no client certificate)."""
    log = tmp_path / "serve.log"
    proc, port = serve(data_dir, log, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                       "--tls-client-ca", str(pki.ca), "--workers", "2", "--query-processes", "0")
    url = f"https://127.0.0.1:{port}/api/health"
    try:
        announced(proc, log)
        with pytest.raises(httpx.TransportError):
            httpx.get(url, verify=client_context(pki), timeout=10)
        with pytest.raises(httpx.TransportError):
            httpx.get(url, verify=client_context(pki, pki.stranger_cert, pki.stranger_key), timeout=10)
        with httpx.Client(verify=client_context(pki, pki.client_cert, pki.client_key), timeout=10) as ok:
            assert ok.get(url).json()["status"] == "ok"
            assert ok.get(f"https://127.0.0.1:{port}/api/runs").status_code == 200
    finally:
        stop(proc)


@pytest.mark.parametrize("flags, message", [
    (["--tls-key", "{key}"], "--tls-key needs --tls-cert"),
    (["--tls-client-ca", "{ca}"], "--tls-client-ca needs --tls-cert"),
    (["--tls-cert", "{missing}"], "--tls-cert: no such file"),
    (["--tls-cert", "{ca}", "--tls-key", "{key}"], "not a PEM certificate and its private key"),
    (["--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-client-ca", "{key}"], "--tls-client-ca"),
], ids=["key-alone", "client-ca-alone", "missing-cert", "key-of-another-cert", "client-ca-not-a-ca"])
def test_tls_settings_that_cannot_work_stop_serve(pki, data_dir, tmp_path, flags, message):
    names = {"key": pki.server_key, "ca": pki.ca, "cert": pki.server_cert, "missing": tmp_path / "nope.pem"}
    done = subprocess.run([sys.executable, "-m", "ascendscope.server.cli", "serve", "--no-browser", "--data-dir",
                           str(data_dir), *(f.format(**names) for f in flags)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr, done.stderr
