"""A server without a token answers only requests addressed to it by a loopback name.

On loopback, the default, the server needs no token. A web page whose DNS name its attacker
rebinds to 127.0.0.1 would then be same-origin with the server in the victim's browser: the
browser sends the page's name in ``Host`` (``evil.test:8000``), and Fetch Metadata calls the
request ``same-origin``. Refusing every ``Host`` but a loopback name (``localhost``, an address
in 127.0.0.0/8, ``[::1]``) or the name the server listens on closes that door, as Jupyter and
the Docker daemon do. Programs address the server by the name they were given, which is one of
those. A server with a token does not need it: a rebound page has no token.
"""

from __future__ import annotations

import ipaddress

from starlette.types import ASGIApp, Receive, Scope, Send

from zeus_bso_server.api.asgi import answer_json

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


class LoopbackHostMiddleware:
    """Answers 403 to a request whose ``Host`` is neither a loopback name nor one of
    ``allowed`` (the name the server listens on, and ``ZEUS_BSO_ALLOWED_HOSTS``)."""

    def __init__(self, app: ASGIApp, allowed: set[str]) -> None:
        self.app = app
        self.allowed = frozenset(host_name(name) for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in HEALTH_PATHS:
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        name = host_name(header)
        if not header or is_loopback_name(name) or name in self.allowed:
            await self.app(scope, receive, send)
            return
        message = (
            f"Host {header!r} is not this server's: a server without a token answers loopback "
            "names only (localhost, 127.0.0.1, [::1]), which keeps pages of other sites whose "
            "names resolve here out; list the names to serve in ZEUS_BSO_ALLOWED_HOSTS, or give "
            "the server a token (ZEUS_BSO_TOKEN)"
        )
        await answer_json(send, 403, {"message": message})
