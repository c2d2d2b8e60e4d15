"""A job kept in memory, for fast in-process simulation.

Its three operations call the policy's state machine (`zeus_bso.policy.machine`) exactly as the
server does and keep what it returns, so a simulation in-process and one through a real server
make the same decisions for the same seed. Trials are sequential here: there are no leases and
no concurrent runs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from zeus_bso import policy
from zeus_bso.policy import Dispatch, Event, JobState, TrialKind, TrialState
from zeus_bso.policy.profiles import EpochReadings, WindowedCosts, registered_on
from zeus_bso.spec import CreatedJob, GpuConfig, ReportResponse, TrialId, profile_key


@dataclass
class InMemoryJob:
    """One job's state and the three operations of a run: next trial, report, end."""

    job: CreatedJob
    state: JobState = field(default_factory=JobState)
    trials: list[TrialState] = field(default_factory=list)
    costs: dict[int, list[tuple[float, str | None]]] = field(default_factory=dict)
    """Each batch size's final costs with their trials' profiles, oldest first (for
    ``window_size``)."""
    last_dispatch: Dispatch | None = None
    """The policy's decision behind the latest `next_trial`."""

    def windowed(self) -> WindowedCosts | None:
        """What the policy reads of a job with a ``window_size`` (None without one): each batch
        size's last ``window_size`` final costs."""
        window = self.job.window_size
        if not window:
            return None
        return {b: c[-window:] for b, c in self.costs.items()}

    def epoch_readings(self) -> EpochReadings | None:
        """The mean energy and time of an epoch by (profile, batch size) over the trials at
        their latest report, once the job has two profiles (as
        `zeus_bso_server.store.repository`)."""
        if len(self.state.profiles) < 2:
            return None
        base = next(iter(self.state.profiles))
        per_epoch: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
        for t in self.trials:
            if t.epochs and t.energy is not None and t.time is not None:
                key = (t.profile or base, t.batch_size)
                per_epoch[key].append((t.energy / t.epochs, t.time / t.epochs))
        return {
            key: (sum(e for e, _ in got) / len(got), sum(t for _, t in got) / len(got))
            for key, got in per_epoch.items()
        }

    def pulls_on(self, profile: str) -> int:
        """The job's bandit trials on ``profile`` (as `zeus_bso_server.store.repository`)."""
        return sum(1 for t in self.trials if t.kind is TrialKind.BANDIT and t.profile == profile)

    def register(self, gpu: GpuConfig) -> None:
        """Register the job again on other GPUs (``POST /jobs``): their profile is the job's
        current one from now on."""
        self.job, self.state = registered_on(self.job, self.state, gpu)

    def _trial(self, trial_id: TrialId) -> TrialState:
        trial = self.trials[trial_id.trial_number - 1]
        if trial.batch_size != trial_id.batch_size:
            raise ValueError(f"trial {trial_id.trial_number} runs batch size {trial.batch_size}")
        return trial

    def next_trial(self) -> TrialId:
        """Start a trial (``GET /jobs/batch_size``)."""
        explorations = self.trials if self.state.arms is None else ()
        profile = profile_key(self.job)
        step = policy.after_dispatch(
            self.job,
            self.state,
            explorations,
            self.windowed(),
            profile=profile,
            epoch_readings=self.epoch_readings(),
            pulls_on_profile=self.pulls_on(profile),
        )
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
            epoch_readings=self.epoch_readings(),
        )
        self.state = step.job
        self.trials[trial.trial_number - 1] = step.trial
        if step.final:
            assert step.trial.cost is not None
            self.costs.setdefault(trial.batch_size, []).append((step.trial.cost, trial.profile))
        return step.answer

    def end_trial(self, trial_id: TrialId) -> None:
        """End a trial (``PATCH /trials``): one without a final report becomes failed."""
        trial = self._trial(trial_id)
        self.trials[trial.trial_number - 1] = policy.after_event(trial, Event.END)
