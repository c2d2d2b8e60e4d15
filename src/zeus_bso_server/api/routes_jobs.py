"""Routes of ours on top of the upstream protocol: the job list, one job, a trial's heartbeat."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from zeus_bso.spec import INT32_MAX, MAX_ID_LENGTH, Printable, TrialId
from zeus_bso_server.api.deps import Db, Service
from zeus_bso_server.queries import job_summaries, job_view
from zeus_bso_server.read_models import JobSummary, JobView, TrialView

router = APIRouter(prefix="/api", tags=["jobs"])


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


@router.post(
    "/trials/release", response_model=TrialView, responses={404: {"description": "No such trial"}}
)
async def release(trial: TrialId, service: Service) -> TrialView:
    """Release a trial whose run ended for a reason that is not its batch size's (a
    misconfigured script, the framework's own epoch limit below the job's): an open trial
    becomes ``released`` and counts nothing against its batch size; an ended one is left as it
    is."""
    return TrialView.of(await service.release_trial(trial))
