"""Requests must name the server by a name it was configured for (DNS rebinding).

A web page whose DNS name its attacker rebinds to the server's address is same-origin with
the server in the victim's browser: the browser sends the page's name in ``Host``
(``evil.test:8000``), and Fetch Metadata calls the request ``same-origin``.

- On loopback without a token, the default, every request must name a loopback name
  (``localhost``, an address in 127.0.0.0/8, ``[::1]``), the name the server listens on, or one
  of ``ZEUS_BSO_ALLOWED_HOSTS``, as Jupyter and the Docker daemon require. Programs address the
  server by the name they were given, which is one of those.
- Otherwise (a token, or another address), a browser's request (one with Fetch Metadata or an
  ``Origin``) must name one of those or an IP address; programs send neither header and are
  not checked, so clients behind any name keep working.
"""

from __future__ import annotations

import ipaddress

from starlette.types import ASGIApp, Receive, Scope, Send

from zeus_bso_server.api.asgi import answer_json, route_path

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered whatever the name: they say only whether the server is up (probes use any name)."""


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8000`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header[1:]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def is_loopback_name(name: str) -> bool:
    """Whether ``name`` names this machine's loopback interface."""
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_address(name: str) -> bool:
    """Whether ``name`` is an IP address (which no DNS answer can rebind)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def from_a_browser(headers: dict[bytes, bytes]) -> bool:
    """Whether a request says it comes from a browser (Fetch Metadata or ``Origin``; programs
    send neither)."""
    return b"sec-fetch-site" in headers or b"origin" in headers


class HostCheckMiddleware:
    """Answers 403 to a request addressed to a name the server was not configured for.

    ``every_request`` (a server without a token on loopback): every request must name a
    loopback name or one of ``allowed`` (the name the server listens on, and
    ``ZEUS_BSO_ALLOWED_HOSTS``). Otherwise only browser requests are checked, and an IP
    address passes too: a rebound name is a name."""

    def __init__(self, app: ASGIApp, allowed: set[str], *, every_request: bool) -> None:
        self.app = app
        self.allowed = frozenset(host_name(name) for name in allowed)
        self.every_request = every_request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or route_path(scope) in HEALTH_PATHS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        header = headers.get(b"host", b"").decode("latin-1")
        name = host_name(header)
        if not header or is_loopback_name(name) or name in self.allowed:
            await self.app(scope, receive, send)
            return
        if not self.every_request and (not from_a_browser(headers) or is_address(name)):
            await self.app(scope, receive, send)
            return
        if self.every_request:
            message = (
                f"Host {header!r} is not this server's: a server without a token answers "
                "loopback names only (localhost, 127.0.0.1, [::1]), which keeps pages of other "
                "sites whose names resolve here out; list the names to serve in "
                "ZEUS_BSO_ALLOWED_HOSTS, or give the server a token (ZEUS_BSO_TOKEN)"
            )
        else:
            message = (
                f"Host {header!r} is not a name this server was configured for: a browser "
                "must address it by an IP address, a loopback name, the name it listens on or "
                "one of ZEUS_BSO_ALLOWED_HOSTS, which keeps pages of other sites whose names "
                "resolve here out (DNS rebinding); add the name to ZEUS_BSO_ALLOWED_HOSTS"
            )
        await answer_json(send, 403, {"message": message})
