"""A job kept in memory, for fast in-process simulation.

Its three operations call the policy's state machine (`zeus_bso.policy.machine`) exactly as the
server does and keep what it returns, so a simulation in-process and one through a real server
make the same decisions for the same seed. Trials are sequential here: there are no leases and
no concurrent runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zeus_bso import policy
from zeus_bso.policy import CostStats, Dispatch, Event, JobState, TrialState
from zeus_bso.spec import CreatedJob, ReportResponse, TrialId


@dataclass
class InMemoryJob:
    """One job's state and the three operations of a run: next trial, report, end."""

    job: CreatedJob
    state: JobState = field(default_factory=JobState)
    trials: list[TrialState] = field(default_factory=list)
    costs: dict[int, list[float]] = field(default_factory=dict)
    """Each batch size's final costs, oldest first (for ``window_size``)."""
    last_dispatch: Dispatch | None = None
    """The policy's decision behind the latest `next_trial`."""

    def windowed(self) -> dict[int, CostStats] | None:
        """What the policy reads of a job with a ``window_size`` (None without one): each batch
        size's statistics of its last ``window_size`` final costs."""
        window = self.job.window_size
        if not window:
            return None
        return {b: CostStats.of(c[-window:]) for b, c in self.costs.items()}

    def _trial(self, trial_id: TrialId) -> TrialState:
        trial = self.trials[trial_id.trial_number - 1]
        if trial.batch_size != trial_id.batch_size:
            raise ValueError(f"trial {trial_id.trial_number} runs batch size {trial.batch_size}")
        return trial

    def next_trial(self) -> TrialId:
        """Start a trial (``GET /jobs/batch_size``)."""
        explorations = self.trials if self.state.arms is None else ()
        step = policy.after_dispatch(self.job, self.state, explorations, self.windowed())
        self.state = step.job
        self.trials.append(step.trial)
        self.last_dispatch = step.dispatch
        return TrialId(
            job_id=self.job.job_id,
            batch_size=step.trial.batch_size,
            trial_number=step.trial.trial_number,
        )

    def report(
        self, trial_id: TrialId, *, time: float, energy: float, metric: float, current_epoch: int
    ) -> ReportResponse:
        """Report an epoch (``POST /report``)."""
        trial = self._trial(trial_id)
        step = policy.after_report(
            self.job,
            self.state,
            trial,
            time=time,
            energy=energy,
            metric=metric,
            current_epoch=current_epoch,
        )
        self.state = step.job
        self.trials[trial.trial_number - 1] = step.trial
        if step.final:
            assert step.trial.cost is not None
            self.costs.setdefault(trial.batch_size, []).append(step.trial.cost)
        return step.answer

    def end_trial(self, trial_id: TrialId) -> None:
        """End a trial (``PATCH /trials``): one without a final report becomes failed."""
        trial = self._trial(trial_id)
        self.trials[trial.trial_number - 1] = policy.after_event(trial, Event.END)
