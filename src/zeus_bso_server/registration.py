"""A job's registration, and the look-ups every unit of work starts with (the job, locked
or not, and a trial of it)."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from zeus_bso import policy
from zeus_bso.spec import (
    ADJUSTABLE_SETTINGS,
    GPU_FIELDS,
    POWER_SETTINGS,
    STOP_SETTINGS,
    CreatedJob,
    JobSpecFromClient,
    TrialId,
    gpu_of,
    profile_key,
)
from zeus_bso_server.errors import (
    JobConfigMismatchError,
    JobNotFoundError,
    TrialNotFoundError,
)
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.repository import StoredJob, StoredTrial

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Registered:
    """Outcome of a registration."""

    job: JobSpecFromClient
    created: bool


def config_of(job: StoredJob) -> CreatedJob:
    """The validated configuration stored with a job."""
    return CreatedJob.model_validate(job.config)


def _differences(stored: CreatedJob, sent: JobSpecFromClient) -> list[tuple[str, str]]:
    """The fields the client sent that differ from the registered job's, each with a sentence.

    Fields the client left out are not compared: an older client that does not know an option
    of ours (or a newer default of it) still finds its job.
    """
    fields = sorted(sent.model_fields_set - {"job_id"})
    return [
        (name, f"{name}: {getattr(stored, name)!r} registered, {getattr(sent, name)!r} sent")
        for name in fields
        if getattr(stored, name) != getattr(sent, name)
    ]


def register(conn: Connection, spec: JobSpecFromClient) -> Registered:
    """One registration's unit of work (`BatchSizeService.register`)."""
    if spec.job_id is None:
        while True:  # a clash of 32 random bits is rare; draw again if it happens
            job = spec.model_copy(update={"job_id": f"{spec.job_id_prefix}-{secrets.token_hex(4)}"})
            if _insert(conn, job):
                logger.info("registered job %s", job.job_id)
                return Registered(job, True)
    # The row is locked before anything is written: a registration on other GPUs changes it.
    existing = repo.get_job(conn, spec.job_id, lock=True)
    locked = existing is not None
    if existing is None:
        if _insert(conn, spec):
            logger.info("registered job %s", spec.job_id)
            return Registered(spec, True)
        # A concurrent registration created it. Not locked here: on MySQL the INSERT holds a
        # shared lock on that row, and losers of the race that each upgraded it would
        # deadlock; a change of GPUs below locks it (rare: a race between two hardwares).
        existing = repo.get_job(conn, spec.job_id)
    assert existing is not None
    config = config_of(existing)
    differences = _differences(config, spec)
    if any(name not in (*GPU_FIELDS, *ADJUSTABLE_SETTINGS) for name, _ in differences):
        raise JobConfigMismatchError(
            "JobSpec doesn't match with existing jobSpec "
            f"({'; '.join(text for _, text in differences)}). Use a new job_id for different"
            f" configuration (a job may change only its GPUs: {', '.join(GPU_FIELDS)}; its"
            f" power settings: {', '.join(POWER_SETTINGS)}; and its stop settings:"
            f" {', '.join(STOP_SETTINGS)})"
        )
    if differences:  # the same job on other GPUs, or with other adjustable settings
        if not locked:  # read it again, under the lock
            existing = repo.get_job(conn, spec.job_id, lock=True)
            assert existing is not None
            config = config_of(existing)
        state = existing.state
        changed = {name for name, _ in differences if name in ADJUSTABLE_SETTINGS}
        if changed:  # the ones the client sent (an older client's defaults change nothing)
            settings = {name: getattr(spec, name) for name in sorted(changed)}
            config = config.model_copy(update=settings)
            logger.info("job %s now has %s", spec.job_id, settings)
            if "early_stop_reference" in changed:
                state = policy.with_stop_settings(config, state)
                repo.set_reference(conn, spec.job_id, state.best)
        gpu = gpu_of(spec)
        if gpu != gpu_of(config):  # their profile is the current one now
            config, state = policy.registered_on(config, state, gpu)
            logger.info("job %s now runs on %s", spec.job_id, profile_key(gpu))
        repo.set_profiles(
            conn, spec.job_id, config.model_dump(mode="json"), list(state.profiles.values())
        )
    return Registered(JobSpecFromClient.model_validate(config.model_dump()), False)


def _insert(conn: Connection, job: JobSpecFromClient) -> bool:
    assert job.job_id is not None
    config = CreatedJob.model_validate(job.model_dump()).model_dump(mode="json")
    return repo.insert_job_if_absent(conn, job.job_id, job.job_id_prefix, config)


def registered(job: StoredJob | None, job_id: str) -> tuple[StoredJob, CreatedJob]:
    """The (locked) job and its configuration; raises JobNotFoundError without one."""
    if job is None:
        raise JobNotFoundError(f"Unknown job({job_id}). Please register the job first")
    return job, config_of(job)


def stored_trial(conn: Connection, trial_id: TrialId) -> StoredTrial:
    stored = repo.get_trial(conn, trial_id.job_id, trial_id.trial_number)
    if stored is None or stored.trial.batch_size != trial_id.batch_size:
        raise TrialNotFoundError(f"Could not find the trial: {trial_id.model_dump_json()}")
    return stored
