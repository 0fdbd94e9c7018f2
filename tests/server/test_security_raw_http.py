"""What a browser or an HTTP client library would never send, sent byte for byte to a live uvicorn server:
a protocol-relative path in the token link (an open redirect if echoed), and a request without a Host header."""

from __future__ import annotations

import socket
from urllib.parse import urljoin

import pytest

from tests.conftest import serving

TOKEN = "raw-http-token"


def raw_request(base_url: str, request: bytes) -> tuple[int, dict[str, str]]:
    """Send ``request`` as is; the status and the headers of the answer."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data_dir = tmp_path_factory.mktemp("raw-http")
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(data_dir), token=TOKEN))) as base:
        yield base


@pytest.mark.parametrize("path", ["//evil.example/x", "///evil.example/x", "/\\evil.example/x",
                                  "/%2F%2Fevil.example/x"])
def test_the_token_redirect_never_leaves_the_server(token_server, path):
    status, headers = raw_request(token_server, f"GET {path}?token={TOKEN}&a=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                f"Connection: close\r\n\r\n".encode())
    location = headers["location"]
    assert status == 303, headers
    # relative to the page itself: resolved against the request's URL it stays on this server
    assert location.startswith("./") and "evil" not in location, location
    assert urljoin(f"http://127.0.0.1{path}", location).startswith("http://127.0.0.1/")
    assert location.endswith("?a=1") and TOKEN not in location


def test_an_ordinary_token_link_keeps_its_path(token_server):
    status, headers = raw_request(token_server, f"GET /runs/x/summary?rank=1&token={TOKEN} HTTP/1.1\r\n"
                                                f"Host: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    assert status == 303 and headers["location"] == "./summary?rank=1"


def test_http11_without_a_host_header_is_refused(token_server):
    for path in ("/api/runs", "/api/health", "/"):
        status, headers = raw_request(token_server, f"GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n".encode())
        assert status == 400, path
        assert headers["content-type"].startswith("application/json")
    # HTTP/1.0 may leave Host out; the health probe answers it
    status, _ = raw_request(token_server, b"GET /api/health HTTP/1.0\r\n\r\n")
    assert status == 200
