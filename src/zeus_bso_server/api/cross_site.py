"""Refuses requests that change state when a browser sends them for a page of another origin.

A page of any origin can make a browser send some requests without asking the server first (no
CORS preflight): ``GET`` and ``HEAD`` (an ``<img src>``), and ``POST`` with an untyped,
``text/plain`` or form body (``<form>``, ``fetch(..., {mode: "no-cors"})``). The server answers
no preflight, so every other cross-origin request is stopped by the browser; these are stopped
here. Programs (our client, upstream Zeus's) send none of the headers below and are not affected.

A request changes state when its method is not ``GET``, ``HEAD`` or ``OPTIONS``, and for
``GET /jobs/batch_size`` (it starts a trial, and may register a hardware profile). Such a request
is refused with 403 when

- its ``Sec-Fetch-Site`` (every current browser sends it) is anything but ``same-origin`` or
  ``none`` (typed into the address bar). Another port of the same host is ``same-site``, and
  refused: it is another origin. ``<img>`` requests carry no ``Origin`` but do carry this;
- or, from a browser that predates Fetch Metadata, its ``Origin`` is not this server's
  (``Origin`` compared with ``Host``), or is ``null`` (a sandboxed frame, a file).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from zeus_bso_server.api.asgi import answer_json, route_path

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
STATE_CHANGING_GETS = frozenset({"/jobs/batch_size"})
_SAME_ORIGIN_SITES = frozenset({b"same-origin", b"none"})


def changes_state(method: str, path: str) -> bool:
    """Whether a request with this method and path can change what the server stores."""
    return method not in SAFE_METHODS or path.rstrip("/") in STATE_CHANGING_GETS


def cross_site_reason(headers: dict[bytes, bytes]) -> str | None:
    """Why a browser sent this request for another origin's page, or None when it did not."""
    site = headers.get(b"sec-fetch-site")
    if site is not None:
        if site.lower() in _SAME_ORIGIN_SITES:
            return None
        return f"the browser labels it Sec-Fetch-Site: {site.decode('latin-1')}"
    origin = headers.get(b"origin")
    if origin is None:
        return None
    text = origin.decode("latin-1")
    if text == "null":
        return "it comes from an opaque origin (Origin: null)"
    host = headers.get(b"host", b"").decode("latin-1").lower()
    try:
        origin_host = urlsplit(text).netloc.lower()
    except ValueError:
        origin_host = ""
    if origin_host and origin_host == host:
        return None
    return f"it comes from the page of another origin ({text})"


class CrossSiteMiddleware:
    """Answers 403 to state-changing requests a browser sent for another origin's page."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not changes_state(scope["method"], route_path(scope)):
            await self.app(scope, receive, send)
            return
        reason = cross_site_reason(dict(scope["headers"]))
        if reason is None:
            await self.app(scope, receive, send)
            return
        message = (
            f"cross-site request refused: {reason}. Requests that change state are taken from "
            "programs and from this server's own pages only"
        )
        await answer_json(send, 403, {"message": message}, [(b"vary", b"Origin, Sec-Fetch-Site")])
