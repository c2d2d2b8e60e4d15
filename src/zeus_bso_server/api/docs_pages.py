"""The API's docs pages, Swagger UI at ``/docs`` and ReDoc at ``/redoc``, whose scripts and
styles the server serves itself (fastapi-offline's copies, below ``/docs/static``) rather than
a CDN's: like the dashboard, they work where the server's users have no way out to the
internet (an air-gapped cluster), and they load nothing from another site."""

from __future__ import annotations

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
OPENAPI_URL = "/openapi.json"
STATIC_URL = f"{DOCS_URL}/static"
"""Swagger UI's and ReDoc's scripts and styles."""


def is_docs_path(path: str) -> bool:
    """Whether ``path`` (below the root path) is one of the docs pages or what they load."""
    return path in (DOCS_URL, REDOC_URL, OPENAPI_URL) or path.startswith(f"{DOCS_URL}/")
