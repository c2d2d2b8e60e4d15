"""The policy options of ours (SPEC 4.5): each one's effect, against upstream's behaviour."""

from __future__ import annotations

import math
import random

import pytest

from tests.policy.helpers import explored, judged, make_job
from zeus_bso.policy import (
    ConvergedStats,
    CostStats,
    StopRules,
    arm_posterior,
    best_reference,
    choose_arm,
    next_pruning_step,
)
from zeus_bso.policy.posteriors import POOLED_CV_PRIOR, POOLED_CV_PRIOR_DOF, pooled_cv2
from zeus_bso.policy.pruning import ExploreNext, PruningDone, PruningSettings

SIZES = [16, 32, 64, 128, 256]


def walk(job_overrides: dict, costs: dict[int, float | None]) -> tuple[list[int], object]:
    """Explore until pruning ends; ``None`` cost = does not converge. Returns order and end."""
    job = make_job(batch_sizes=SIZES, default_batch_size=64, num_pruning_rounds=1, **job_overrides)
    history: tuple = ()
    order = []
    while True:
        step = next_pruning_step(PruningSettings.of(job), history)
        if not isinstance(step, ExploreNext):
            return order, step
        order.append(step.batch_size)
        cost = costs[step.batch_size]
        history += (
            explored(0, step.batch_size, len(order), converged=cost is not None, cost=cost),
        )


def test_up_first_walks_pivot_then_larger_then_smaller() -> None:
    costs = {16: 50.0, 32: 40.0, 64: 30.0, 128: 35.0, 256: 45.0}
    order, end = walk({"prune_up_first": True}, costs)
    assert order == [64, 128, 256, 32, 16]
    assert end == PruningDone(arms=(16, 32, 64, 128, 256))
    upstream_order, _ = walk({}, costs)
    assert upstream_order == [64, 32, 16, 128, 256]


def test_pivot_failure_ends_no_direction_when_walking_up_first() -> None:
    costs = {16: 50.0, 32: 40.0, 64: None, 128: 35.0, 256: None}
    order, end = walk({"prune_up_first": True}, costs)
    assert order == [64, 128, 256, 32, 16]
    assert end == PruningDone(arms=(16, 32, 128))
    # Upstream: the pivot heads the downward walk, so its failure skips 32 and 16.
    upstream_order, _ = walk({}, costs)
    assert upstream_order == [64, 128, 256]


def test_skip_other_direction_after_an_improvement() -> None:
    costs = {16: 50.0, 32: 40.0, 64: 30.0, 128: 20.0, 256: 25.0}
    order, end = walk({"prune_up_first": True, "prune_skip_other_direction": True}, costs)
    assert order == [64, 128, 256]
    assert end == PruningDone(arms=(64, 128, 256))
    no_gain = {16: 10.0, 32: 20.0, 64: 30.0, 128: 40.0, 256: 45.0}
    order, _ = walk({"prune_up_first": True, "prune_skip_other_direction": True}, no_gain)
    assert order == [64, 128, 256, 32, 16]


def test_cost_ratio_ends_a_direction_and_drops_the_costly_size() -> None:
    costs = {16: 10.0, 32: 20.0, 64: 30.0, 128: 50.0, 256: 25.0}
    order, end = walk({"prune_cost_ratio": 1.5}, costs)
    # Down: 32 (20) and 16 (10) are fine; up: 128 costs 5x the best (10): ends there, dropped.
    assert order == [64, 32, 16, 128]
    assert end == PruningDone(arms=(16, 32, 64))


def test_explorations_stop_at_the_cost_ratio() -> None:
    job = make_job(prune_cost_ratio=1.5, beta_knob=2.0, max_power=100.0)
    # cost = 0.5 * energy + 0.5 * 100 * time = 1750 for time 10, energy 2500
    args = {"batch_size": 64, "time": 10.0, "energy": 2500.0, "metric": 0.1, "current_epoch": 1}
    assert not judged(job, **args, best_cost=1000.0).stop  # beta bound: 2000
    explore = judged(job, **args, best_cost=1000.0, exploring=True)  # bound: 1500
    assert (explore.stop, explore.converged) == (True, False)


def test_predictive_early_stop() -> None:
    # After 2 epochs the cost is 1750 (875 an epoch): a third would reach 2625 > 2 * 1200.
    args = {"batch_size": 64, "time": 10.0, "energy": 2500.0, "metric": 0.1, "current_epoch": 2}
    plain = judged(make_job(max_power=100.0), **args, best_cost=1200.0)
    assert not plain.stop
    predictive = judged(
        make_job(max_power=100.0, early_stop_predictive=True), **args, best_cost=1200.0
    )
    assert predictive.stop
    assert "predicted" in predictive.message


def test_pooled_noise_shares_one_coefficient_of_variation() -> None:
    observations = {
        32: CostStats.of([90.0, 110.0]),  # cv^2 = 0.01 with 1 dof
        64: CostStats.of([200.0, 200.0, 200.0]),  # cv^2 = 0 with 2 dof
        128: CostStats.of([50.0]),
    }
    cv2 = pooled_cv2(observations)
    prior = POOLED_CV_PRIOR_DOF * POOLED_CV_PRIOR**2  # the prior, as that many dof
    assert cv2 == pytest.approx((prior + 200.0 / 100.0**2) / (POOLED_CV_PRIOR_DOF + 3))
    single = arm_posterior(observations[128], 0.0, 0.0, cv2)
    assert single.mean == pytest.approx(-50.0)
    assert single.std == pytest.approx(math.sqrt(cv2) * 50.0)
    assert pooled_cv2({128: observations[128]}) == pytest.approx(POOLED_CV_PRIOR**2)


def test_pooled_noise_does_not_collapse_on_an_arm_that_always_costs_the_same() -> None:
    # 32 ran 10 times at exactly 100 (its runs always take the same epochs); 48 ran once, at 101.
    observations = {32: CostStats.of([100.0] * 10), 48: CostStats.of([101.0])}
    cv2 = pooled_cv2(observations)
    assert 0.0 < cv2 < POOLED_CV_PRIOR**2  # the evidence lowers it, towards zero only in the limit
    prior = POOLED_CV_PRIOR_DOF * POOLED_CV_PRIOR**2
    assert cv2 == pytest.approx(prior / (POOLED_CV_PRIOR_DOF + 9))
    job = make_job(
        bandit="thompson",
        bandit_exploit_after=0,
        bandit_noise="pooled",
        bandit_exploit_optimism=0.5,
    )
    # 48's one run is 1% dearer, well within its posterior's spread: it runs again.
    assert choose_arm(job, (32, 48), observations, random.Random(0), pulls=1) == 48


def test_exploit_after_picks_the_lowest_mean() -> None:
    job = make_job(
        bandit="thompson", bandit_exploit_after=3, mab_num_explorations=1, bandit_noise="pooled"
    )
    observations = {32: CostStats.of([100.0]), 64: CostStats.of([104.0]), 128: CostStats.of([99.0])}
    sampled = {
        choose_arm(job, (32, 64, 128), observations, random.Random(s), pulls=0) for s in range(200)
    }
    assert len(sampled) > 1  # before: Thompson sampling, close arms all get chosen
    exploited = {
        choose_arm(job, (32, 64, 128), observations, random.Random(s), pulls=3) for s in range(50)
    }
    assert exploited == {128}


def test_exploit_optimism_gives_an_arm_seen_once_a_second_run_while_it_may_be_cheapest() -> None:
    # 64: six runs, mean 100, spread enough for a pooled coefficient of variation of about 0.14;
    # 128: one run. Its posterior is wide (sqrt(cv2) * its cost), 64's narrow (/ sqrt(6)).
    steady = CostStats.of([80.0, 120.0, 90.0, 110.0, 100.0, 100.0])

    def exploited(once: float, optimism: float) -> int:
        job = make_job(
            bandit="thompson",
            bandit_exploit_after=0,
            bandit_noise="pooled",
            mab_num_explorations=1,
            bandit_exploit_optimism=optimism,
        )
        observations = {64: steady, 128: CostStats.of([once])}
        return choose_arm(job, (64, 128), observations, random.Random(0), pulls=1)

    assert exploited(108.0, 0.0) == 64  # the lowest mean: 128's one unlucky run settles it
    assert exploited(108.0, 1.0) == 128  # 108 - 1 sd (about 15) is below 100 - 1 sd (about 6)
    assert exploited(130.0, 1.0) == 64  # too far behind to be the cheapest
    assert exploited(108.0, 0.5) == 64  # less optimism: 108 - 7.6 is above 100 - 2.9


def test_best_reference_run_or_mean() -> None:
    converged = {
        32: ConvergedStats(count=2, total=300.0, best=100.0),  # mean 150
        64: ConvergedStats(count=2, total=240.0, best=110.0),  # mean 120
        128: ConvergedStats(),
    }
    run = best_reference(StopRules.of(make_job(early_stop_reference="best_run")), converged)
    mean = best_reference(StopRules.of(make_job(early_stop_reference="best_mean")), converged)
    assert (run.batch_size, run.cost) == (32, 100.0)  # type: ignore[union-attr]
    assert (mean.batch_size, mean.cost) == (64, 120.0)  # type: ignore[union-attr]
    assert best_reference(StopRules.of(make_job()), {}) is None
