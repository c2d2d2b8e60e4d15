"""Every error becomes a JSON answer here, and nowhere else.

Domain errors are named for what happened and carry a message written for the client; their
status is chosen here, by the error and, where upstream Zeus's protocol answers otherwise, by
the route (`status_of`). Validation errors list what is wrong
without echoing the input (an echoed NaN would not even serialise). Anything unexpected is logged
with its traceback and answered with a generic 500: no exception text reaches a client.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from zeus_bso.errors import (
    NoConvergedBatchSizeError,
    ReportMismatchError,
    TooManyProfilesError,
    ZeusBSOError,
)
from zeus_bso_server.errors import (
    DatabaseUnavailableError,
    JobConfigMismatchError,
    JobNotFoundError,
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
    (ReportMismatchError, 409),
    (NoConvergedBatchSizeError, 409),
    (TooManyProfilesError, 409),
    (DatabaseUnavailableError, 503),
    (SchemaError, 503),
]

PROTOCOL_STATUS_OF: dict[tuple[str, str], list[tuple[type[Exception], int]]] = {
    ("GET", "/jobs/batch_size"): [(JobNotFoundError, 400)],
    ("POST", "/report"): [(JobNotFoundError, 400), (TrialNotFoundError, 400)],
}
"""Where upstream Zeus's protocol answers an unknown job or trial with 400, so do we (its
clients read the status)."""


def status_of(error: Exception, method: str = "", path: str = "") -> int:
    """The HTTP status for a domain error raised by the route at ``method`` and ``path``."""
    for cls, status in [*PROTOCOL_STATUS_OF.get((method, path), []), *STATUS_OF]:
        if isinstance(error, cls):
            return status
    return 500


def _message_of(error: ServerError | ZeusBSOError) -> str:
    return error.message if isinstance(error, ServerError) else str(error)


async def _domain_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ServerError | ZeusBSOError)
    route = request.scope.get("route")
    path = route.path if isinstance(route, APIRoute) else request.url.path
    status = status_of(error, request.method, path)
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
                if isinstance(route, APIRoute) and route.path == request.url.path
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
