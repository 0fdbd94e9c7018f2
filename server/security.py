"""What every request and response goes through: security headers, the optional access token, no cross-site writes.

:class:`SecurityMiddleware` (pure ASGI, so an upload's body still streams):

* adds the security headers to every response — a Content-Security-Policy that allows scripts, styles and
  connections from this origin only (no inline script, no eval; framed only by pages of this same origin, as a
  notebook behind the same Jupyter proxy frames a view for ``Run.show``), ``nosniff``, ``no-referrer`` and
  ``X-Frame-Options: SAMEORIGIN``. A route that needs another policy sets its own CSP header, which is kept: the
  chart pages and the API reference allow inline *styles* (:data:`CSP_WITH_PLOTLY`);
* without a token, refuses (400 ``host_not_allowed``) a request whose ``Host`` is not a name this server answers
  to: DNS rebinding points an attacker's host name at 127.0.0.1, after which a page from that name reads the
  dashboard as "same origin". Answered: localhost, loopback addresses, the address the connection was made to,
  the configured ``host``, the ``allowed_hosts`` names (``*``: any), and — when the server listens on every
  interface (0.0.0.0, ::), where port mapping hides which address the browser used — any IP address, since
  rebinding needs a name. A token makes the check moot (a rebinding page has no token), so it is skipped then;
  ``GET /api/health`` is never checked (load balancers probe it under names of their own);
* refuses (403) a request that changes something (not GET/HEAD/OPTIONS) when the browser says it comes from
  another site (``Sec-Fetch-Site``, or an ``Origin`` that is not this host), so a web page cannot upload to or
  delete from a dashboard open on localhost;
* with a token configured, requires it on every request except ``GET /api/health``: ``Authorization: Bearer
  TOKEN``, or the cookie a browser gets by visiting any page once with ``?token=TOKEN`` (the answer sets an
  HttpOnly, SameSite=Lax cookie and redirects to the same URL without the token, so it leaves the address
  bar and the history). The cookie holds an HMAC of the token, never the token itself. The redirect always
  stays on this server: a path that starts with two slashes, or a slash and a backslash (a browser reads either
  as another host), is sent back with one leading slash;
* answers 400 ``host_required`` to an HTTP/1.1 request without a ``Host`` header, as HTTP/1.1 requires (RFC 9112
  §3.2; HTTP/1.0 clients may omit it).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from html import escape
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; font-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'self'")
# plotly.js injects its stylesheet (<style> elements) and style attributes at run time: the pages that load it
# allow inline styles — never inline scripts
CSP_WITH_PLOTLY = CSP.replace("style-src 'self';", "style-src 'self' 'unsafe-inline';")
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"SAMEORIGIN"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
OPEN_PATHS = ("/api/health",)  # answered without a token (container health checks)
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
TOKEN_PARAM = "token"
COOKIE_MAX_AGE_S = 30 * 24 * 3600
LOCAL_NAMES = frozenset({"localhost"})
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
MAX_SHOWN_HOST_CHARS = 100
PATH_SAFE = "/:@!$&'()*+,;=-._~"  # characters a redirect's path keeps as they are (RFC 3986 pchar)


class SecurityMiddleware:
    def __init__(self, app, *, token: str | None = None, host: str = "127.0.0.1",
                 allowed_hosts: str | None = None):
        self.app = app
        self.token = token or None
        allowed = {_hostname(h) for h in (allowed_hosts or "").split(",") if h.strip()}
        self.any_host = "*" in allowed
        self.any_ip = _hostname(host) in WILDCARD_HOSTS
        self.names = LOCAL_NAMES | allowed | ({_hostname(host)} if not self.any_ip else set())
        if self.token:
            digest = hmac.new(self.token.encode(), b"ascendscope-cookie", hashlib.sha256).hexdigest()
            # one cookie per token, so dashboards on other ports of the same host do not overwrite each other
            self.cookie_name, self.cookie_value = f"ascendscope_{digest[:12]}", digest

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message = {**message, "headers": list(message.get("headers", [])) + extra}
            await send(message)

        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if b"host" not in headers and scope.get("http_version", "1.1") != "1.0":
            await _error(send_with_headers, scope, 400, "host_required",
                         "an HTTP/1.1 request must name the host it is for (a Host header)")
            return
        open_path = scope["path"] in OPEN_PATHS
        if not self.token and not self.any_host and not open_path and not self._host_allowed(scope, headers):
            name = _hostname(headers[b"host"].decode("latin-1"))[:MAX_SHOWN_HOST_CHARS]
            await _error(send_with_headers, scope, 400, "host_not_allowed",
                         f"this dashboard does not answer to the host name {name!r} (a guard against DNS "
                         f"rebinding): open it as localhost or by its IP address, or start it with "
                         f"--allowed-hosts {name} (ASCENDSCOPE_ALLOWED_HOSTS) or with --token")
            return
        if scope["method"] not in SAFE_METHODS and _cross_site(headers):
            await _error(send_with_headers, scope, 403, "cross_site_request",
                         "a request from another site may not change anything here")
            return
        if self.token and not open_path:
            verdict = self._check_token(scope, headers)
            if verdict == "redirect":
                await self._redirect_without_token(scope, send_with_headers)
                return
            if verdict != "ok":
                await _error(send_with_headers, scope, 401, "token_required",
                             "this dashboard needs its access token: open the link you were given (…?token=…) "
                             "or send 'Authorization: Bearer TOKEN'",
                             extra_headers=[(b"www-authenticate", b'Bearer realm="ascendscope"')])
                return
        await self.app(scope, receive, send_with_headers)

    def _host_allowed(self, scope, headers) -> bool:
        raw = headers.get(b"host")
        if raw is None:
            return True  # HTTP/1.0 without Host (1.1 was refused already): no browser sends that, so no rebinding
        name = _hostname(raw.decode("latin-1"))
        if name in self.names or name.endswith(".localhost"):  # browsers resolve *.localhost to loopback
            return True
        server = scope.get("server")
        if server and name == _hostname(str(server[0])):
            return True  # the address the connection was made to (an in-process client names its own)
        ip = _ip(name)
        return ip is not None and (ip.is_loopback or self.any_ip)

    def _check_token(self, scope, headers) -> str:
        auth = headers.get(b"authorization", b"").decode("latin-1")
        if auth[:7].lower() == "bearer " and _same(auth[7:].strip(), self.token):
            return "ok"
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        if TOKEN_PARAM in query:
            ok = _same(query[TOKEN_PARAM], self.token)
            return "redirect" if ok and scope["method"] in ("GET", "HEAD") else ("ok" if ok else "bad")
        cookie = _cookies(headers.get(b"cookie", b"")).get(self.cookie_name)
        return "ok" if cookie is not None and _same(cookie, self.cookie_value) else "bad"

    async def _redirect_without_token(self, scope, send) -> None:
        pairs = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
                 if k != TOKEN_PARAM]
        # relative (the page's own last segment), so it stays under the prefix of a proxy in front of us; "./" and
        # percent-encoding keep "//evil.example", "\\evil…" or "https:evil…" from reading as another host
        last = quote(scope["path"].rsplit("/", 1)[-1], safe=PATH_SAFE)
        location = "./" + last + (f"?{urlencode(pairs)}" if pairs else "")
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = (f"{self.cookie_name}={self.cookie_value}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; HttpOnly; "
                  f"SameSite=Lax{secure}")
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode("latin-1", "replace")),
                                (b"set-cookie", cookie.encode()), (b"cache-control", b"no-store"),
                                (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


def _hostname(host: str) -> str:
    """``Host`` header or configured name -> lower-case name or address without port, brackets or final dot;
    an IPv4-mapped IPv6 address becomes its IPv4 form (dual-stack sockets report those)."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    host = host.rstrip(".")
    ip = _ip(host)
    if ip is not None and ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip) if ip is not None else host


def _ip(name: str):
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def _cookies(raw: bytes) -> dict[str, str]:
    out = {}
    for part in raw.decode("latin-1").split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            out[name] = value
    return out


def _cross_site(headers: dict[bytes, bytes]) -> bool:
    fetch_site = headers.get(b"sec-fetch-site")
    if fetch_site is not None:  # the browser's own verdict; it also holds behind a proxy that rewrites Host
        return fetch_site not in (b"same-origin", b"none")
    origin = headers.get(b"origin")
    if origin is None:
        return False  # not a browser, or a same-origin request from an old one
    host = headers.get(b"host", b"").decode("latin-1").lower()
    return urlsplit(origin.decode("latin-1")).netloc.lower() != host


async def _error(send, scope, status: int, code: str, message: str, extra_headers=()) -> None:
    """The app's one error shape for the API (and anything that is not a page visit), a small page otherwise."""
    accept = dict(scope.get("headers", [])).get(b"accept", b"")
    page = scope["method"] == "GET" and not scope["path"].startswith("/api/") and b"text/html" in accept
    if page:
        body = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{status} · ascendscope"
                f"</title></head><body><h1>{status}</h1><p>{escape(message)}</p></body></html>").encode()
        ctype = b"text/html; charset=utf-8"
    else:
        body = json.dumps({"error": {"code": code, "message": message, "status": status}}).encode()
        ctype = b"application/json"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *extra_headers]})
    await send({"type": "http.response.body", "body": body})
