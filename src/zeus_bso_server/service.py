"""What each request does: lock the job row, load its history, ask the policy, store the result.

The algorithm lives in `zeus_bso.policy`; this module only moves data between it and the store,
one transaction per call.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from zeus_bso import policy
from zeus_bso.policy import JobHistory, Stage, TrialStatus
from zeus_bso.spec import CreatedJob, JobSpecFromClient, ReportResponse, TrainingResult, TrialId
from zeus_bso_server.errors import (
    JobConfigMismatchError,
    JobNotFoundError,
    ReportMismatchError,
    TrialNotFoundError,
    UnknownJobError,
    UnknownTrialError,
)
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.tables import BatchSizeStatsRow, JobRow, TrialRow, db_now

logger = logging.getLogger(__name__)

LEASE_EPOCHS = 3.0
"""After a report, a trial's lease covers at least this many of its mean epoch times."""


@dataclass(frozen=True, slots=True)
class Registered:
    """Outcome of a registration."""

    job: JobSpecFromClient
    created: bool


def _config_of(job: JobRow) -> CreatedJob:
    return CreatedJob.model_validate(job.config)


def _comparable(job: JobSpecFromClient | CreatedJob) -> dict[str, object]:
    return job.model_dump(mode="json", exclude={"job_id"})


class BatchSizeService:
    """The operations behind the HTTP routes."""

    def __init__(self, db: Database, lease_seconds: float) -> None:
        self.db = db
        self.lease_seconds = lease_seconds

    async def register(self, spec: JobSpecFromClient) -> Registered:
        """Register a job, or confirm that an identical one exists.

        Raises:
            JobConfigMismatchError: the id exists with another configuration.
        """
        async with self.db.write() as session:
            if spec.job_id is not None:
                job = spec
                created = await self._insert(session, job)
            else:
                while True:  # a clash of 32 random bits is rare; try again if it happens
                    job_id = f"{spec.job_id_prefix}-{secrets.token_hex(4)}"
                    job = spec.model_copy(update={"job_id": job_id})
                    created = await self._insert(session, job)
                    if created:
                        break
            if created:
                logger.info("registered job %s", job.job_id)
                return Registered(job, True)
            assert job.job_id is not None
            existing = await repo.get_job(session, job.job_id)
            assert existing is not None
            if _comparable(_config_of(existing)) != _comparable(job):
                raise JobConfigMismatchError(
                    "JobSpec doesn't match with existing jobSpec. "
                    "Use a new job_id for different configuration"
                )
            return Registered(JobSpecFromClient.model_validate(existing.config), False)

    @staticmethod
    async def _insert(session: AsyncSession, job: JobSpecFromClient) -> bool:
        assert job.job_id is not None
        config = CreatedJob.model_validate(job.model_dump()).model_dump(mode="json")
        return await repo.insert_job_if_absent(
            session, job.job_id, job.job_id_prefix, config, Stage.PRUNING.value
        )

    async def _locked_job(self, session: AsyncSession, job_id: str) -> tuple[JobRow, CreatedJob]:
        job = await repo.get_job(session, job_id, lock=True)
        if job is None:
            raise UnknownJobError(f"Unknown job({job_id}). Please register the job first")
        return job, _config_of(job)

    async def next_trial(self, job_id: str) -> TrialId:
        """Start a trial: choose its batch size and give it the next trial number.

        Raises:
            UnknownJobError: no such job.
            NoConvergedBatchSizeError: pruning found no batch size that converges.
        """
        async with self.db.write() as session:
            job, config = await self._locked_job(session, job_id)
            await repo.expire_leases(session, job_id)
            history = await self._history(session, job, config)
            number = job.next_trial_number
            dispatch = policy.decide(config, history, policy.rng_for(config, number))
            session.add(
                TrialRow(
                    job_id=job_id,
                    trial_number=number,
                    batch_size=dispatch.batch_size,
                    kind=dispatch.kind.value,
                    round=dispatch.round,
                    status=TrialStatus.DISPATCHED.value,
                    lease_expires_at=db_now() + self.lease_seconds,
                )
            )
            job.next_trial_number = number + 1
            job.updated_at = db_now()
            if dispatch.arms is not None and job.arms is None:
                job.arms = list(dispatch.arms)
                job.stage = Stage.BANDIT.value
                logger.info("job %s enters the bandit stage with arms %s", job_id, dispatch.arms)
            return TrialId(job_id=job_id, batch_size=dispatch.batch_size, trial_number=number)

    async def _history(self, session: AsyncSession, job: JobRow, config: CreatedJob) -> JobHistory:
        rows = await repo.stats_rows(session, job.job_id)
        best = repo.best_run(rows)
        if job.arms is None:
            return JobHistory(
                arms=None, explorations=await repo.explorations(session, job.job_id), best=best
            )
        arms = tuple(job.arms)
        if config.window_size > 0:
            observations = await repo.windowed_costs(session, job.job_id, arms, config.window_size)
        else:
            observations = {
                r.batch_size: policy.CostStats(r.count, r.mean_cost, r.m2_cost) for r in rows
            }
        return JobHistory(arms=arms, observations=observations, best=best)

    async def report(self, result: TrainingResult) -> ReportResponse:
        """Record a report and say whether the run stops.

        Raises:
            UnknownJobError, UnknownTrialError: no such job or trial.
            ReportMismatchError: the report contradicts the trial.
        """
        async with self.db.write() as session:
            job, config = await self._locked_job(session, result.job_id)
            trial = await repo.get_trial(session, result.job_id, result.trial_number)
            if trial is None or trial.batch_size != result.batch_size:
                raise UnknownTrialError(f"Unknown trial {result.model_dump_json()}")
            if trial.status == TrialStatus.REPORTED.value:
                return ReportResponse(
                    stop_train=True,
                    converged=bool(trial.converged),
                    message=f"Result for this trial({trial.trial_number}) is already reported.",
                )
            if trial.epochs is not None and result.current_epoch < trial.epochs:
                raise ReportMismatchError(
                    f"current_epoch {result.current_epoch} is below the {trial.epochs} epochs "
                    f"already reported for trial {trial.trial_number}; report cumulative values"
                )
            verdict = policy.judge_report(
                config,
                batch_size=result.batch_size,
                time=result.time,
                energy=result.energy,
                metric=result.metric,
                current_epoch=result.current_epoch,
                best_cost=await repo.best_converged_cost(session, job.job_id),
            )
            trial.epochs = result.current_epoch
            trial.time = result.time
            trial.energy = result.energy
            trial.metric = result.metric
            trial.cost = verdict.cost
            trial.updated_at = db_now()
            if not verdict.stop:
                # A client that reports is alive: renew (or revive) its lease.
                trial.status = TrialStatus.DISPATCHED.value
                epoch_time = result.time / result.current_epoch
                lease = max(self.lease_seconds, LEASE_EPOCHS * epoch_time)
                trial.lease_expires_at = db_now() + lease
            else:
                trial.status = TrialStatus.REPORTED.value
                trial.converged = verdict.converged
                trial.message = verdict.message
                trial.lease_expires_at = None
                await self._add_observation(session, trial, verdict)
            return ReportResponse(
                stop_train=verdict.stop, converged=verdict.converged, message=verdict.message
            )

    @staticmethod
    async def _add_observation(
        session: AsyncSession, trial: TrialRow, verdict: policy.Verdict
    ) -> None:
        stats = await session.get(BatchSizeStatsRow, (trial.job_id, trial.batch_size))
        assert stats is not None, "every batch size gets a statistics row at registration"
        updated = policy.CostStats(stats.count, stats.mean_cost, stats.m2_cost).add(verdict.cost)
        stats.count, stats.mean_cost, stats.m2_cost = updated.count, updated.mean, updated.m2
        if verdict.converged:
            stats.converged_count += 1
            if stats.best_converged_cost is None or verdict.cost < stats.best_converged_cost:
                stats.best_converged_cost = verdict.cost

    async def end_trial(self, trial_id: TrialId) -> None:
        """End a trial; one that never sent its final report becomes failed.

        Raises:
            TrialNotFoundError: no such trial.
        """
        async with self.db.write() as session:
            trial = await self._locked_trial(session, trial_id)
            if trial.status in (TrialStatus.DISPATCHED.value, TrialStatus.ABANDONED.value):
                trial.status = TrialStatus.FAILED.value
                trial.lease_expires_at = None
                trial.updated_at = db_now()

    async def heartbeat(self, trial_id: TrialId) -> TrialRow:
        """Renew a running trial's lease (and revive an abandoned one). Returns the trial.

        Raises:
            TrialNotFoundError: no such trial.
        """
        async with self.db.write() as session:
            trial = await self._locked_trial(session, trial_id)
            if trial.status in (TrialStatus.DISPATCHED.value, TrialStatus.ABANDONED.value):
                epoch_time = (trial.time or 0.0) / trial.epochs if trial.epochs else 0.0
                lease = max(self.lease_seconds, LEASE_EPOCHS * epoch_time)
                await session.execute(
                    update(TrialRow)
                    .where(
                        TrialRow.job_id == trial.job_id,
                        TrialRow.trial_number == trial.trial_number,
                    )
                    .values(
                        status=TrialStatus.DISPATCHED.value,
                        lease_expires_at=db_now() + lease,
                        updated_at=db_now(),
                    )
                )
                await session.refresh(trial)
            return trial

    async def _locked_trial(self, session: AsyncSession, trial_id: TrialId) -> TrialRow:
        job = await repo.get_job(session, trial_id.job_id, lock=True)
        trial = None
        if job is not None:
            trial = await repo.get_trial(session, trial_id.job_id, trial_id.trial_number)
        if trial is None or trial.batch_size != trial_id.batch_size:
            raise TrialNotFoundError(f"Could not find the trial: {trial_id.model_dump_json()}")
        return trial

    async def delete_job(self, job_id: str) -> None:
        """Delete a job and everything stored for it.

        Raises:
            JobNotFoundError: no such job.
        """
        async with self.db.write() as session:
            if await repo.get_job(session, job_id, lock=True) is None:
                raise JobNotFoundError("No job was deleted.")
            await repo.delete_job(session, job_id)
            logger.info("deleted job %s", job_id)
