"""Routes of ours on top of the upstream protocol: job state, job list, heartbeat, health."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import text

from zeus_bso.spec import INT32_MAX, MAX_ID_LENGTH, Printable, TrialId
from zeus_bso_server.api.deps import Db, Service
from zeus_bso_server.errors import SchemaError, ServerError
from zeus_bso_server.store.migrate import check_schema
from zeus_bso_server.views import JobSummary, JobView, TrialView, job_summaries, job_view

router = APIRouter(prefix="/api", tags=["jobs"])
health = APIRouter(tags=["health"])


@router.get("/jobs", response_model=list[JobSummary])
async def list_jobs(
    db: Db,
    prefix: Annotated[Annotated[str, Printable] | None, Query(max_length=MAX_ID_LENGTH)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
) -> list[JobSummary]:
    """Registered jobs, ordered by id; ``prefix`` keeps those whose id starts with it."""
    return await job_summaries(db, prefix, limit, offset)


@router.get(
    "/jobs/{job_id:path}", response_model=JobView, responses={404: {"description": "No such job"}}
)
async def get_job(
    db: Db,
    job_id: Annotated[str, Path(min_length=1, max_length=MAX_ID_LENGTH), Printable],
    limit: Annotated[int, Query(ge=0, le=1000)] = 50,
    before: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
) -> JobView:
    """A job's config, stage, per-batch-size statistics and posterior, best batch size and its
    most recent trials (``limit`` of them, numbered below ``before`` when given)."""
    return await job_view(db, job_id, limit, before)


@router.post(
    "/trials/heartbeat", response_model=TrialView, responses={404: {"description": "No such trial"}}
)
async def heartbeat(trial: TrialId, service: Service) -> TrialView:
    """Renew a running trial's lease; a client calls it while it trains."""
    return TrialView.of(await service.heartbeat(trial))


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
