"""Health and observability routes: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import text

from zeus_bso_server.api.deps import Db
from zeus_bso_server.errors import SchemaError, ServerError
from zeus_bso_server.observability import fleet_exposition
from zeus_bso_server.queries import fleet_summary
from zeus_bso_server.store.schema import check_schema

logger = logging.getLogger(__name__)

health = APIRouter(tags=["health"])


@health.get("/metrics", tags=["observability"], response_class=Response)
async def metrics(request: Request, db: Db) -> Response:
    """Prometheus metrics (all worker processes), and the fleet's totals (`GET /api/summary`)
    read from the database at each scrape."""
    body, content_type = request.app.state.metrics.exposition()
    try:
        totals: dict[str, float] | None = (await fleet_summary(db, None)).model_dump()
    except ServerError as err:
        logger.warning("/metrics without the fleet's totals: %s", err.message)
        totals = None
    return Response(body + fleet_exposition(totals), media_type=content_type)


_PING = text("SELECT 1")


@health.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@health.get(
    "/readyz",
    responses={503: {"description": "Database unreachable, schema outdated, or takes no writes"}},
)
async def readyz(db: Db) -> JSONResponse:
    """The database answers, its schema is current and a write can succeed."""
    try:
        await db.read(lambda conn: conn.execute(_PING).scalar_one())
        await check_schema(db)
        await db.check_writable()
    except (ServerError, SchemaError) as err:
        return JSONResponse({"status": "unavailable", "message": err.message}, status_code=503)
    except Exception:  # readiness must answer, whatever the database does
        return JSONResponse(
            {"status": "unavailable", "message": "database check failed"}, status_code=503
        )
    return JSONResponse({"status": "ok"})
