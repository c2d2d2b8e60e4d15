"""Read-only views of jobs for the added routes (not part of the upstream protocol)."""

from __future__ import annotations

import math

from pydantic import BaseModel
from sqlalchemy.engine import Connection

from zeus_bso import policy
from zeus_bso.spec import CreatedJob
from zeus_bso_server.errors import JobNotFoundError
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.repository import Record


class JobSummary(BaseModel):
    """One line of the job list."""

    job_id: str
    job_id_prefix: str
    stage: str
    trials: int
    gpu_model: str
    number_of_gpus: int
    best_batch_size: int | None
    """The cheapest converged run's batch size (the early-stop reference), if any."""
    best_cost: float | None
    created_at: float
    updated_at: float


class BatchSizeView(BaseModel):
    """What the server knows of one batch size of a job."""

    batch_size: int
    is_arm: bool
    reports: int
    """Final reports of runs with this batch size (all time)."""
    converged: int
    mean_cost: float | None
    cost_std: float | None
    best_converged_cost: float | None
    observations: int
    """Observations the bandit uses (the last ``window_size`` reports with a window)."""
    posterior_mean_reward: float | None
    """Mean of the posterior over the mean reward (reward = -cost); arms only."""
    posterior_std: float | None
    """Its standard deviation (0: a single or constant observation; null: no information)."""


class TrialView(BaseModel):
    """One trial."""

    job_id: str
    trial_number: int
    batch_size: int
    kind: str
    round: int | None
    status: str
    epochs: int | None
    time: float | None
    energy: float | None
    metric: float | None
    cost: float | None
    converged: bool | None
    message: str | None
    created_at: float
    updated_at: float
    lease_expires_at: float | None

    @classmethod
    def of(cls, row: Record) -> TrialView:
        """View of a trial row."""
        return cls.model_validate(dict(row._mapping))


class JobView(BaseModel):
    """A job's config, stage, per-batch-size statistics and posterior, best batch size, trials."""

    job: CreatedJob
    stage: str
    arms: list[int] | None
    best_batch_size: int | None
    best_cost: float | None
    trial_count: int
    trials_by_status: dict[str, int]
    batch_sizes: list[BatchSizeView]
    trials: list[TrialView]
    """The most recent trials, newest first (see the ``limit`` and ``before`` parameters)."""
    created_at: float
    updated_at: float


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


async def job_summaries(
    db: Database, prefix: str | None, limit: int, offset: int
) -> list[JobSummary]:
    """Jobs ordered by id."""

    def work(conn: Connection) -> list[JobSummary]:
        return [_summary(r) for r in repo.list_jobs(conn, prefix, limit, offset)]

    return await db.read(work)


def _summary(row: Record) -> JobSummary:
    return JobSummary(
        job_id=row.job_id,
        job_id_prefix=row.job_id_prefix,
        stage=row.stage,
        trials=row.next_trial_number - 1,
        gpu_model=row.config["gpu_model"],
        number_of_gpus=row.config["number_of_gpus"],
        best_batch_size=row.best_batch_size,
        best_cost=row.best_cost,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def job_view(db: Database, job_id: str, limit: int, before: int | None) -> JobView:
    """Everything the server knows of one job.

    Raises:
        JobNotFoundError: no such job.
    """
    return await db.read(lambda conn: _job_view(conn, job_id, limit, before))


def _batch_size_view(
    row: policy.BatchSizeStats, used: policy.CostStats, posterior: policy.Posterior | None
) -> BatchSizeView:
    running = row.costs
    return BatchSizeView(
        batch_size=row.batch_size,
        is_arm=posterior is not None,
        reports=row.reports,
        converged=row.converged_count,
        mean_cost=row.mean_cost if row.reports else None,
        cost_std=math.sqrt(running.variance) if row.reports else None,
        best_converged_cost=row.best_converged_cost,
        observations=used.count,
        posterior_mean_reward=posterior.mean if posterior else None,
        posterior_std=_finite_or_none(posterior.std) if posterior else None,
    )


def _job_view(conn: Connection, job_id: str, limit: int, before: int | None) -> JobView:
    row = repo.get_job(conn, job_id)
    if row is None:
        raise JobNotFoundError(f"Job {job_id} not found")
    config = CreatedJob.model_validate(row.config)
    state = repo.job_state(row)
    stats = state.stats
    # What the policy decides with: the same history (windowed or running statistics) and the
    # job's noise model.
    history = policy.history_of(config, state, (), repo.windowed(conn, job_id, config, state))
    used = {b: history.observations.get(b, policy.CostStats()) for b in stats}
    posteriors = policy.arm_posteriors(config, state.arms or (), used)
    best = state.best
    return JobView(
        job=config,
        stage=row.stage,
        arms=row.arms,
        best_batch_size=best.batch_size if best else None,
        best_cost=best.cost if best else None,
        trial_count=row.next_trial_number - 1,
        trials_by_status=repo.count_trials_by_status(conn, job_id),
        batch_sizes=[
            _batch_size_view(s, used[s.batch_size], posteriors.get(s.batch_size))
            for s in stats.values()
        ],
        trials=[TrialView.of(t) for t in repo.recent_trials(conn, job_id, limit, before)],
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
