"""Thompson sampling (SPEC 4.3), the stop rules and the cost (SPEC 1, 4.1)."""

from __future__ import annotations

import math
import random

import pytest

from tests.policy.helpers import judged, make_job
from zeus_bso.policy import (
    BestRun,
    CostStats,
    JobHistory,
    TrialKind,
    arm_posterior,
    choose_arm,
    decide,
    rng_for,
    zeus_cost,
)


def test_cost_mixes_energy_and_time() -> None:
    assert zeus_cost(1000.0, 10.0, 0.5, 300.0) == pytest.approx(0.5 * 1000 + 0.5 * 300 * 10)
    assert zeus_cost(1000.0, 10.0, 1.0, 300.0) == 1000.0
    assert zeus_cost(1000.0, 10.0, 0.0, 300.0) == 3000.0


def test_posterior_matches_the_conjugate_formulas() -> None:
    costs = [100.0, 120.0, 110.0]
    stats = CostStats.of(costs)
    rewards = [-c for c in costs]
    variance = sum((r - sum(rewards) / 3) ** 2 for r in rewards) / 3
    prior_mean, prior_precision = -50.0, 0.01
    posterior = arm_posterior(stats, prior_mean, prior_precision)
    expected_precision = prior_precision + 3 / variance
    expected_mean = (prior_precision * prior_mean + sum(rewards) / variance) / expected_precision
    assert posterior.precision == pytest.approx(expected_precision)
    assert posterior.mean == pytest.approx(expected_mean)


def test_single_or_constant_observations_have_infinite_precision() -> None:
    assert arm_posterior(CostStats.of([42.0]), 0.0, 0.0).precision == math.inf
    posterior = arm_posterior(CostStats.of([42.0, 42.0]), 0.0, 0.0)
    assert posterior.precision == math.inf
    assert posterior.mean == -42.0


def test_under_explored_arms_come_first() -> None:
    job = make_job(mab_num_explorations=2)
    observations = {32: CostStats.of([1.0, 2.0]), 64: CostStats.of([5.0]), 128: CostStats.of([])}
    picks = {choose_arm(job, (32, 64, 128), observations, random.Random(s)) for s in range(50)}
    assert picks == {64, 128}


def test_thompson_sampling_prefers_the_cheaper_arm() -> None:
    job = make_job(mab_num_explorations=2)
    observations = {32: CostStats.of([100.0, 110.0, 105.0]), 64: CostStats.of([200.0, 190.0])}
    rng = random.Random(0)
    picks = [choose_arm(job, (32, 64), observations, rng) for _ in range(200)]
    assert picks.count(32) == 200


def test_unseeded_draws_are_independent_across_arms() -> None:
    # Two arms with identical posteriors: independent draws pick each about half the time. With
    # one shared normal deviate (upstream's clock re-seeding) both samples are equal and the
    # choice never varies.
    job = make_job(batch_sizes=[32, 64], default_batch_size=32, mab_seed=None)
    observations = {32: CostStats.of([100.0, 120.0]), 64: CostStats.of([100.0, 120.0])}
    history = JobHistory(arms=(32, 64), observations=observations)
    picks = [decide(job, history, rng_for(job, n)).batch_size for n in range(1, 401)]
    assert 120 <= picks.count(32) <= 280


def test_seeded_decisions_are_reproducible() -> None:
    job = make_job(batch_sizes=[32, 64, 128], default_batch_size=32, mab_seed=7)
    observations = {b: CostStats.of([100.0 + b, 140.0 - b / 2]) for b in (32, 64, 128)}
    history = JobHistory(arms=(32, 64, 128), observations=observations)
    first = [decide(job, history, rng_for(job, n)).batch_size for n in range(1, 60)]
    second = [decide(job, history, rng_for(job, n)).batch_size for n in range(1, 60)]
    assert first == second
    assert len(set(first)) > 1


def test_concurrent_runs_get_the_best_converged_batch_size() -> None:
    from tests.policy.helpers import explored
    from zeus_bso.policy import TrialStatus

    job = make_job()
    in_flight = (
        explored(0, 64, 1, converged=True, cost=10.0),
        explored(0, 32, 2, status=TrialStatus.DISPATCHED),
    )
    history = JobHistory(explorations=in_flight, best=BestRun(128, 10.0))
    dispatch = decide(job, history, random.Random(0))
    assert (dispatch.batch_size, dispatch.kind) == (128, TrialKind.CONCURRENT)
    first = (explored(0, 64, 1, status=TrialStatus.DISPATCHED),)
    no_best = decide(job, JobHistory(explorations=first), random.Random(0))
    assert no_best.batch_size == job.default_batch_size


def _judge(job_overrides: dict | None = None, **report: float) -> object:
    job = make_job(**(job_overrides or {}))
    args = {"time": 10.0, "energy": 1000.0, "metric": 0.1, "current_epoch": 1, "best_cost": None}
    args.update(report)
    return judged(job, batch_size=64, **args)  # type: ignore[arg-type]


def test_stop_rules() -> None:
    keep = _judge()
    assert (keep.stop, keep.converged) == (False, False)
    reached = _judge(metric=0.6)
    assert (reached.stop, reached.converged, reached.message) == (True, True, "Train succeeded")
    lower = _judge({"higher_is_better_metric": False, "target_metric": 0.2}, metric=0.1)
    assert lower.converged
    at_max = _judge({"max_epochs": 3}, current_epoch=3)
    assert (at_max.stop, at_max.converged) == (True, False)
    assert "max_epoch(3)" in at_max.message
    # cost here is 0.5 * 1000 + 0.5 * 250 * 10 = 1750
    early = _judge(best_cost=800.0)
    assert (early.stop, early.converged) == (True, False)
    assert "exceeded the cost upper bound" in early.message
    within = _judge(best_cost=900.0)
    assert not within.stop
    disabled = _judge({"beta_knob": None}, best_cost=1.0)
    assert not disabled.stop
