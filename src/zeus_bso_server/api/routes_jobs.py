"""Routes of ours on top of the upstream protocol: the job list, the fleet's totals, one job, a
trial's heartbeat."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import TypeAdapter

from zeus_bso.spec import (
    INT32_MAX,
    MAX_ID_LENGTH,
    InfeasibleTrial,
    PowerProfileReport,
    PowerProfileView,
    Printable,
    ReleasedTrial,
    TrialId,
)
from zeus_bso_server.api.deps import NO_SUCH_JOB, NO_SUCH_TRIAL, Db, Service
from zeus_bso_server.queries import fleet_summary, job_summaries, job_view, trial_view
from zeus_bso_server.read_models import (
    FleetSummary,
    ForgottenMemoryCaps,
    ForgottenPowerProfile,
    ForgottenPowerProfiles,
    JobSummary,
    JobView,
    Pin,
    PinRequest,
    TrialView,
)

router = APIRouter(prefix="/api", tags=["jobs"])

UNREADABLE_HEADER = "Zeus-BSO-Unreadable-Jobs"
"""Names the jobs a list left out because their stored state cannot be read."""


@router.get("/jobs", response_model=list[JobSummary])  # the schema; the body is made below
async def list_jobs(
    db: Db,
    prefix: Annotated[Annotated[str, Printable] | None, Query(max_length=MAX_ID_LENGTH)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    not_learning: bool = False,
    mixed_models: bool = False,
) -> Response:
    """Registered jobs, ordered by id; ``prefix`` keeps those whose id starts with it,
    ``not_learning`` those that learn nothing now (their newest ended runs, three or more, were
    all released), and ``mixed_models`` those whose runs on one hardware profile trained other
    models (another size, precision or way of training). A job whose stored state cannot be
    read is left out, and named in the ``Zeus-BSO-Unreadable-Jobs`` header (its own view says
    what is wrong)."""
    found = await job_summaries(db, prefix, limit, offset, not_learning, mixed_models)
    body = TypeAdapter(list[JobSummary]).dump_json(found.jobs)
    headers = {UNREADABLE_HEADER: ",".join(found.unreadable)} if found.unreadable else None
    return Response(body, media_type="application/json", headers=headers)


@router.get("/summary", response_model=FleetSummary)
async def summary(
    db: Db,
    prefix: Annotated[Annotated[str, Printable] | None, Query(max_length=MAX_ID_LENGTH)] = None,
) -> FleetSummary:
    """Every job's spending and savings together (the dashboard's totals), or those of the jobs
    whose id starts with ``prefix``: for reports and for tools that chart them."""
    return await fleet_summary(db, prefix)


JobIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_LENGTH), Printable]
ProfileQuery = Annotated[
    Annotated[str, Printable] | None, Query(min_length=1, max_length=MAX_ID_LENGTH)
]
"""A hardware profile named in a query (e.g. ``1xNVIDIA H200@700W``); None: every one."""


@router.put(
    "/jobs/{job_id:path}/pin",
    response_model=Pin,
    responses={**NO_SUCH_JOB, 409: {"description": "Cannot pin so"}},
)
async def pin(job_id: JobIdPath, service: Service, body: PinRequest | None = None) -> Pin:
    """Pin the job: every run gets the batch size (by default the one recommended now) and
    nothing is explored, until it is unpinned; pinned runs stop only at their target or at
    ``max_epochs``, and still report, so learning goes on afterwards."""
    size = await service.pin(job_id, body.batch_size if body is not None else None)
    return Pin(job_id=job_id, batch_size=size)


@router.delete("/jobs/{job_id:path}/pin", status_code=204, responses=NO_SUCH_JOB)
async def unpin(job_id: JobIdPath, service: Service) -> None:
    """Unpin the job: the optimizer chooses its runs' batch sizes again."""
    await service.unpin(job_id)


@router.delete(
    "/jobs/{job_id:path}/power_profiles",
    response_model=ForgottenPowerProfiles,
    responses=NO_SUCH_JOB,
)
async def forget_power_profiles(
    job_id: JobIdPath,
    service: Service,
    profile: ProfileQuery = None,
    batch_size: Annotated[int | None, Query(gt=0, le=INT32_MAX)] = None,
) -> ForgottenPowerProfiles:
    """Forget the job's power profiles (``power_limit="optimize"``): those of ``batch_size``
    on the hardware ``profile`` (e.g. ``1xNVIDIA H200@700W``), or every one where either is
    left out. The next run at each of those batch sizes on those GPUs profiles the limits
    again: for a profile measured badly, or GPUs whose power curve changed (a new driver, other
    cooling). Runs that train at a limit now keep it."""
    forgotten = await service.forget_power_profiles(job_id, profile, batch_size)
    return ForgottenPowerProfiles(
        job_id=job_id,
        forgotten=[ForgottenPowerProfile(profile=p, batch_size=b) for p, b in forgotten],
    )


@router.delete(
    "/jobs/{job_id:path}/memory_caps",
    response_model=ForgottenMemoryCaps,
    responses=NO_SUCH_JOB,
)
async def forget_memory_caps(
    job_id: JobIdPath,
    service: Service,
    profile: ProfileQuery = None,
) -> ForgottenMemoryCaps:
    """Forget the job's memory caps and doubts: those of the hardware ``profile`` (e.g.
    ``1xNVIDIA H200@700W``), or every one where it is left out. Runs there are dispatched at
    every batch size again, and the sizes that trained there are taken to fit again; the next
    that runs out of memory sets the cap anew. For an out-of-memory error that was a bug of the
    script's, fixed since. The trials that ran out stay ``infeasible`` (or ``released``) in the
    history."""
    caps, doubts = await service.forget_memory_caps(job_id, profile)
    return ForgottenMemoryCaps(job_id=job_id, forgotten=caps, forgotten_doubts=doubts)


@router.get("/jobs/{job_id:path}", response_model=JobView, responses=NO_SUCH_JOB)
async def get_job(
    db: Db,
    job_id: Annotated[str, Path(min_length=1, max_length=MAX_ID_LENGTH), Printable],
    limit: Annotated[int, Query(ge=0, le=1000)] = 50,
    before: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
) -> JobView:
    """A job's config, stage, per-batch-size statistics and posterior, best batch size and its
    most recent trials (``limit`` of them, numbered below ``before`` when given)."""
    return await job_view(db, job_id, limit, before)


@router.post("/trials/heartbeat", response_model=TrialView, responses=NO_SUCH_TRIAL)
async def heartbeat(
    trial: TrialId,
    service: Service,
    resumed: Annotated[bool, Query(description="The run resumed from a checkpoint.")] = False,
) -> TrialView:
    """Renew a running trial's lease; a client calls it while it trains, and with ``resumed``
    as its run resumes from a checkpoint (the epochs it reports next hold the restart's
    one-off work, a compile say, and are judged as a run's first epoch is)."""
    return trial_view(await service.heartbeat(trial, resumed=resumed))


@router.post("/trials/release", response_model=TrialView, responses=NO_SUCH_TRIAL)
async def release(trial: ReleasedTrial, service: Service) -> TrialView:
    """Release a trial whose run ended for a reason that is not its batch size's (a
    misconfigured script, the framework's own epoch limit below the job's): an open trial
    becomes ``released``, with the ``message`` given (why) as its message, and counts nothing
    against its batch size; an ended one is left as it is. With ``out_of_memory``, its run ran
    out of memory at a size that had trained on its GPUs: the next run of that size there is
    tried first, and one that runs out again sets the memory cap."""
    released = await service.release_trial(trial, trial.message, out_of_memory=trial.out_of_memory)
    return trial_view(released)


@router.post(
    "/trials/infeasible",
    response_model=TrialView,
    responses={
        **NO_SUCH_TRIAL,
        409: {"description": "A micro-batch above the batch size, or a trial that ended"},
    },
)
async def infeasible(trial: InfeasibleTrial, service: Service) -> TrialView:
    """Mark a trial whose run ran out of accelerator memory at its batch size: an open trial
    becomes ``infeasible``, and no run on its hardware profile is dispatched at that batch size
    or above again (other profiles keep them), except to runs that accumulate gradients;
    nothing is counted against the batch size's convergence. An ended trial is left as it is.

    With ``micro_batch_size`` (a run that accumulates gradients ran out at that micro-batch),
    the profile's memory cap comes down to it and the trial goes on; so it does for the run of an
    ``infeasible`` trial that went on at smaller sizes of its framework's (the HF Trainer's
    ``auto_find_batch_size``) and ran out at that one too, and for a trial that ended, where its
    run said it accumulates (a client delivers late what the server could not hear)."""
    trial_id = TrialId(
        job_id=trial.job_id, batch_size=trial.batch_size, trial_number=trial.trial_number
    )
    return trial_view(await service.trial_out_of_memory(trial_id, trial.micro_batch_size))


@router.post(
    "/trials/power_profile",
    response_model=PowerProfileView,
    responses={
        **NO_SUCH_TRIAL,
        409: {
            "description": "The job does not profile power limits, the trial ended or sent "
            "another profile, or a limit is above its GPUs' power"
        },
    },
)
async def power_profile(report: PowerProfileReport, service: Service) -> PowerProfileView:
    """Send what a run measured at each GPU power limit in the first epoch of its batch size
    (the dispatch answered ``power_profiling``): the first profile of a (hardware profile, batch
    size) is kept, and the answer says the limit to train at, whose epoch costs least at the
    job's ``eta_knob``."""
    return await service.power_profile(report)
