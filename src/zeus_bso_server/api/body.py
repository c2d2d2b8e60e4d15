"""ASGI middleware for request bodies: a size limit, and JSON whatever the Content-Type says.

Upstream Zeus clients send JSON bodies with no Content-Type, and ``curl -d`` labels JSON as a
form. No route here takes anything but JSON, so such bodies are read as JSON.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from zeus_bso_server.api.asgi import answer_json

_READ_AS_JSON = {b"", b"application/x-www-form-urlencoded", b"text/plain"}


class BodyMiddleware:
    """Answers 413 to bodies over ``max_bytes`` and labels unlabelled bodies as JSON."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
        length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._too_large(send)
            return
        media_type = content_type.split(b";", 1)[0].strip().lower()
        if media_type in _READ_AS_JSON:
            # In place: outer middleware reads what routing adds to this scope (the route).
            scope["headers"] = [*headers, (b"content-type", b"application/json")]

        # Bodies here are small: read the whole body first, so the limit holds without a
        # Content-Length too, then hand it on.
        body = b""
        more = scope["method"] not in ("GET", "HEAD", "OPTIONS")
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._too_large(send)
                return
        if body:
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                await answer_json(send, 422, {"message": "body: not UTF-8 encoded JSON"})
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await answer_json(
            send, 413, {"message": f"request body larger than {self.max_bytes} bytes"}
        )
