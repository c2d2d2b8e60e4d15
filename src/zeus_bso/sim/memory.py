"""A job kept in memory, for fast in-process simulation.

`MemoryStore` is the in-memory `zeus_bso.policy.store.JobStore`; `InMemoryJob` runs a job's
operations through `zeus_bso.policy.orchestration` over it exactly as the server does over its
SQL store, so a simulation in-process and one through a real server make the same decisions for
the same seed. Trials are sequential here: there are no leases and no concurrent runs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from zeus_bso.policy import OPEN, Dispatch, Event, JobState, TrialKind, TrialState, TrialStatus
from zeus_bso.policy import orchestration as orchestrate
from zeus_bso.policy.machine import after_event
from zeus_bso.policy.profiles import WindowedCosts, count_by_profile, registered_on
from zeus_bso.policy.types import ByProfile
from zeus_bso.spec import CreatedJob, GpuConfig, ReportResponse, TrialId, profile_key


@dataclass
class MemoryStore:
    """One job's state and trials in memory (`zeus_bso.policy.store.JobStore`)."""

    job: JobState = field(default_factory=JobState)
    trials: list[TrialState] = field(default_factory=list)
    """By number: trial *n* at index *n - 1*."""
    _reported: dict[int, list[tuple[int, float, str | None]]] = field(
        default_factory=dict, repr=False
    )
    """Each batch size's reported trials (number, cost, profile), by number: what
    `latest_costs` reads without going through every trial."""

    def state(self) -> JobState:
        return self.job

    def trial(self, number: int) -> TrialState | None:
        return self.trials[number - 1] if 0 < number <= len(self.trials) else None

    def explorations(self) -> Sequence[TrialState]:
        return tuple(t for t in self.trials if t.kind is TrialKind.EXPLORATION)

    def latest_costs(self, batch_sizes: Iterable[int], window: int) -> WindowedCosts:
        return {
            size: [(cost, profile) for _, cost, profile in self._reported.get(size, [])[-window:]]
            for size in batch_sizes
        }

    def by_profile(self, base: str) -> ByProfile:
        return count_by_profile(self.trials, base)

    def add_trial(self, trial: TrialState, job: JobState) -> None:
        if trial.trial_number != len(self.trials) + 1:
            raise ValueError(f"trial {trial.trial_number} is not the next ({len(self.trials) + 1})")
        self.trials.append(trial)
        self.job = job

    def save_trial(self, trial: TrialState, job: JobState) -> None:
        if self.trial(trial.trial_number) is None:
            raise ValueError(f"no trial {trial.trial_number} to save")
        before = self.trials[trial.trial_number - 1]
        self.trials[trial.trial_number - 1] = trial
        self.job = job
        ended = trial.status is TrialStatus.REPORTED and before.status is not TrialStatus.REPORTED
        if ended and trial.cost is not None:
            entry = (trial.trial_number, trial.cost, trial.profile)
            bisect.insort(self._reported.setdefault(trial.batch_size, []), entry)


@dataclass
class InMemoryJob:
    """One job and the three operations of a run: next trial, report, end."""

    job: CreatedJob
    store: MemoryStore = field(default_factory=MemoryStore)
    last_dispatch: Dispatch | None = None
    """The policy's decision behind the latest `next_trial`."""

    @property
    def state(self) -> JobState:
        """What the job carries from trial to trial."""
        return self.store.job

    @property
    def trials(self) -> list[TrialState]:
        """Its trials, by number (trial *n* at index *n - 1*)."""
        return self.store.trials

    def register(self, gpu: GpuConfig) -> None:
        """Register the job again on other GPUs (``POST /jobs``): their profile is the job's
        current one from now on."""
        self.job, self.store.job = registered_on(self.job, self.store.job, gpu)

    def _trial(self, trial_id: TrialId) -> TrialState:
        trial = self.store.trial(trial_id.trial_number)
        if trial is None or trial.batch_size != trial_id.batch_size:
            raise ValueError(
                f"no trial {trial_id.trial_number} of batch size {trial_id.batch_size}"
            )
        return trial

    def next_trial(self, accumulate: bool = False, deliver: bool = False) -> TrialId:
        """Start a trial (``GET /jobs/batch_size``; ``accumulate``: for a run that accumulates
        gradients, which may get a size at or above the memory cap; ``deliver``: for a run that
        must deliver a model, the last attempt of `zeus_bso.until_converged`)."""
        step = orchestrate.dispatch(
            self.store, self.job, profile_key(self.job), accumulates=accumulate, deliver=deliver
        )
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
        step = orchestrate.report(
            self.store,
            self.job,
            self._trial(trial_id),
            time=time,
            energy=energy,
            metric=metric,
            current_epoch=current_epoch,
        )
        return step.answer

    def kinds(self) -> dict[int, str]:
        """Why each trial was dispatched, by trial number."""
        return {t.trial_number: t.kind.value for t in self.trials}

    def out_of_memory(self, trial_id: TrialId) -> None:
        """The run of a trial ran out of memory (``POST /api/trials/infeasible``)."""
        orchestrate.ran_out_of_memory(self.store, self.job, self._trial(trial_id))

    def micro_out_of_memory(self, trial_id: TrialId, micro_batch_size: int) -> None:
        """The run of a trial, which accumulates, ran out of memory at ``micro_batch_size``
        (``POST /api/trials/infeasible`` with ``micro_batch_size``): the cap comes down."""
        orchestrate.micro_batch_ran_out_of_memory(
            self.store, self.job, self._trial(trial_id), micro_batch_size
        )

    def resumed(self, trial_id: TrialId) -> None:
        """The run of an open trial restarted and resumed it (``POST /api/trials/heartbeat`` with
        ``resumed=true``): its next report's epochs hold the restart's one-off work."""
        trial = self._trial(trial_id)
        if trial.status in OPEN:
            self.store.save_trial(replace(trial, resumed_at_epoch=trial.epochs or 0), self.state)

    def end_trial(self, trial_id: TrialId) -> None:
        """End a trial (``PATCH /trials``): one without a final report becomes failed."""
        self.store.save_trial(after_event(self._trial(trial_id), Event.END), self.state)
