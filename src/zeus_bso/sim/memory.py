"""A job kept in memory, with the server's bookkeeping, for fast in-process simulation.

It calls the same policy functions as the server and keeps the same records (pruning
explorations, per-batch-size cost statistics, the best converged run, the arms), so a simulation
in-process and one through a real server make the same decisions for the same seed. Trials are
sequential here: there are no leases and no concurrent runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zeus_bso import policy
from zeus_bso.policy import (
    BatchSizeStats,
    BestRun,
    CostStats,
    Exploration,
    JobHistory,
    TrialKind,
    TrialStatus,
)
from zeus_bso.spec import CreatedJob, ReportResponse, TrialId


@dataclass
class _Trial:
    dispatch: policy.Dispatch
    number: int
    status: TrialStatus = TrialStatus.DISPATCHED
    epochs: int = 0
    converged: bool | None = None
    cost: float | None = None


@dataclass
class InMemoryJob:
    """One job's state and the three operations of a run: next trial, report, end."""

    job: CreatedJob
    trials: list[_Trial] = field(default_factory=list)
    arms: tuple[int, ...] | None = None
    best: BestRun | None = None
    costs: dict[int, list[float]] = field(default_factory=dict)
    """Each batch size's final costs, oldest first (for ``window_size``)."""
    stats: dict[int, BatchSizeStats] = field(default_factory=dict)

    def _history(self) -> JobHistory:
        window = self.job.window_size
        observations = {
            b: CostStats.of(c[-window:] if window else c) for b, c in self.costs.items()
        }
        if self.arms is None:
            explorations = tuple(
                Exploration(
                    t.dispatch.round or 0,
                    t.dispatch.batch_size,
                    t.number,
                    t.status,
                    t.converged,
                    t.cost,
                    reported=t.epochs > 0,
                )
                for t in self.trials
                if t.dispatch.kind is TrialKind.EXPLORATION
            )
            return JobHistory(
                arms=None, explorations=explorations, observations=observations, best=self.best
            )
        pulls = sum(t.dispatch.kind is TrialKind.BANDIT for t in self.trials)
        return JobHistory(
            arms=self.arms, observations=observations, best=self.best, bandit_pulls=pulls
        )

    def next_trial(self) -> TrialId:
        """Start a trial (``GET /jobs/batch_size``)."""
        number = len(self.trials) + 1
        dispatch = policy.decide(self.job, self._history(), policy.rng_for(self.job, number))
        if dispatch.arms is not None and self.arms is None:
            self.arms = dispatch.arms
        self.trials.append(_Trial(dispatch, number))
        return TrialId(job_id=self.job.job_id, batch_size=dispatch.batch_size, trial_number=number)

    def report(
        self, trial_id: TrialId, *, time: float, energy: float, metric: float, current_epoch: int
    ) -> ReportResponse:
        """Report an epoch (``POST /report``)."""
        trial = self.trials[trial_id.trial_number - 1]
        if trial.status is TrialStatus.REPORTED:
            return ReportResponse(
                stop_train=True,
                converged=bool(trial.converged),
                message=f"Result for this trial({trial.number}) is already reported.",
            )
        verdict = policy.judge_report(
            self.job,
            batch_size=trial.dispatch.batch_size,
            time=time,
            energy=energy,
            metric=metric,
            current_epoch=current_epoch,
            best_cost=self.best.cost if self.best else None,
            exploring=trial.dispatch.kind is TrialKind.EXPLORATION,
        )
        trial.epochs, trial.cost = current_epoch, verdict.cost
        if verdict.stop:
            trial.status, trial.converged = TrialStatus.REPORTED, verdict.converged
            batch_size = trial.dispatch.batch_size
            self.costs.setdefault(batch_size, []).append(verdict.cost)
            self.stats, self.best = policy.fold_final_report(
                self.job, self.stats, batch_size, verdict.cost, verdict.converged
            )
        return ReportResponse(
            stop_train=verdict.stop,
            converged=verdict.converged,
            message=verdict.message,
            cost=verdict.cost,
        )

    def end_trial(self, trial_id: TrialId) -> None:
        """End a trial (``PATCH /trials``): one without a final report becomes failed."""
        trial = self.trials[trial_id.trial_number - 1]
        if trial.status is TrialStatus.DISPATCHED:
            trial.status = TrialStatus.FAILED
