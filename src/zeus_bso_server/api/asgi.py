"""What the ASGI middleware share: answering a request with a JSON message."""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.types import Send


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
