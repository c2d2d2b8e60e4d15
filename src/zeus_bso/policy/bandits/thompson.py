"""Gaussian Thompson sampling over the arms (``bandit="thompson"``, the default), and upstream
Zeus 0.16's (``bandit="zeus-0.16"``).

Each arm's posterior over its mean reward is Normal (`zeus_bso.policy.posteriors`); the next run
takes the arm with the best sample. An arm with fewer than ``mab_num_explorations`` observations
is run first (a random one of them). After ``bandit_exploit_after`` bandit trials the job stops
sampling and runs the arm with the lowest optimistic cost: its mean cost less
``bandit_exploit_optimism`` posterior standard deviations (`optimistic_cost`). Upstream's
sampling is the same with each arm's own variance (``per_arm`` noise) and no exploitation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from zeus_bso.policy.posteriors import optimistic_cost, posteriors_under
from zeus_bso.policy.types import Arms, CostStats, Observations, Posterior

if TYPE_CHECKING:
    from zeus_bso.spec import CreatedJob


@dataclass(frozen=True, slots=True)
class ThompsonSampling:
    """Thompson sampling with its settings (from a job's options: `of`)."""

    prior_mean: float
    prior_precision: float
    num_explorations: int
    noise: Literal["per_arm", "pooled"]
    exploit_after: int | None
    optimism: float

    @classmethod
    def of(cls, job: CreatedJob) -> ThompsonSampling:
        """The job's Thompson sampling (``mab_*``, ``bandit_noise``, ``bandit_exploit_*``)."""
        return cls(
            job.mab_prior_mean,
            job.mab_prior_precision,
            job.mab_num_explorations,
            job.bandit_noise,
            job.bandit_exploit_after,
            job.bandit_exploit_optimism,
        )

    @classmethod
    def of_upstream(cls, job: CreatedJob) -> ThompsonSampling:
        """Upstream Zeus 0.16's: the job's prior and explorations, each arm's own variance, and
        sampling for ever (``bandit_noise`` and ``bandit_exploit_*`` do not apply)."""
        return cls(
            job.mab_prior_mean,
            job.mab_prior_precision,
            job.mab_num_explorations,
            noise="per_arm",
            exploit_after=None,
            optimism=0.0,
        )

    def posteriors(self, arms: Arms, observations: Observations) -> dict[int, Posterior]:
        return posteriors_under(
            self.noise, arms, observations, self.prior_mean, self.prior_precision
        )

    def _needs_exploration(self, stats: CostStats) -> bool:
        if stats.count < self.num_explorations:
            return True
        # An arm nobody has observed, under an uninformative prior, has nothing to sample from.
        return stats.count == 0 and self.prior_precision == 0.0

    def choose(self, arms: Arms, observations: Observations, rng: random.Random, pulls: int) -> int:
        """A random under-explored arm first, else the best posterior sample (each arm's drawn
        independently from ``rng``), or, after ``exploit_after`` bandit trials, the observed arm
        with the lowest optimistic cost (`settled`)."""
        empty = CostStats()
        unexplored = [a for a in arms if self._needs_exploration(observations.get(a, empty))]
        if unexplored:
            return rng.choice(unexplored)
        exploited = self.settled(arms, observations, pulls)
        if exploited is not None:
            return exploited
        samples: dict[int, float] = {}
        for arm, posterior in self.posteriors(arms, observations).items():
            std = posterior.std
            samples[arm] = posterior.mean if std == 0.0 else rng.gauss(posterior.mean, std)
        return max(arms, key=samples.__getitem__)

    def settled(self, arms: Arms, observations: Observations, pulls: int) -> int | None:
        """The arm `choose` takes whatever it draws: once every arm is explored and
        ``exploit_after`` bandit trials ran, the observed arm with the lowest optimistic cost;
        None: it draws one."""
        empty = CostStats()
        if self.exploit_after is None or pulls < self.exploit_after:
            return None
        if any(self._needs_exploration(observations.get(a, empty)) for a in arms):
            return None
        observed = [arm for arm in arms if observations.get(arm, empty).count]
        if not observed:
            return None
        posteriors = self.posteriors(arms, observations)
        return min(
            observed,
            key=lambda a: (optimistic_cost(observations[a], posteriors[a], self.optimism), a),
        )
