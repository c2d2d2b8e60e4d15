"""The bandit interface (`zeus_bso.policy.bandits`): each registered bandit, chosen by the job's
``bandit`` option."""

from __future__ import annotations

import math
import random

import pytest

from tests.policy.helpers import make_job
from zeus_bso.errors import UnknownBanditError
from zeus_bso.policy import BANDITS, CostStats, bandit_for, choose_arm, recommended
from zeus_bso.policy.bandits import Bandit, LowerConfidenceBound, ThompsonSampling, settled_arm
from zeus_bso.policy.types import JobHistory, JobState
from zeus_bso.spec import BUILT_IN_BANDITS
from zeus_bso.testing import BanditContract


def random_observations(rng: random.Random, arms: tuple[int, ...]) -> dict[int, CostStats]:
    return {
        arm: CostStats.of(rng.gauss(100.0 + arm, 15.0) for _ in range(rng.randint(0, 4)))
        for arm in arms
    }


def test_the_option_chooses_the_bandit_and_an_unknown_one_is_refused() -> None:
    assert isinstance(bandit_for(make_job(bandit="thompson")), ThompsonSampling)
    assert isinstance(bandit_for(make_job(bandit="ucb")), LowerConfidenceBound)
    with pytest.raises(
        UnknownBanditError,
        match=r"bandit 'thomson' is neither built in .*"
        r"did you mean 'thompson'\?",
    ):
        bandit_for(make_job(bandit="thomson"))
    with pytest.raises(ValueError, match="bandit"):
        make_job(bandit="no spaces in a name")


def test_the_registry_implements_exactly_the_built_in_bandits() -> None:
    assert list(BANDITS) == list(BUILT_IN_BANDITS)


def test_upstreams_bandit_is_thompson_sampling_without_our_settings() -> None:
    # Whatever bandit_noise and bandit_exploit_* say, zeus-0.16 decides as Thompson sampling on
    # each arm's own variance that never exploits, draw for draw.
    upstream = make_job(
        bandit="zeus-0.16",
        bandit_noise="pooled",
        bandit_exploit_after=0,
        bandit_exploit_optimism=2.0,
        mab_num_explorations=1,
    )
    plain = make_job(
        bandit="thompson",
        bandit_noise="per_arm",
        bandit_exploit_after=None,
        bandit_exploit_optimism=0.0,
        mab_num_explorations=1,
    )
    arms = (16, 32, 64, 128)
    differs = 0
    for seed in range(300):
        observations = random_observations(random.Random(seed), arms)
        ours = choose_arm(upstream, arms, observations, random.Random(seed), pulls=10)
        assert ours == choose_arm(plain, arms, observations, random.Random(seed), pulls=10)
        pooled = make_job(bandit="thompson", bandit_exploit_after=0, mab_num_explorations=1)
        differs += ours != choose_arm(pooled, arms, observations, random.Random(seed), pulls=10)
    assert differs  # and our settings do change decisions


def test_ucb_runs_every_arm_then_the_lowest_bound() -> None:
    job = make_job(bandit="ucb", mab_num_explorations=1)
    arms = (32, 64, 128)
    rng = random.Random(0)
    assert choose_arm(job, arms, {32: CostStats.of([100.0])}, rng) in (64, 128)
    # Seen alike often: the cheapest mean has the lowest bound.
    seen = {32: CostStats.of([100, 104]), 64: CostStats.of([90, 94]), 128: CostStats.of([120, 118])}
    assert choose_arm(job, arms, seen, rng) == 64
    # An arm seen once, a little dearer than one seen thirty times, has the wider bonus.
    steady = CostStats.of([90.0 + (i % 5) for i in range(30)])
    bounds = LowerConfidenceBound.of(job).bounds(arms, {32: steady, 64: CostStats.of([95.0])})
    assert set(bounds) == {32, 64}
    assert bounds[64] < bounds[32]
    assert choose_arm(job, (32, 64), {32: steady, 64: CostStats.of([95.0])}, rng) == 64
    # Deterministic: the random source is not drawn from once every arm was run.
    draws = random.Random(5)
    state = draws.getstate()
    choose_arm(job, arms, seen, draws)
    assert draws.getstate() == state


def test_the_recommendation_reads_the_bandits_posterior() -> None:
    arms = (32, 64)
    observations = {32: CostStats.of([100.0, 140.0]), 64: CostStats.of([110.0, 111.0])}
    history = JobHistory(arms=arms, observations=observations)
    for name in BANDITS:
        job = make_job(bandit=name)
        arm, cost = recommended(job, JobState(arms=arms), history) or (0, 0.0)
        posteriors = bandit_for(job).posteriors(arms, observations)
        assert arm == 64
        assert cost == pytest.approx(-posteriors[64].mean)
        assert math.isfinite(posteriors[32].std)


def test_each_built_in_bandit_says_when_its_choice_no_longer_draws() -> None:
    arms = (32, 64, 128)
    seen = {32: CostStats.of([100, 104]), 64: CostStats.of([90, 94]), 128: CostStats.of([120])}
    partly = {32: CostStats.of([100.0]), 64: CostStats.of([90.0])}  # 128 never ran

    thompson = make_job(bandit="thompson", bandit_exploit_after=5, mab_num_explorations=1)
    assert settled_arm(thompson, arms, seen, pulls=4) is None  # it still samples
    assert settled_arm(thompson, arms, seen, pulls=5) == 64  # then exploits the cheapest
    assert settled_arm(thompson, arms, partly, pulls=9) is None  # an arm still to run first
    sampling = make_job(bandit="thompson", bandit_exploit_after=None, mab_num_explorations=1)
    assert settled_arm(sampling, arms, seen, pulls=1000) is None
    upstream = make_job(bandit="zeus-0.16", bandit_exploit_after=0, mab_num_explorations=1)
    assert settled_arm(upstream, arms, seen, pulls=1000) is None  # upstream's samples for ever

    ucb = make_job(bandit="ucb", mab_num_explorations=1)
    assert settled_arm(ucb, arms, partly, pulls=2) is None  # a random unexplored arm first
    assert settled_arm(ucb, arms, seen, pulls=2) == choose_arm(ucb, arms, seen, random.Random(0))


class TestEveryRegisteredBandit(BanditContract):
    @pytest.fixture(params=list(BANDITS))
    def bandit(self, request: pytest.FixtureRequest) -> Bandit:
        return bandit_for(make_job(bandit=request.param, mab_num_explorations=1))
