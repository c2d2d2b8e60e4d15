"""The stored rows and what they read as: the tables, the policy's view of a job row and a trial
row (`job_state`, `trial_state`) and back, and `StoredJob` and `StoredTrial`, what the
repository returns. Rows stay in this package."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, TypeAlias, cast

from pydantic import ValidationError
from sqlalchemy import Table, bindparam, update
from sqlalchemy.engine import Row

from zeus_bso.policy import (
    LIFECYCLE,
    BatchSizeStats,
    BestRun,
    ByProfile,
    EpochSums,
    Event,
    JobState,
    Prior,
    PriorMode,
    TrialKind,
    TrialState,
    TrialStatus,
)
from zeus_bso.policy.curves import as_curve
from zeus_bso.spec import GpuConfig, profile_key
from zeus_bso_server.errors import UnreadableJobError
from zeus_bso_server.store.tables import JobRow, PowerProfileRow, TrialRow, db_now

logger = logging.getLogger(__name__)


jobs = cast(Table, JobRow.__table__)


trials = cast(Table, TrialRow.__table__)


power_profiles = cast(Table, PowerProfileRow.__table__)


UPDATE_JOB = update(jobs).where(jobs.c.job_id == bindparam("key_job_id"))
"""An update of the job row whose id is the parameter ``key_job_id``; each statement that
changes a job's columns adds its ``values``."""


Record: TypeAlias = Row[Any]
"""A stored row; its columns read as attributes. Rows stay in this module: what it returns are
`StoredJob`, `StoredTrial` and `Spent`, mapped column by column."""


@dataclass(frozen=True, slots=True)
class StoredJob:
    """A job as stored: its identity, configuration and stage, the policy's state, and when it
    was created and last changed."""

    job_id: str
    job_id_prefix: str
    config: dict[str, Any]
    """The configuration as stored (JSON; validated by the service)."""
    state: JobState
    created_at: float
    updated_at: float

    @property
    def stage(self) -> str:
        """The policy's stage of the job (`zeus_bso.policy.Stage`)."""
        return self.state.stage.value


@dataclass(frozen=True, slots=True)
class StoredTrial:
    """A trial as stored: the policy's view, its job, its times and its lease."""

    job_id: str
    trial: TrialState
    curve_kept: bool
    """Whether the row holds a curve (a trial stored before curves were has none)."""
    created_at: float
    updated_at: float
    lease_expires_at: float | None
    run_key: str | None = None
    """The name of the run that started it (``run_key``), if it gave one."""
    model_parameters: int | None = None
    """The parameters its run trained, as its reports said them (None: not said)."""
    precision: str | None = None
    """The precision its run trained in, as its reports said it (None: not said)."""
    techniques: str | None = None
    """The ways of training its run used, joined by commas, as its reports said them (empty:
    none; None: not said)."""


@dataclass(frozen=True, slots=True)
class Ending:
    """How an ended trial ended: its status, its batch size and its message (why its run
    ended, where it said)."""

    status: TrialStatus
    batch_size: int
    message: str | None


def stored_job(row: Record) -> StoredJob:
    """The job of ``row``.

    Raises:
        UnreadableJobError: its stored state cannot be read.
    """
    try:
        state = job_state(row)
        if not isinstance(row.config, dict):
            raise TypeError(f"its configuration is a {type(row.config).__name__}")
    except (TypeError, ValueError, KeyError, AttributeError, ValidationError) as err:
        raise UnreadableJobError(row.job_id, f"{type(err).__name__}: {err}") from err
    return StoredJob(
        job_id=row.job_id,
        job_id_prefix=row.job_id_prefix,
        config=row.config,
        state=state,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def readable_jobs(rows: Iterable[Record]) -> tuple[list[StoredJob], list[str]]:
    """The jobs of ``rows`` that can be read, and the ids of those that cannot (each logged)."""
    found, unreadable = [], []
    for row in rows:
        try:
            found.append(stored_job(row))
        except UnreadableJobError as err:
            logger.error("%s", err.message)
            unreadable.append(err.job_id)
    return found, unreadable


def stored_trial(row: Record) -> StoredTrial:
    return StoredTrial(
        job_id=row.job_id,
        trial=trial_state(row),
        curve_kept=row.curve is not None,
        created_at=row.created_at,
        updated_at=row.updated_at,
        lease_expires_at=row.lease_expires_at,
        run_key=row.run_key,
        model_parameters=row.model_parameters,
        precision=row.precision,
        techniques=row.techniques,
    )


def job_state(job: Record) -> JobState:
    """The policy's view of a job row."""
    per_size = (batch_size_stats(size, values) for size, values in job.stats.items())
    return JobState(
        next_trial_number=job.next_trial_number,
        arms=tuple(job.arms) if job.arms is not None else None,
        bandit_start=job.bandit_start,
        stats={s.batch_size: s for s in sorted(per_size, key=lambda s: s.batch_size)},
        best=BestRun(job.best_batch_size, job.best_cost) if job.best_cost is not None else None,
        profiles={profile_key(g): g for g in map(GpuConfig.model_validate, job.profiles or ())},
        by_profile=by_profile(job.by_profile) if job.by_profile is not None else None,
        pinned=job.pinned_batch_size,
        memory_caps={str(p): int(b) for p, b in (job.memory_caps or {}).items()},
        memory_doubts={str(p): int(b) for p, b in (job.memory_doubts or {}).items()},
        prior=prior_of(job.prior) if job.prior is not None else None,
    )


def prior_json(prior: Prior) -> dict[str, Any]:
    """A prior as the job row keeps it (batch sizes as keys are strings in JSON)."""
    return {
        "parent": prior.parent,
        "mode": prior.mode.value,
        "costs": {str(b): c for b, c in sorted(prior.costs.items())},
        "hopeless": sorted(prior.hopeless),
        "epoch_costs": {str(b): c for b, c in sorted(prior.epoch_costs.items())},
        "epochs": {str(b): e for b, e in sorted(prior.epochs.items())},
    }


def prior_of(stored: dict[str, Any]) -> Prior:
    return Prior(
        costs={int(b): float(c) for b, c in stored["costs"].items()},
        hopeless=frozenset(int(b) for b in stored["hopeless"]),
        epoch_costs={int(b): float(c) for b, c in stored["epoch_costs"].items()},
        mode=PriorMode(stored["mode"]),
        epochs={int(b): float(e) for b, e in stored["epochs"].items()},
        parent=stored.get("parent"),
    )


def by_profile(stored: dict[str, Any]) -> ByProfile:
    epochs = {
        (str(p), int(b)): EpochSums(float(e), float(t), int(n))
        for p, b, e, t, n in stored["epochs"]
    }
    return ByProfile(epochs, {str(p): int(n) for p, n in stored["bandit_trials"].items()})


def by_profile_json(by: ByProfile) -> dict[str, Any]:
    epochs = [[p, b, s.energy, s.time, s.trials] for (p, b), s in sorted(by.epochs.items())]
    return {"epochs": epochs, "bandit_trials": dict(sorted(by.bandit_trials.items()))}


def trial_state(trial: Record) -> TrialState:
    """The policy's view of a trial row (each field from its column, by name)."""
    return TrialState(
        trial_number=trial.trial_number,
        batch_size=trial.batch_size,
        kind=TrialKind(trial.kind),
        round=trial.round,
        status=TrialStatus(trial.status),
        epochs=trial.epochs,
        time=trial.time,
        energy=trial.energy,
        metric=trial.metric,
        cost=trial.cost,
        converged=trial.converged,
        message=trial.message,
        profile=trial.profile,
        curve=as_curve(trial.curve),
        accumulation_steps=trial.accumulation_steps,
        accumulates=trial.accumulates,
        power_profiling=trial.power_profiling,
        must_deliver=bool(trial.must_deliver),
        resumed_at_epoch=trial.resumed_at_epoch,
    )


def batch_size_stats(size: str, stored: dict[str, Any]) -> BatchSizeStats:
    """A batch size's statistics from the job row's ``stats`` entry (see `stats_json`)."""
    return BatchSizeStats(
        int(size),
        reports=stored["reports"],
        mean_cost=stored["mean_cost"],
        m2_cost=stored["m2_cost"],
        converged_count=stored["converged_count"],
        converged_cost_sum=stored["converged_cost_sum"],
        best_converged_cost=stored["best_converged_cost"],
        curves=tuple(as_curve(curve) for curve in stored.get("curves", ())),
        paid_sum=stored.get("paid_sum"),
    )


def stats_json(per_size: Iterable[BatchSizeStats]) -> dict[str, dict[str, Any]]:
    values = ((str(s.batch_size), asdict(s).items()) for s in per_size)
    return {
        size: {k: v for k, v in items if k != "batch_size" and (v or k != "curves")}
        for size, items in values
    }


def change(event: Event) -> tuple[Any, dict[str, Any]]:
    """The WHERE clause and the SET values of ``event``'s status change (the policy's
    `LIFECYCLE`), for a set-based UPDATE of trials."""
    change = LIFECYCLE[event]
    sources = trials.c.status.in_(sorted(s.value for s in change.sources))
    return sources, {"status": change.target.value, "updated_at": db_now()}


def trial_row(trial: TrialState) -> dict[str, Any]:
    """A trial's columns (the inverse of `trial_state`)."""
    return {
        "trial_number": trial.trial_number,
        "batch_size": trial.batch_size,
        "kind": trial.kind.value,
        "round": trial.round,
        "status": trial.status.value,
        "epochs": trial.epochs,
        "time": trial.time,
        "energy": trial.energy,
        "metric": trial.metric,
        "cost": trial.cost,
        "converged": trial.converged,
        "message": trial.message,
        "profile": trial.profile,
        "curve": [list(point) for point in trial.curve],
        "accumulates": trial.accumulates,
        "power_profiling": trial.power_profiling,
        "must_deliver": trial.must_deliver,
        "resumed_at_epoch": trial.resumed_at_epoch,
    }
