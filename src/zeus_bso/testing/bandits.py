"""The contract every bandit passes (`zeus_bso.policy.bandits.Bandit`), as a class that a
bandit's test module subclasses, defining the ``bandit`` fixture."""

from __future__ import annotations

import math
import random

import pytest

from zeus_bso.policy.bandits import Bandit
from zeus_bso.policy.types import CostStats

ARMS = (16, 32, 64, 128)


def random_observations(rng: random.Random, arms: tuple[int, ...]) -> dict[int, CostStats]:
    """Up to four noisy costs for each arm (none for some)."""
    return {
        arm: CostStats.of(rng.gauss(100.0 + arm, 15.0) for _ in range(rng.randint(0, 4)))
        for arm in arms
    }


class BanditContract:
    """What every bandit does, whatever its algorithm.

    Subclass it and define the ``bandit`` fixture, which returns the bandit under test with its
    settings (e.g. ``MyBandit.of(job)``)::

        class TestEpsilonGreedy(BanditContract):
            @pytest.fixture
            def bandit(self) -> Bandit:
                return EpsilonGreedy(epsilon=0.1)
    """

    @pytest.fixture
    def bandit(self) -> Bandit:
        raise NotImplementedError("a BanditContract subclass defines the `bandit` fixture")

    def test_it_chooses_one_of_the_arms(self, bandit: Bandit) -> None:
        for seed in range(200):
            observations = random_observations(random.Random(seed), ARMS)
            arm = bandit.choose(ARMS, observations, random.Random(seed), pulls=seed % 12)
            assert arm in ARMS
        assert bandit.choose((64,), {}, random.Random(0), pulls=0) == 64

    def test_it_is_a_function_of_its_input_and_random_source(self, bandit: Bandit) -> None:
        """No clock and no state of its own: a replay decides alike in-process and through a
        server."""
        for seed in range(50):
            observations = random_observations(random.Random(seed), ARMS)
            first = bandit.choose(ARMS, observations, random.Random(seed), pulls=3)
            again = bandit.choose(ARMS, observations, random.Random(seed), pulls=3)
            assert first == again

    def test_its_posteriors_are_finite_and_favour_the_cheaper_arm(self, bandit: Bandit) -> None:
        """A posterior is over an arm's mean reward (reward = -cost): the recommendation and
        the dashboard read it."""
        observations = {32: CostStats.of([100.0, 140.0]), 64: CostStats.of([110.0, 111.0])}
        posteriors = bandit.posteriors((32, 64), observations)
        assert set(posteriors) == {32, 64}
        for posterior in posteriors.values():
            assert math.isfinite(posterior.mean)
            assert math.isfinite(posterior.std)
            assert posterior.std >= 0
        assert posteriors[64].mean > posteriors[32].mean

    def test_it_settles_on_the_cheapest_arm_of_a_noisy_bandit(self, bandit: Bandit) -> None:
        means = {32: 100.0, 64: 80.0, 128: 90.0}
        arms = tuple(means)
        noise = random.Random(1)
        costs: dict[int, list[float]] = {arm: [] for arm in arms}
        for pull in range(300):
            observations = {arm: CostStats.of(c) for arm, c in costs.items() if c}
            arm = bandit.choose(arms, observations, random.Random(pull), pull)
            costs[arm].append(max(noise.gauss(means[arm], 8.0), 1.0))
        assert len(costs[64]) > 150, {arm: len(c) for arm, c in costs.items()}

    def test_an_arm_it_settled_on_is_what_it_chooses_whatever_it_draws(
        self, bandit: Bandit
    ) -> None:
        """Where the bandit says its choice no longer depends on its random source
        (`zeus_bso.policy.bandits.SettlingBandit`), the job's view names that arm as the next
        run's: every draw must choose it. A bandit without ``settled`` passes as it is."""
        settled = getattr(bandit, "settled", None)
        if settled is None:
            return
        for seed in range(100):
            observations = random_observations(random.Random(seed), ARMS)
            arm = settled(ARMS, observations, seed % 12)
            if arm is not None:
                chosen = {
                    bandit.choose(ARMS, observations, random.Random(draw), seed % 12)
                    for draw in range(20)
                }
                assert chosen == {arm}, (seed, arm, chosen)
