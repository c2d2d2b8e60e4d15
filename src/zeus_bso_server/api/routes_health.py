"""Health and observability routes: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import text

from zeus_bso_server.api.deps import Db
from zeus_bso_server.errors import SchemaError, ServerError
from zeus_bso_server.store.migrate import check_schema

health = APIRouter(tags=["health"])


@health.get("/metrics", tags=["observability"], response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus metrics (all worker processes)."""
    body, content_type = request.app.state.metrics.exposition()
    return Response(body, media_type=content_type)


_PING = text("SELECT 1")


@health.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@health.get("/readyz", responses={503: {"description": "Database unreachable or schema outdated"}})
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
