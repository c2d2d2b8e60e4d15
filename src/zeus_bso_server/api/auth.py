"""Token authentication for every route but the health checks (ASGI middleware).

Two tokens: the server's (``ZEUS_BSO_TOKEN``) opens everything; an optional read-only one
(``ZEUS_BSO_READ_TOKEN``) opens what changes no state (the dashboard, the read API,
``/metrics``) and gets 403 for the rest, so that those who only look need no token that can
register, report, pin or delete. While the server's token is rotated, the one before
(``ZEUS_BSO_PREVIOUS_TOKEN``) opens everything too, each request that sends it counted
(``on_previous``), so that runs started with it report to their end.

Programs send ``Authorization: Bearer <token>``. A browser cannot, so the dashboard's pages also
take HTTP Basic auth with the token as the password (any user name): their 401 asks the browser
for them. Only the pages: a browser re-sends Basic credentials by itself, with requests that a page
of another site makes it send (an ``<img src>``), so Basic credentials open nothing that reads
jobs for a program or changes state. A bearer token is never sent without a script asking, and a
script of another origin cannot ask for it without a CORS preflight, which this server refuses.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from zeus_bso_server.api.asgi import answer_json, route_path
from zeus_bso_server.api.cross_site import changes_state
from zeus_bso_server.api.docs_pages import is_docs_path

OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def _is_page(path: str) -> bool:
    """A path a browser opens: the dashboard, the home page leading to it, and the API docs
    it links (read-only, as its pages are)."""
    return path in ("/", "/dashboard") or path.startswith("/dashboard/") or is_docs_path(path)


class TokenMiddleware:
    """Answers 401 unless the request carries a token, as a bearer token or a Basic password;
    403 when it carries the read-only one and would change state."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        read_token: str | None = None,
        previous_token: str | None = None,
        on_previous: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self._tokens = {"full": token.encode()}
        if read_token is not None:
            self._tokens["read"] = read_token.encode()
        if previous_token is not None:
            self._tokens["previous"] = previous_token.encode()
        self._on_previous = on_previous

    def _matching(self, secret: bytes) -> str | None:
        """Which token ``secret`` is (``full`` or ``read``; the previous token is ``full``, and
        counted), comparing with each in constant time."""
        found = None
        for level, token in self._tokens.items():
            if secrets.compare_digest(secret, token):
                found = level
        if found == "previous":
            if self._on_previous is not None:
                self._on_previous()
            return "full"
        return found

    def _authorized(self, given: bytes, page: bool) -> str | None:
        """The access ``given`` (the Authorization header) opens: ``full``, ``read`` or None."""
        # The scheme is case-insensitive (RFC 9110, section 11.1): "bearer" is "Bearer".
        scheme, _, credentials = given.partition(b" ")
        scheme = scheme.lower()
        if scheme == b"bearer":
            return self._matching(credentials.strip(b" "))
        if scheme != b"basic" or not page:
            return None
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        _user, colon, password = decoded.partition(b":")
        return self._matching(password) if colon else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope)
        if scope["type"] != "http" or path in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        page = _is_page(path)
        access = self._authorized(given, page)
        if access == "full" or (access == "read" and not changes_state(scope["method"], path)):
            await self.app(scope, receive, send)
            return
        if access == "read":
            message = {
                "message": f"this token reads only (ZEUS_BSO_READ_TOKEN): {scope['method']} "
                f"{path} changes state; send the server's token (ZEUS_BSO_TOKEN)"
            }
            await answer_json(send, 403, message)
            return
        if page:
            challenge = b'Basic realm="zeus-bso", charset="UTF-8"'
            hint = "sign in with the server's token as the password"
        else:
            challenge = b"Bearer"
            hint = "send 'Authorization: Bearer <token>'"
        problem = "missing token" if not given else "invalid token"
        if given[:6].lower() == b"basic " and not page:
            problem = "Basic credentials are taken by the dashboard's pages only"
        message = {"message": f"{problem}: {hint}"}
        await answer_json(send, 401, message, [(b"www-authenticate", challenge)])
