"""The bandit stage: Gaussian Thompson sampling over the arms that survived pruning.

Reward = -cost. Each arm's posterior over its mean reward is Normal, with the known-precision
conjugate update where the reward precision is estimated from the arm's observations:
reward precision = 1 / variance (infinite with one observation or zero variance), posterior
precision = prior precision + n * reward precision, posterior mean = (prior precision * prior
mean + reward precision * sum of rewards) / posterior precision.

After ``bandit_exploit_after`` bandit trials the job stops sampling and runs the arm with the
lowest optimistic cost: its mean cost less ``bandit_exploit_optimism`` posterior standard
deviations (`optimistic_cost`).

A consequence worth knowing: because the noise is estimated, an observation far from the others
raises the variance and can lower the posterior precision. More of the same evidence (an
observation at the sample mean, or the sample repeated) never does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from zeus_bso.policy.types import CostStats, JobHistory, JobState, Posterior
from zeus_bso.spec import CreatedJob


def conjugate_update(
    prior_mean: float,
    prior_precision: float,
    count: int,
    reward_sum: float,
    reward_precision: float,
) -> Posterior:
    """Normal posterior over the mean of ``count`` rewards of known precision."""
    if count == 0:
        return Posterior(prior_mean, prior_precision)
    if reward_precision == math.inf:
        return Posterior(reward_sum / count, math.inf)
    precision = prior_precision + count * reward_precision
    if precision == 0.0:
        return Posterior(prior_mean, 0.0)
    if prior_precision == 0.0:  # the same, without the rounding of a product and a quotient
        return Posterior(reward_sum / count, precision)
    mean = (prior_precision * prior_mean + reward_precision * reward_sum) / precision
    return Posterior(mean, precision)


def arm_posterior(
    stats: CostStats,
    prior_mean: float,
    prior_precision: float,
    pooled_cv2: float | None = None,
) -> Posterior:
    """Posterior over an arm's mean reward given the statistics of its observed costs.

    With ``pooled_cv2`` (a squared coefficient of variation shared by all arms) the arm's
    reward variance is ``pooled_cv2 * mean**2`` instead of its own sample variance.
    """
    if pooled_cv2 is not None:
        # A product, not ``**``: a huge mean (a cost converted between hardware profiles by an
        # extreme ratio) gives an infinite variance, where ``**`` raises OverflowError.
        variance = pooled_cv2 * (stats.mean * stats.mean)
        reward_precision = math.inf if variance <= 0.0 else 1.0 / variance
    else:
        variance = stats.variance
        reward_precision = math.inf if stats.count <= 1 or variance <= 0.0 else 1.0 / variance
    return conjugate_update(
        prior_mean, prior_precision, stats.count, -stats.mean * stats.count, reward_precision
    )


POOLED_CV_PRIOR = 0.1
"""Coefficient of variation the pooled noise starts from (before any arm has two observations)."""

POOLED_CV_PRIOR_DOF = 5
"""Degrees of freedom the prior counts for in the pooled estimate. Without it one arm whose runs
all cost the same (the same number of epochs every time) drives the pooled noise to zero, and
then no arm seen once ever gets a second run."""


def pooled_cv2(observations: Mapping[int, CostStats]) -> float:
    """Squared coefficient of variation pooled over the arms with two or more observations.

    Each arm contributes its relative variance weighted by its degrees of freedom, and the prior
    (`POOLED_CV_PRIOR`) with `POOLED_CV_PRIOR_DOF`; the result is the noise model of
    ``bandit_noise="pooled"``.
    """
    weighted, dof = POOLED_CV_PRIOR_DOF * POOLED_CV_PRIOR**2, POOLED_CV_PRIOR_DOF
    for stats in observations.values():
        mean_squared = stats.mean * stats.mean
        if stats.count < 2 or mean_squared <= 0.0:
            continue
        relative = stats.m2 / mean_squared
        if math.isfinite(relative):
            weighted += relative
            dof += stats.count - 1
    return weighted / dof


def arm_posteriors(
    job: CreatedJob, arms: tuple[int, ...], observations: Mapping[int, CostStats]
) -> dict[int, Posterior]:
    """Each arm's posterior over its mean reward, under the job's noise model: what
    `choose_arm` samples from, and what a reader of the job's state is shown."""
    empty = CostStats()
    seen = {arm: observations.get(arm, empty) for arm in arms}
    pooled = pooled_cv2(seen) if job.bandit_noise == "pooled" else None
    return {
        arm: arm_posterior(stats, job.mab_prior_mean, job.mab_prior_precision, pooled)
        for arm, stats in seen.items()
    }


def recommended(job: CreatedJob, state: JobState, history: JobHistory) -> tuple[int, float] | None:
    """The batch size the optimizer would settle on now, and its expected cost: in the bandit
    stage, the observed arm whose posterior (`arm_posteriors`, the job's noise model) has the
    lowest mean cost; while pruning, the batch size whose converged runs cost least on average.
    None before anything qualifies."""
    if history.arms is not None:
        posteriors = arm_posteriors(job, history.arms, history.observations)
        seen = history.observations
        observed = [arm for arm in history.arms if arm in seen and seen[arm].count]
        if not observed:
            return None
        arm = max(observed, key=lambda a: (posteriors[a].mean, -a))  # ties: the smaller
        return arm, -posteriors[arm].mean
    means = [(s.converged.mean, s.batch_size) for s in state.stats.values()]
    converged = [(mean, size) for mean, size in means if mean is not None]
    if not converged:
        return None
    mean, size = min(converged)
    return size, mean


def optimistic_cost(stats: CostStats, posterior: Posterior, optimism: float) -> float:
    """An observed arm's mean cost less ``optimism`` standard deviations of its ``posterior``."""
    if optimism == 0.0:
        return stats.mean
    return stats.mean - optimism * posterior.std


def _needs_exploration(job: CreatedJob, stats: CostStats) -> bool:
    if stats.count < job.mab_num_explorations:
        return True
    # An arm nobody has observed, under an uninformative prior, has nothing to sample from.
    return stats.count == 0 and job.mab_prior_precision == 0.0


def choose_arm(
    job: CreatedJob,
    arms: tuple[int, ...],
    observations: Mapping[int, CostStats],
    rng: random.Random,
    pulls: int = 0,
) -> int:
    """Pick the next arm: a random under-explored arm first, else the best posterior sample.

    Each arm's sample is drawn independently from ``rng``. After ``job.bandit_exploit_after``
    bandit-stage trials (``pulls``), the observed arm with the lowest optimistic cost is chosen
    instead (`optimistic_cost`).
    """
    empty = CostStats()
    unexplored = [arm for arm in arms if _needs_exploration(job, observations.get(arm, empty))]
    if unexplored:
        return rng.choice(unexplored)
    if job.bandit_exploit_after is not None and pulls >= job.bandit_exploit_after:
        observed = [arm for arm in arms if observations.get(arm, empty).count]
        if observed:
            posteriors = arm_posteriors(job, arms, observations)
            optimism = job.bandit_exploit_optimism
            return min(
                observed,
                key=lambda a: (optimistic_cost(observations[a], posteriors[a], optimism), a),
            )
    samples: dict[int, float] = {}
    for arm, posterior in arm_posteriors(job, arms, observations).items():
        std = posterior.std
        samples[arm] = posterior.mean if std == 0.0 else rng.gauss(posterior.mean, std)
    return max(arms, key=samples.__getitem__)
