"""What the bandits believe of an arm: Normal posteriors over its mean reward (reward = -cost).

Each arm's posterior over its mean reward is Normal, with the known-precision
conjugate update where the reward precision is estimated from the arm's observations:
reward precision = 1 / variance (infinite with one observation or zero variance), posterior
precision = prior precision + n * reward precision, posterior mean = (prior precision * prior
mean + reward precision * sum of rewards) / posterior precision.

A consequence worth knowing: because the noise is estimated, an observation far from the others
raises the variance and can lower the posterior precision. More of the same evidence (an
observation at the sample mean, or the sample repeated) never does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from zeus_bso.policy.types import CostStats, Posterior


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
    ``bandit_noise="pooled"``, and the upper confidence bound's (`zeus_bso.policy.bandits.ucb`).
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


def optimistic_cost(stats: CostStats, posterior: Posterior, optimism: float) -> float:
    """An observed arm's mean cost less ``optimism`` standard deviations of its ``posterior``."""
    if optimism == 0.0:
        return stats.mean
    return stats.mean - optimism * posterior.std


def posteriors_under(
    noise: str,
    arms: tuple[int, ...],
    observations: Mapping[int, CostStats],
    prior_mean: float,
    prior_precision: float,
) -> dict[int, Posterior]:
    """Each arm's posterior over its mean reward under a noise model: ``per_arm`` (each arm's
    own sample variance) or ``pooled`` (`pooled_cv2`)."""
    empty = CostStats()
    seen = {arm: observations.get(arm, empty) for arm in arms}
    pooled = pooled_cv2(seen) if noise == "pooled" else None
    return {
        arm: arm_posterior(stats, prior_mean, prior_precision, pooled)
        for arm, stats in seen.items()
    }
