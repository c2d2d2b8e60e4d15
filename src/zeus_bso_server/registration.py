"""A job's registration, and the look-ups every unit of work starts with (the job, locked
or not, and a trial of it)."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection

from zeus_bso import policy
from zeus_bso.spec import (
    ADJUSTABLE_SETTINGS,
    GPU_FIELDS,
    POWER_SETTINGS,
    SEED_SETTINGS,
    STOP_SETTINGS,
    CreatedJob,
    JobSpecFromClient,
    TrialId,
    gpu_of,
    new_job_refused,
    profile_key,
)
from zeus_bso_server.errors import (
    JobConfigMismatchError,
    JobNotFoundError,
    NewJobRefusedError,
    PriorError,
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
    of ours (or a newer default of it) still finds its job; nor are where a new job's prior
    comes from (`SEED_SETTINGS`): a job that exists keeps what it learned.
    """
    fields = sorted(sent.model_fields_set - {"job_id", *SEED_SETTINGS})
    return [
        (name, f"{name}: {getattr(stored, name)!r} registered, {getattr(sent, name)!r} sent")
        for name in fields
        if getattr(stored, name) != getattr(sent, name)
    ]


def register(conn: Connection, spec: JobSpecFromClient) -> Registered:
    """One registration's unit of work (`BatchSizeService.register`).

    Raises:
        NewJobRefusedError: the job is new and its settings cannot make a working job
            (`zeus_bso.spec.new_job_refused`), or ``prior_from`` names no job, or one that
            cannot seed it (`PriorError`).
        JobConfigMismatchError: the id exists with another configuration.
    """
    if spec.job_id is None:
        seed = _new_job_seed(conn, spec, "")
        while True:  # a clash of 32 random bits is rare; draw again if it happens
            job = spec.model_copy(update={"job_id": f"{spec.job_id_prefix}-{secrets.token_hex(4)}"})
            if _insert(conn, job, seed):
                logger.info("registered job %s", job.job_id)
                return Registered(job, True)
    # The row is locked before anything is written: a registration on other GPUs changes it.
    existing = repo.get_job(conn, spec.job_id, lock=True)
    locked = existing is not None
    if existing is None:
        if _insert(conn, spec, _new_job_seed(conn, spec, spec.job_id)):
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


@dataclass(frozen=True)
class Seed:
    """What a new job starts from: the prior of the job ``prior_from`` names (None: none), and,
    in trust mode (the same model and data pipeline), that job's memory caps by hardware
    profile: the sizes that ran out of memory there run out for this job too."""

    prior: policy.Prior | None = None
    memory_caps: dict[str, int] = field(default_factory=dict)


def _insert(conn: Connection, job: JobSpecFromClient, seed: Seed) -> bool:
    assert job.job_id is not None
    config = CreatedJob.model_validate(job.model_dump()).model_dump(mode="json")
    inserted = repo.insert_job_if_absent(conn, job.job_id, job.job_id_prefix, config)
    prior = seed.prior
    if inserted and prior is not None:
        repo.set_prior(conn, job.job_id, prior)
        logger.info("job %s starts from job %s's curve (%s)", job.job_id, prior.parent, prior.mode)
    if inserted and seed.memory_caps:
        repo.set_memory_caps(conn, job.job_id, seed.memory_caps)
        logger.info(
            "job %s takes job %s's memory caps: %s", job.job_id, job.prior_from, seed.memory_caps
        )
    return inserted


def _new_job_seed(conn: Connection, spec: JobSpecFromClient, job_id: str) -> Seed:
    """A new job's check and its seed: its settings must make a working job (both ways a new
    job is registered, with an id or with a prefix, come through here before it is written),
    and the prior ``prior_from`` gives it (none: none asked, or ``auto`` found none), with a
    trusted parent's memory caps.

    Raises:
        NewJobRefusedError: the settings cannot make a working job
            (`zeus_bso.spec.new_job_refused`: ``beta_knob`` at 1 or below, trust mode without
            ``prior_from``, or ``auto`` in trust mode).
        PriorError: ``prior_from`` names no job, the job itself, or one with no converged run
            at a batch size of this job.
    """
    if (refused := new_job_refused(spec)) is not None:
        raise NewJobRefusedError(refused)
    named = spec.prior_from
    if named is None:
        return Seed()
    if named == "auto":  # the prefix's job updated last that learned something; check mode
        for sibling in repo.latest_of_prefix(conn, spec.job_id_prefix, job_id):
            found = _learned(conn, sibling, policy.PriorMode.CHECK, spec.batch_sizes)
            if found is not None:
                return Seed(found)
        return Seed()
    if named == job_id:
        raise PriorError(f"prior_from names the job itself ({named}): name a related job")
    parent = repo.get_job(conn, named)
    if parent is None:
        raise PriorError(
            f"prior_from {named!r} names no job on this server: give the id of a job that "
            "`zeus-bso jobs list` shows, or 'auto' (the job of the same prefix updated last)"
        )
    mode = policy.PriorMode(spec.prior_mode)
    found = _learned(conn, parent, mode, spec.batch_sizes)
    if found is None:
        raise PriorError(
            f"job {named} has no converged run at a batch size of this job yet: seed from it "
            "once it has one, or register without prior_from (the job starts cold)"
        )
    trusted = mode is policy.PriorMode.TRUST
    return Seed(found, dict(parent.state.memory_caps) if trusted else {})


def _learned(
    conn: Connection, parent: StoredJob, mode: policy.PriorMode, sizes: list[int]
) -> policy.Prior | None:
    """What ``parent`` learned, as a prior for a job of ``sizes`` (None: nothing of them)."""
    config = config_of(parent)
    base = next(iter(parent.state.profiles.values()), gpu_of(config))
    prior = policy.learned_prior(
        parent.job_id,
        parent.state.stats,
        repo.trials_of(conn, parent.job_id),
        mode,
        price=lambda energy, time: policy.zeus_cost(energy, time, config.eta_knob, base.max_power),
        profile=profile_key(base),
    )
    if prior is None or prior.best(sizes) is None:
        return None
    return prior


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
