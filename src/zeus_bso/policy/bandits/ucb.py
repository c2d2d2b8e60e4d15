"""A lower confidence bound on cost (``bandit="ucb"``): UCB1 for costs, with relative noise.

Each arm is run ``mab_num_explorations`` times first (at least once). Then the next run takes
the arm with the lowest bound ``mean - sigma * sqrt(2 ln(t) / n)``: its mean cost less a bonus
that shrinks as the arm is run (``n`` its observations, ``t`` every arm's together). Costs of
different jobs differ by orders of magnitude, so the noise ``sigma`` is relative, as the pooled
Thompson noise model's: ``sqrt(pooled_cv2) * mean``, estimated from every arm. Deterministic: the
random source only breaks ties among unexplored arms.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zeus_bso.policy.posteriors import pooled_cv2, posteriors_under
from zeus_bso.policy.types import Arms, CostStats, Observations, Posterior

if TYPE_CHECKING:
    from zeus_bso.spec import CreatedJob


@dataclass(frozen=True, slots=True)
class LowerConfidenceBound:
    """The lowest-bound arm (see the module), with the job's prior for what it believes."""

    prior_mean: float
    prior_precision: float
    num_explorations: int

    @classmethod
    def of(cls, job: CreatedJob) -> LowerConfidenceBound:
        return cls(job.mab_prior_mean, job.mab_prior_precision, max(job.mab_num_explorations, 1))

    def posteriors(self, arms: Arms, observations: Observations) -> dict[int, Posterior]:
        return posteriors_under("pooled", arms, observations, self.prior_mean, self.prior_precision)

    def bounds(self, arms: Arms, observations: Observations) -> dict[int, float]:
        """Each observed arm's lower confidence bound on its mean cost."""
        seen = {arm: observations[arm] for arm in arms if arm in observations}
        seen = {arm: stats for arm, stats in seen.items() if stats.count}
        total = sum(stats.count for stats in seen.values())
        relative = math.sqrt(pooled_cv2(seen))
        return {
            arm: stats.mean
            - relative * abs(stats.mean) * math.sqrt(2.0 * math.log(total) / stats.count)
            for arm, stats in seen.items()
        }

    def choose(self, arms: Arms, observations: Observations, rng: random.Random, pulls: int) -> int:
        settled = self.settled(arms, observations, pulls)
        if settled is not None:
            return settled
        empty = CostStats()
        return rng.choice(
            [arm for arm in arms if observations.get(arm, empty).count < self.num_explorations]
        )

    def settled(self, arms: Arms, observations: Observations, pulls: int) -> int | None:
        """The lowest-bound arm once every arm is explored; None: a random unexplored one is
        run first."""
        empty = CostStats()
        if any(observations.get(arm, empty).count < self.num_explorations for arm in arms):
            return None
        bounds = self.bounds(arms, observations)
        return min(arms, key=lambda arm: (bounds[arm], arm))
