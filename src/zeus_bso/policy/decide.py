"""The policy's entry points: which batch size the next run uses, and the random source for it."""

from __future__ import annotations

import random

from zeus_bso.errors import NoFittingBatchSizeError
from zeus_bso.policy.bandits import next_arm
from zeus_bso.policy.horizon import Horizon
from zeus_bso.policy.priors import cold_explorations, next_prior_step, predicted_cost
from zeus_bso.policy.pruning import (
    PRIOR_ROUND,
    ExplorationInFlight,
    ExploreNext,
    PruningSettings,
    neighbours,
    next_pruning_step,
)
from zeus_bso.policy.types import Dispatch, JobHistory
from zeus_bso.spec import CreatedJob, TrialKind, TrialStatus


def rng_for(job: CreatedJob, trial_number: int) -> random.Random:
    """The random source for the decision that creates trial ``trial_number``.

    With ``mab_seed`` the source depends only on the seed and the trial number, so a replay of the
    same history makes the same choices (in any process). Without a seed every decision draws
    from the operating system's entropy, independently of every other decision.
    """
    if job.mab_seed is None:
        return random.SystemRandom()
    return random.Random(f"zeus-bso:{job.mab_seed}:{trial_number}")


def decide(
    job: CreatedJob, history: JobHistory, rng: random.Random, horizon: Horizon | None = None
) -> Dispatch:
    """Choose the batch size of the next run of ``job``: pruning's next exploration, the arm
    that probes new hardware (`JobHistory.probe`), or the bandit's choice; never one at or
    above the run's profile's memory cap (`JobHistory.memory_cap`). Where the job's horizon
    (``horizon``, with ``expected_recurrences``) cannot pay back the next
    exploration, another the first round would come to that it can pay back (`_instead`),
    else the cheapest batch size so far.

    Raises:
        NoConvergedBatchSizeError: pruning found no batch size that converges.
        NoFittingBatchSizeError: none of the batch sizes left fits on the run's profile.
    """
    arms = history.arms
    if arms is None:
        settings = PruningSettings.of(job, history.memory_cap, history.profile)
        step, explorations = None, history.explorations
        if history.prior is not None:
            step = next_prior_step(settings, history.prior, explorations)
            if step is None:  # dropped: the cold walk
                cheapest = history.best.cost if history.best is not None else None
                explorations = cold_explorations(history.prior, explorations, settings, cheapest)
        if step is None:  # no prior, or one the measurements dropped
            step = next_pruning_step(settings, explorations)
        if isinstance(step, ExploreNext) and _exploring(history):
            # Exploration is serial, also where the walk now starts elsewhere than the running
            # exploration's (a job registered on other GPUs compares its sizes' costs anew) and
            # where the running one is `_instead`'s.
            step = ExplorationInFlight()
        if isinstance(step, ExploreNext):
            predicted = None
            if step.round == PRIOR_ROUND and history.prior is not None and horizon is not None:
                predicted = predicted_cost(history.prior, horizon.means, step.batch_size)
            if not _may_explore(history, horizon, step.batch_size, predicted):
                assert history.best is not None
                best = _fitting(job, history, history.best.batch_size)
                other = None
                if horizon is not None and step.round == 0:
                    other = _instead(job, history, horizon)
                if other is not None:
                    return Dispatch(other, TrialKind.EXPLORATION, round=0)
                return Dispatch(best, TrialKind.EXPLOIT)
            return Dispatch(step.batch_size, TrialKind.EXPLORATION, round=step.round)
        if isinstance(step, ExplorationInFlight):
            best = history.best.batch_size if history.best else job.default_batch_size
            return Dispatch(_fitting(job, history, best), TrialKind.CONCURRENT)
        arms = step.arms
    elif history.probe is not None and history.probe in arms and history.fits(history.probe):
        return Dispatch(history.probe, TrialKind.BANDIT, arms=arms, probe=True)
    elif (
        history.extension is not None
        and history.extension not in arms
        and history.fits(history.extension)
        and _may_explore(history, horizon, history.extension)
    ):
        return Dispatch(history.extension, TrialKind.EXPLORATION, arms=arms)
    fitting = tuple(arm for arm in arms if history.fits(arm))
    if not fitting:
        assert history.memory_cap is not None
        raise NoFittingBatchSizeError(
            job.num_pruning_rounds, [], history.memory_cap, history.profile
        )
    batch_size, drawn = next_arm(job, fitting, history.observations, rng, history.bandit_pulls)
    return Dispatch(batch_size, TrialKind.BANDIT, arms=arms, drawn=drawn)


def _exploring(history: JobHistory) -> bool:
    """Whether one of the job's explorations is running."""
    return any(r.status is TrialStatus.DISPATCHED for r in history.explorations)


def _may_explore(
    history: JobHistory,
    horizon: Horizon | None,
    batch_size: int,
    predicted: float | None = None,
) -> bool:
    """Whether the next run may explore ``batch_size`` (whose cost a prior ``predicted``):
    always, unless the job's ``horizon`` cannot pay it back and a batch size has converged to
    run instead."""
    if horizon is None or history.best is None:
        return True
    return horizon.may_explore(batch_size, predicted)


def _instead(job: CreatedJob, history: JobHistory, horizon: Horizon) -> int | None:
    """An exploration the job's ``horizon`` allows where it refused the first round's next
    step: an untried neighbour of the cheapest batch size so far (one the round comes to once
    its directions are walked: its stride steps over them), the smaller first; None: none is
    allowed. The round's step stays where it was: its run comes when the horizon allows it,
    and the round counts this exploration as its own when it comes to the size. On the trace
    (sentiment140, whose walk down from the default steps over the cheapest size to the
    smallest, which the payback rule refuses) the job had kept to the default for good."""
    assert history.best is not None
    tried = {r.batch_size for r in history.explorations if r.status is not TrialStatus.INFEASIBLE}
    return next(
        (
            size
            for size in neighbours(sorted(job.batch_sizes), history.best.batch_size)
            if size not in tried and history.fits(size) and horizon.may_explore(size)
        ),
        None,
    )


def _fitting(job: CreatedJob, history: JobHistory, batch_size: int) -> int:
    """``batch_size``, or the largest of the job's batch sizes below the memory cap if it is not
    below it."""
    if history.fits(batch_size):
        return batch_size
    below = [size for size in job.batch_sizes if history.fits(size)]
    if not below:
        assert history.memory_cap is not None
        raise NoFittingBatchSizeError(0, [], history.memory_cap, history.profile)
    return max(below)
