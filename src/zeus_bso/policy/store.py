"""`JobStore`: what the policy reads of one job's stored history and the writes it causes.

Two implementations hold to one contract (``tests/store/test_contract.py`` runs the same tests
against both): the server's SQL store (`zeus_bso_server.store.sql_store`), which works inside
the caller's transaction with the job row locked, and the simulator's in-memory store
(`zeus_bso.sim.memory`). `zeus_bso.policy.orchestration` is the one place that gathers the
policy's input from a store, calls the pure state machine and writes what comes back, for the
server, the simulator and the read views alike.

A store answers for one job. Trials are numbered from 1 in dispatch order; a trial's
``profile`` None stands for the job's first profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from zeus_bso.policy.profiles import WindowedCosts
from zeus_bso.policy.types import ByProfile, JobState, TrialState


class JobStore(Protocol):
    """One job's state and trials, as the policy reads and changes them."""

    def state(self) -> JobState:
        """What the job carries from trial to trial (`JobState`)."""
        ...

    def trial(self, number: int) -> TrialState | None:
        """One trial (None: no such trial)."""
        ...

    def explorations(self) -> Sequence[TrialState]:
        """The job's pruning explorations (trials of kind ``exploration``), by number."""
        ...

    def latest_costs(self, batch_sizes: Iterable[int], window: int) -> WindowedCosts:
        """For each of ``batch_sizes``: the costs of its latest ``window`` reported trials,
        oldest first, each with its trial's profile (every listed size is a key)."""
        ...

    def by_profile(self, base: str) -> ByProfile:
        """Count the job's epochs and bandit trials by profile from its trials (``base``: the
        profile of a trial stored without one): each (profile, batch size)'s trials that
        reported an epoch with energy, with the energy and time of their mean epoch at their
        latest report summed; each profile's trials of kind ``bandit``."""
        ...

    def add_trial(self, trial: TrialState, job: JobState) -> None:
        """Store a dispatched trial and the job after its dispatch."""
        ...

    def save_trial(self, trial: TrialState, job: JobState) -> None:
        """Store a trial after a report (or an event) and the job after it: a trial that ended
        with its final report (``reported``) with the job's statistics."""
        ...
