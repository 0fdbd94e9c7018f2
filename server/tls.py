"""HTTPS and mutual TLS for ``ascendscope serve``, through uvicorn's own TLS support.

``tls_cert`` (a PEM certificate and its chain) and ``tls_key`` (its key; or in the same file) make the server speak
HTTPS only; ``tls_client_ca`` also makes it refuse, during the handshake, a client without a certificate signed by
one of those CAs. The settings are checked before the server starts (:func:`check`: each file named in the error);
the session cookie gets ``Secure`` under HTTPS (``server.security``). :func:`probe` is how the CLI (several server
processes) and the Docker health check see that the server answers: ``/api/health`` over HTTP or HTTPS (any
certificate: it probes its own server), or under mutual TLS, which it cannot pass, a TLS handshake that the server
takes up.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from pathlib import Path

HEALTH_PATH = "/api/health"


def enabled(settings) -> bool:
    return bool(settings.tls_cert)


def scheme(settings) -> str:
    return "https" if enabled(settings) else "http"


def _path(value: str | None) -> str | None:
    return str(Path(value).expanduser()) if value else None


def uvicorn_options(settings) -> dict:
    """The TLS arguments of ``uvicorn.Config`` (none without a certificate)."""
    if not enabled(settings):
        return {}
    options = {"ssl_certfile": _path(settings.tls_cert), "ssl_keyfile": _path(settings.tls_key)}
    if settings.tls_client_ca:
        options |= {"ssl_ca_certs": _path(settings.tls_client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return options


def check(settings) -> None:
    """Raise ValueError, naming the setting and the file, unless the TLS settings make a server context."""
    if not enabled(settings):
        for name in ("tls_key", "tls_client_ca"):
            if getattr(settings, name):
                raise ValueError(f"--{name.replace('_', '-')} needs --tls-cert (ASCENDSCOPE_TLS_CERT)")
        return
    for name in ("tls_cert", "tls_key", "tls_client_ca"):
        path = _path(getattr(settings, name))
        if path and not Path(path).is_file():
            raise ValueError(f"--{name.replace('_', '-')}: no such file: {path}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(_path(settings.tls_cert), _path(settings.tls_key))
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"--tls-cert {settings.tls_cert}"
                         + (f" / --tls-key {settings.tls_key}" if settings.tls_key else "")
                         + f": not a PEM certificate and its private key ({exc})") from None
    if settings.tls_client_ca:
        try:
            context.load_verify_locations(_path(settings.tls_client_ca))
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"--tls-client-ca {settings.tls_client_ca}: not PEM CA certificates ({exc})") from None


def probe(host: str, port: int, settings, timeout_s: float = 2.0) -> bool:
    """True if the server on ``host:port`` answers: ``/api/health`` says 200 (HTTP, or HTTPS without checking its
    certificate), or, under mutual TLS, the server takes up a TLS handshake."""
    if not enabled(settings):
        return _health_ok(http.client.HTTPConnection(host, port, timeout=timeout_s))
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # our own server, by address
    if not settings.tls_client_ca:
        return _health_ok(http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context))
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                context.wrap_socket(raw, server_hostname=None):
            return True
    except ssl.SSLError:  # the server refused us a certificate: it is there
        return True
    except OSError:
        return False


def _health_ok(conn: http.client.HTTPConnection) -> bool:
    try:
        conn.request("GET", HEALTH_PATH)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
