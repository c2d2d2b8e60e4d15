"""What the ASGI middleware share: a request's path below the server's root path, and answering
a request with a JSON message."""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.types import Scope, Send


def route_path(scope: Scope) -> str:
    """The request's path below the server's root path (``--root-path``, for a server that a
    reverse proxy serves below a path prefix: uvicorn puts the prefix back into ``path``), as
    the routes see it: ``/healthz``, whether or not the server has a root path."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path


async def answer_json(
    send: Send, status: int, content: dict[str, str], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Send a whole answer: ``status`` with ``content`` as its JSON body, and ``headers``."""
    body = json.dumps(content).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
