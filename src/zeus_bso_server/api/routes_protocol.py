"""The routes of the upstream Zeus batch size optimizer protocol: same paths, bodies, statuses."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from zeus_bso.spec import (
    EXTENSIONS_HEADER,
    GPU_FIELDS,
    INT32_MAX,
    MAX_ID_LENGTH,
    MAX_POWER_W,
    DispatchedTrial,
    EndedTrial,
    Extension,
    GpuConfig,
    Identifier,
    JobSpecFromClient,
    Printable,
    ReportResponse,
    TrainingResult,
)
from zeus_bso_server.api.deps import NO_SUCH_JOB, NO_SUCH_TRIAL, Service
from zeus_bso_server.api.errors import answers
from zeus_bso_server.errors import JobNotFoundError, TrialNotFoundError

SERVER_EXTENSIONS = ", ".join(extension.value for extension in Extension)
"""What this server declares in every dispatch answer (`zeus_bso.spec.EXTENSIONS_HEADER`)."""

router = APIRouter(tags=["zeus protocol"])

JobIdQuery = Annotated[str, Query(min_length=1, max_length=MAX_ID_LENGTH), Printable]


# OpenAPI links: how an answer's ids feed the next requests, from a registered job to its
# trials. The API reference shows them; property-based testing follows them (a request made of
# random ids finds no job or trial). They name the operation ids FastAPI derives from the routes.
_JOB_ID = {"job_id": "$response.body#/job_id"}
_TRIAL_ID = {
    **_JOB_ID,
    "trial_number": "$response.body#/trial_number",
    "batch_size": "$response.body#/batch_size",
}
JOB_LINKS: dict[str, Any] = {
    "NextBatchSize": {
        "operationId": "next_batch_size_jobs_batch_size_get",
        "parameters": _JOB_ID,
        "description": "Start a trial of this job.",
    },
    "GetJob": {
        "operationId": "get_job_api_jobs__job_id__get",
        "parameters": _JOB_ID,
        "description": "This job's state.",
    },
    "DeleteJob": {
        "operationId": "delete_job_jobs_delete",
        "parameters": _JOB_ID,
        "description": "Delete this job.",
    },
    "PinJob": {
        "operationId": "pin_api_jobs__job_id__pin_put",
        "parameters": _JOB_ID,
        "description": "Pin this job to a batch size.",
    },
    "UnpinJob": {
        "operationId": "unpin_api_jobs__job_id__pin_delete",
        "parameters": _JOB_ID,
        "description": "Unpin this job.",
    },
}
TRIAL_LINKS: dict[str, Any] = {
    "Report": {
        "operationId": "report_report_post",
        "requestBody": _TRIAL_ID,
        "description": "Report this trial's progress (the body's other fields are the run's).",
    },
    "Heartbeat": {
        "operationId": "heartbeat_api_trials_heartbeat_post",
        "requestBody": _TRIAL_ID,
        "description": "Renew this trial's lease.",
    },
    "EndTrial": {
        "operationId": "end_trial_trials_patch",
        "requestBody": _TRIAL_ID,
        "description": "End this trial.",
    },
    "ReleaseTrial": {
        "operationId": "release_api_trials_release_post",
        "requestBody": _TRIAL_ID,
        "description": "Release this trial (its run ended for a reason not its batch size's).",
    },
    "TrialInfeasible": {
        "operationId": "infeasible_api_trials_infeasible_post",
        "requestBody": _TRIAL_ID,
        "description": "Mark this trial infeasible (its run ran out of memory).",
    },
}


def _json(model: BaseModel) -> Response:
    # The hot routes serialise their (already validated) answer directly; the declared
    # response_model still documents it in the OpenAPI schema.
    return Response(model.model_dump_json(), media_type="application/json")


@router.post(
    "/jobs",
    response_model=JobSpecFromClient,
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {
            "description": "A job with this id and the same configuration exists",
            "links": JOB_LINKS,
        },
        201: {"description": "The job was registered", "links": JOB_LINKS},
        409: {"description": "A job with this id exists with another configuration"},
    },
)
async def register_job(
    job: JobSpecFromClient, response: Response, service: Service
) -> JobSpecFromClient:
    """Register a job, or confirm that an identical one is registered."""
    registered = await service.register(job)
    if not registered.created:
        response.status_code = status.HTTP_200_OK
    return registered.job


RunKeyQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_ID_LENGTH,
        description=(
            "Extension: the run's name, the same across its restarts. A run that asks again "
            "with it continues its open trial instead of starting a new one."
        ),
    ),
    Printable,
]


GPU_QUERY = (
    "Extension, with the other two GPU fields or none: the run trains on these GPUs (a hardware "
    "profile; the job learns it if it is new). Without them, on those registered last."
)
GpuModelQuery = Annotated[Identifier | None, Query(description=GPU_QUERY)]
AccumulateQuery = Annotated[
    bool,
    Query(
        description=(
            "Extension: the run accumulates gradients, so it may get a batch size at or above "
            "its hardware profile's memory cap (it trains it in micro-batches below the cap)."
        )
    ),
]
PowerLimitsQuery = Annotated[
    bool,
    Query(
        description=(
            "Extension: the run opted into GPU power limits (it names its GPUs too): the answer "
            "says the limit to train at (power_limit), or to profile the limits in the first "
            "epoch (power_profiling) and send them to POST /api/trials/power_profile."
        )
    ),
]
DeliverQuery = Annotated[
    bool,
    Query(
        description=(
            "Extension: the run must deliver a model (the last attempt of a recurrence): it "
            "stops only at the target or max_epochs, never on its cost, as a pinned job's runs."
        )
    ),
]
GpuCountQuery = Annotated[int | None, Query(gt=0, le=INT32_MAX, description=GPU_QUERY)]
MaxPowerQuery = Annotated[
    float | None, Query(gt=0, le=MAX_POWER_W, allow_inf_nan=False, description=GPU_QUERY)
]


def _gpu_of(
    gpu_model: str | None, number_of_gpus: int | None, max_power: float | None
) -> GpuConfig | None:
    values = {"gpu_model": gpu_model, "number_of_gpus": number_of_gpus, "max_power": max_power}
    given = {name: value for name, value in values.items() if value is not None}
    if not given:
        return None
    if len(given) < len(GPU_FIELDS):
        raise RequestValidationError(
            [
                {
                    "loc": ("query", name),
                    "msg": "give all three GPU fields or none: " + ", ".join(GPU_FIELDS),
                    "type": "missing",
                }
                for name in GPU_FIELDS
                if name not in given
            ]
        )
    return GpuConfig.model_validate(given)


@router.get(
    "/jobs/batch_size",
    response_model=DispatchedTrial,
    responses={
        200: {
            "description": "The trial to run",
            "links": TRIAL_LINKS,
            "headers": {
                EXTENSIONS_HEADER: {
                    "description": "The protocol extensions this server speaks, "
                    "comma-separated (upstream Zeus's server sends none)",
                    "schema": {"type": "string", "example": SERVER_EXTENSIONS},
                }
            },
        },
        400: {"description": "Unknown job"},
        409: {"description": "No batch size converged"},
    },
)
@answers((JobNotFoundError, 400))
async def next_batch_size(
    job_id: JobIdQuery,
    service: Service,
    run_key: RunKeyQuery = None,
    gpu_model: GpuModelQuery = None,
    number_of_gpus: GpuCountQuery = None,
    max_power: MaxPowerQuery = None,
    accumulate: AccumulateQuery = False,
    power_limits: PowerLimitsQuery = False,
    deliver: DeliverQuery = False,
) -> Response:
    """Start a trial: the batch size to train with and the trial's number (or, for a run that
    names itself with ``run_key``, continue its open trial)."""
    gpu = _gpu_of(gpu_model, number_of_gpus, max_power)
    trial = await service.next_trial(
        job_id, run_key, gpu, accumulate, power_limits, deliver=deliver
    )
    # A new trial's answer is upstream's exactly; a resumed one's adds what the run reported,
    # and one to a client that names its GPUs (ours) whether the size ran on them.
    left_out = None if gpu is not None else {"memory_unknown", "memory_cap"}
    if power_limits:
        # ``power_profiling`` said even when false: a client from before the extensions were
        # declared tells this server from one that does not choose power limits by it.
        answer = trial.model_dump(mode="json", exclude_defaults=True, exclude=left_out)
        answer["power_profiling"] = trial.power_profiling
        body = json.dumps(answer)
    else:
        body = trial.model_dump_json(exclude_defaults=True, exclude=left_out)
    # What this server speaks, declared (a client need not guess it from the fields it sees).
    declared = {EXTENSIONS_HEADER: SERVER_EXTENSIONS}
    return Response(body, media_type="application/json", headers=declared)


@router.post(
    "/report",
    response_model=ReportResponse,
    responses={400: {"description": "Unknown job or trial"}},
)
@answers((JobNotFoundError, 400), (TrialNotFoundError, 400))
async def report(result: TrainingResult, service: Service) -> Response:
    """Report cumulative time, energy and the metric after an epoch; says whether to stop."""
    return _json(await service.report(result))


@router.patch("/trials", responses=NO_SUCH_TRIAL)
async def end_trial(trial: EndedTrial, service: Service) -> None:
    """End a trial. One that never sent a final report becomes failed, with the ``message``
    given (why its run ended) as its message."""
    await service.end_trial(trial, trial.message)


@router.delete("/jobs", responses=NO_SUCH_JOB)
async def delete_job(job_id: JobIdQuery, service: Service) -> None:
    """Delete a job with all its trials."""
    await service.delete_job(job_id)
