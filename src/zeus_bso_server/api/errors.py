"""Every error becomes a JSON answer here, and nowhere else.

Domain errors are named for what happened and carry a message written for the client; their
status is chosen here, by the error and, where upstream Zeus's protocol answers otherwise, by
what the route declares with `answers` (`status_of`). Validation errors list what is wrong
without echoing the input (an echoed NaN would not even serialise). Anything unexpected is logged
with its traceback and answered with a generic 500: no exception text reaches a client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from zeus_bso.errors import (
    NoConvergedBatchSizeError,
    ReportMismatchError,
    TooManyProfilesError,
    UnknownBanditError,
    ZeusBSOError,
)
from zeus_bso_server.api.asgi import route_path
from zeus_bso_server.errors import (
    DatabaseUnavailableError,
    JobConfigMismatchError,
    JobNotFoundError,
    NewJobRefusedError,
    NothingMeasuredError,
    PinError,
    PowerProfilingOffError,
    SchemaError,
    ServerError,
    TrialNotFoundError,
)

logger = logging.getLogger(__name__)

# Most specific first: the first class an error is an instance of decides its status.
STATUS_OF: list[tuple[type[Exception], int]] = [
    (JobNotFoundError, 404),
    (TrialNotFoundError, 404),
    (JobConfigMismatchError, 409),
    (PinError, 409),
    (PowerProfilingOffError, 409),
    (ReportMismatchError, 409),
    (NoConvergedBatchSizeError, 409),
    (TooManyProfilesError, 409),
    (NothingMeasuredError, 422),
    (UnknownBanditError, 422),
    (NewJobRefusedError, 422),
    (DatabaseUnavailableError, 503),
    (SchemaError, 503),
]

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])
_ROUTE_STATUS: dict[Callable[..., Any], tuple[tuple[type[Exception], int], ...]] = {}


def answers(*statuses: tuple[type[Exception], int]) -> Callable[[Endpoint], Endpoint]:
    """Declares on a route's function the statuses it answers where they differ from
    `STATUS_OF`: where upstream Zeus's protocol answers an unknown job or trial with 400, so do
    we (its clients read the status)."""

    def declare(endpoint: Endpoint) -> Endpoint:
        _ROUTE_STATUS[endpoint] = statuses
        return endpoint

    return declare


def status_of(error: Exception, endpoint: Callable[..., Any] | None = None) -> int:
    """The HTTP status for a domain error raised by the route whose function is ``endpoint``."""
    declared = _ROUTE_STATUS.get(endpoint, ()) if endpoint is not None else ()
    for cls, status in [*declared, *STATUS_OF]:
        if isinstance(error, cls):
            return status
    return 500


def _message_of(error: ServerError | ZeusBSOError) -> str:
    return error.message if isinstance(error, ServerError) else str(error)


async def _domain_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ServerError | ZeusBSOError)
    route = request.scope.get("route")
    status = status_of(error, route.endpoint if isinstance(route, APIRoute) else None)
    headers = {"Retry-After": "1"} if status == 503 else None
    return JSONResponse({"message": _message_of(error)}, status_code=status, headers=headers)


def _location(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    detail = [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type"))}
        for e in error.errors()
    ]
    message = "; ".join(f"{_location(tuple(d['loc']))}: {d['msg']}" for d in detail)
    return JSONResponse({"message": message, "detail": detail}, status_code=422)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    headers = dict(error.headers or {})
    if error.status_code == 405:
        # Starlette names the methods of the first route matching the path only.
        allowed = sorted(
            {
                method
                for route in request.app.routes
                if isinstance(route, APIRoute) and route.path == route_path(request.scope)
                for method in route.methods or ()
            }
        )
        headers["Allow"] = ", ".join(allowed)
    return JSONResponse(
        {"message": str(error.detail), "detail": error.detail},
        status_code=error.status_code,
        headers=headers,
    )


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    logger.exception("unexpected error on %s %s", request.method, request.url.path)
    # The server closes this connection after the answer (the error is raised on to uvicorn):
    # say so, or the client's next request on it meets a reset.
    return JSONResponse(
        {"message": "Internal server error"}, status_code=500, headers={"Connection": "close"}
    )


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(ServerError, _domain_error)
    app.add_exception_handler(ZeusBSOError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
