"""HTTP layer: the app factory, routes, error handlers and dependencies."""

from zeus_bso_server.api.app import create_app

__all__ = ["create_app"]
