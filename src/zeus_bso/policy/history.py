"""What `zeus_bso.policy.decide.decide` reads of a job (`history_of`): its explorations or its
arms, each batch size's observed costs and the early-stop reference, in the cost units of the
hardware profile a run trains on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from zeus_bso.policy.profiles import Profiles, WindowedCosts, state_on, trial_on, windowed_on
from zeus_bso.policy.types import CostStats, JobHistory, JobState, TrialState
from zeus_bso.spec import CreatedJob, TrialKind


def history_of(
    job: CreatedJob,
    state: JobState,
    explorations: Iterable[TrialState] = (),
    windowed: WindowedCosts | None = None,
    profiles: Profiles | None = None,
    profile: str | None = None,
) -> JobHistory:
    """What `decide` reads of a job, in the cost units of hardware ``profile`` (see
    `zeus_bso.policy.profiles`; ``profiles`` None: the job has one).

    ``explorations`` are the job's pruning explorations (needed while it prunes). With a
    ``window_size``, ``windowed`` holds each batch size's most recent ``window_size`` final
    costs; without one the job's running statistics are used.
    """
    seen = state_on(job, state, profiles, profile)
    return history_seen(job, state, seen, explorations, windowed, profiles, profile)


def history_seen(
    job: CreatedJob,
    state: JobState,
    seen: JobState,
    explorations: Iterable[TrialState],
    windowed: WindowedCosts | None,
    profiles: Profiles | None = None,
    profile: str | None = None,
) -> JobHistory:
    """`history_of`, given ``seen``: the job's statistics in ``profile``'s units."""
    if job.window_size > 0:
        if windowed is None:
            raise ValueError(f"a job with window_size {job.window_size} needs windowed costs")
        observations: Mapping[int, CostStats] = windowed_on(windowed, profiles, profile)
    else:
        observations = {b: s.costs for b, s in seen.stats.items()}
    if state.arms is None:
        return JobHistory(
            arms=None,
            explorations=tuple(
                trial_on(t, profiles, profile)
                for t in explorations
                if t.kind is TrialKind.EXPLORATION
            ),
            observations=observations,
            best=seen.best,
            prior=state.prior,
        )
    return JobHistory(
        arms=state.arms,
        observations=observations,
        best=seen.best,
        bandit_pulls=state.bandit_pulls,
    )
