"""`SqlJobStore`: the server's `zeus_bso.policy.store.JobStore`, one job's rows in SQL.

It works inside the caller's transaction, on a job row the caller read (and, for a request that
changes the job, locked); `zeus_bso_server.store.repository` holds its statements. What the
server adds to the contract: each trial it stores gets a lease (``lease``, in seconds, from the
trial), and a dispatched trial the run key of the run that asked for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from zeus_bso.policy import ByProfile, JobState, TrialState, TrialStatus
from zeus_bso.policy.profiles import WindowedCosts, count_by_profile
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.repository import StoredJob


def _no_lease(trial: TrialState) -> float:
    return 0.0


@dataclass
class SqlJobStore:
    """One job's rows, inside the caller's transaction."""

    conn: Connection
    job_id: str
    job: JobState
    """The job's state, as the caller read it from its (locked) row; kept up to date by the
    writes through this store."""
    lease: Callable[[TrialState], float] = _no_lease
    """The lease, in seconds from now, of a trial being stored."""
    run_key: str | None = None
    """The run key a dispatched trial is stored with."""
    known_explorations: Sequence[TrialState] | None = None
    """The job's explorations, where the caller read them already (a page of jobs, read
    together: `repo.explorations_of`), for a store that only reads."""

    @classmethod
    def of(
        cls,
        conn: Connection,
        job: StoredJob,
        lease: Callable[[TrialState], float] = _no_lease,
        run_key: str | None = None,
    ) -> SqlJobStore:
        """The store of the job the caller read (and, to change the job, locked)."""
        return cls(conn, job.job_id, job.state, lease, run_key)

    def state(self) -> JobState:
        return self.job

    def trial(self, number: int) -> TrialState | None:
        found = repo.get_trial(self.conn, self.job_id, number)
        return found.trial if found is not None else None

    def explorations(self) -> Sequence[TrialState]:
        if self.known_explorations is not None:
            return self.known_explorations
        return repo.explorations(self.conn, self.job_id)

    def latest_costs(self, batch_sizes: Iterable[int], window: int) -> WindowedCosts:
        return repo.latest_costs(self.conn, self.job_id, batch_sizes, window)

    def by_profile(self, base: str) -> ByProfile:
        return count_by_profile(repo.trials_of(self.conn, self.job_id), base)

    def add_trial(self, trial: TrialState, job: JobState) -> None:
        repo.start_trial(self.conn, self.job_id, trial, self.lease(trial), job, self.run_key)
        self._kept(job)

    def save_trial(self, trial: TrialState, job: JobState) -> None:
        if trial.status is TrialStatus.REPORTED:
            repo.finish_trial(self.conn, self.job_id, trial, job)
        elif trial.status is TrialStatus.INFEASIBLE:
            repo.end_trial_as(self.conn, self.job_id, trial)
        else:
            repo.record_progress(self.conn, self.job_id, trial, self.lease(trial))
        self._kept(job)

    def move_trial(self, trial: TrialState, job: JobState) -> None:
        """Store a trial's new profile (a run restarted on other GPUs) and the job counting it
        there (`zeus_bso.policy.moved`)."""
        assert trial.profile is not None
        repo.move_trial(self.conn, self.job_id, trial.trial_number, trial.profile)
        self._kept(job)

    def _kept(self, job: JobState) -> None:
        """The job's state is ``job`` now; its counts by profile are written where they
        changed."""
        if job.by_profile is not None and job.by_profile != self.job.by_profile:
            repo.set_by_profile(self.conn, self.job_id, job.by_profile)
        if job.memory_caps != self.job.memory_caps:
            repo.set_memory_caps(self.conn, self.job_id, dict(job.memory_caps))
        if job.memory_doubts != self.job.memory_doubts:
            repo.set_memory_doubts(self.conn, self.job_id, dict(job.memory_doubts))
        self.job = job
