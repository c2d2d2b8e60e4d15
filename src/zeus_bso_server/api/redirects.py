"""Redirects name a path on this server, never the ``Host`` header's name (ASGI middleware).

The framework's own redirects (``/dashboard/`` to ``/dashboard``, the trailing-slash rule) are
absolute URLs built from the request's ``Host`` header, which any client can set: a proxy or
a cache could then send a browser to a name the request made up. This middleware turns every
absolute ``Location`` the app answers into its path, query and fragment; the app never
redirects to another server.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def as_path(location: str) -> str:
    """``location`` without its scheme and name (``http://evil.example/a?b`` -> ``/a?b``)."""
    parts = urlsplit(location)
    path = parts.path or "/"
    if path.startswith("//"):  # would read as a network path: another server
        path = "/" + path.lstrip("/")
    return urlunsplit(("", "", path, parts.query, parts.fragment))


class PathRedirectMiddleware:
    """Rewrites the ``Location`` of every answer into a path on this server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_paths(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    (name, as_path(value.decode("latin-1")).encode("latin-1"))
                    if name.lower() == b"location"
                    else (name, value)
                    for name, value in message.get("headers", [])
                ]
            await send(message)

        await self.app(scope, receive, send_paths)
