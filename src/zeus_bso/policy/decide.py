"""The policy's entry points: which batch size the next run uses, and the random source for it."""

from __future__ import annotations

import random

from zeus_bso.policy.bandits import choose_arm
from zeus_bso.policy.pruning import (
    ExplorationInFlight,
    ExploreNext,
    PruningSettings,
    next_pruning_step,
)
from zeus_bso.policy.types import Dispatch, JobHistory, TrialKind
from zeus_bso.spec import CreatedJob


def rng_for(job: CreatedJob, trial_number: int) -> random.Random:
    """The random source for the decision that creates trial ``trial_number``.

    With ``mab_seed`` the source depends only on the seed and the trial number, so a replay of the
    same history makes the same choices (in any process). Without a seed every decision draws
    from the operating system's entropy, independently of every other decision.
    """
    if job.mab_seed is None:
        return random.SystemRandom()
    return random.Random(f"zeus-bso:{job.mab_seed}:{trial_number}")


def decide(job: CreatedJob, history: JobHistory, rng: random.Random) -> Dispatch:
    """Choose the batch size of the next run of ``job``: pruning's next exploration, the arm
    that probes new hardware (`JobHistory.probe`), or the bandit's choice.

    Raises:
        NoConvergedBatchSizeError: pruning found no batch size that converges.
    """
    arms = history.arms
    if arms is None:
        step = next_pruning_step(PruningSettings.of(job), history.explorations)
        if isinstance(step, ExploreNext):
            return Dispatch(step.batch_size, TrialKind.EXPLORATION, round=step.round)
        if isinstance(step, ExplorationInFlight):
            best = history.best.batch_size if history.best else job.default_batch_size
            return Dispatch(best, TrialKind.CONCURRENT)
        arms = step.arms
    elif history.probe is not None and history.probe in arms:
        return Dispatch(history.probe, TrialKind.BANDIT, arms=arms)
    elif history.extension is not None and history.extension not in arms:
        return Dispatch(history.extension, TrialKind.EXPLORATION, arms=arms)
    batch_size = choose_arm(job, arms, history.observations, rng, history.bandit_pulls)
    return Dispatch(batch_size, TrialKind.BANDIT, arms=arms)
