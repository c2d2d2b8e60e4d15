"""Pruning rounds (SPEC 4.2), as pure functions of the exploration history."""

from __future__ import annotations

import pytest

from tests.policy.helpers import explored, make_job
from zeus_bso.errors import NoConvergedBatchSizeError
from zeus_bso.policy import TrialKind, TrialState, TrialStatus, next_pruning_step
from zeus_bso.policy.pruning import ExplorationInFlight, ExploreNext, PruningDone, PruningSettings
from zeus_bso.spec import CreatedJob


def test_round_zero_starts_at_default_then_goes_down_then_up() -> None:
    job = make_job(batch_sizes=[16, 32, 64, 128, 256], default_batch_size=64)
    history: list = []
    order = []
    costs = {16: 50.0, 32: 40.0, 64: 30.0, 128: 20.0, 256: 25.0}
    for number in range(1, 6):
        step = next_pruning_step(PruningSettings.of(job), tuple(history))
        assert isinstance(step, ExploreNext)
        assert step.round == 0
        order.append(step.batch_size)
        history.append(
            explored(0, step.batch_size, number, converged=True, cost=costs[step.batch_size])
        )
    assert order == [64, 32, 16, 128, 256]


def test_direction_stops_at_first_non_converging_batch_size() -> None:
    job = make_job(batch_sizes=[16, 32, 64, 128, 256], default_batch_size=64)
    history = (
        explored(0, 64, 1, converged=True, cost=10.0),
        explored(0, 32, 2, converged=False, cost=99.0),
    )
    step = next_pruning_step(PruningSettings.of(job), history)
    assert step == ExploreNext(batch_size=128, round=0)  # 16 is skipped: 32 did not converge
    history += (explored(0, 128, 3, converged=False, cost=99.0),)
    # 256 is skipped too; round 1 pivots on the only converged size, 64.
    assert next_pruning_step(PruningSettings.of(job), history) == ExploreNext(
        batch_size=64, round=1
    )


def test_next_round_pivots_on_cheapest_and_keeps_only_converged() -> None:
    job = make_job(batch_sizes=[16, 32, 64, 128, 256], default_batch_size=64, num_pruning_rounds=2)
    history = (
        explored(0, 64, 1, converged=True, cost=30.0),
        explored(0, 32, 2, converged=True, cost=40.0),
        explored(0, 16, 3, converged=False),
        explored(0, 128, 4, converged=True, cost=20.0),
        explored(0, 256, 5, converged=True, cost=25.0),
    )
    order = []
    for number in range(6, 10):
        step = next_pruning_step(PruningSettings.of(job), history)
        assert isinstance(step, ExploreNext)
        assert step.round == 1
        order.append(step.batch_size)
        history += (explored(1, step.batch_size, number, converged=True, cost=1.0),)
    assert order == [128, 64, 32, 256]
    assert next_pruning_step(PruningSettings.of(job), history) == PruningDone(
        arms=(32, 64, 128, 256)
    )


def test_in_flight_exploration_makes_the_next_run_concurrent() -> None:
    job = make_job()
    history = (explored(0, 64, 1, status=TrialStatus.DISPATCHED),)
    assert next_pruning_step(PruningSettings.of(job), history) == ExplorationInFlight()


def test_abandoned_exploration_frees_its_slot() -> None:
    job = make_job()
    history = (explored(0, 64, 1, status=TrialStatus.ABANDONED),)
    assert next_pruning_step(PruningSettings.of(job), history) == ExploreNext(
        batch_size=64, round=0
    )


def test_unreported_failures_are_bounded() -> None:
    job = make_job(max_unreported_failures=2)
    one_failure = (explored(0, 64, 1, status=TrialStatus.FAILED),)
    assert next_pruning_step(PruningSettings.of(job), one_failure) == ExploreNext(
        batch_size=64, round=0
    )
    two_failures = (*one_failure, explored(0, 64, 2, status=TrialStatus.FAILED))
    # 64 now counts as not converging: the down direction stops and the up direction begins.
    assert next_pruning_step(PruningSettings.of(job), two_failures) == ExploreNext(
        batch_size=128, round=0
    )


def test_runs_that_vanish_before_their_first_report_count_as_failures() -> None:
    """An OOM kill or a lost node ends no trial: its lease runs out. Without a report it counts
    toward max_unreported_failures like a failed trial; after a report it says nothing bad."""
    job = make_job(max_unreported_failures=2)
    silent = explored(0, 64, 1, status=TrialStatus.ABANDONED)
    reported = TrialState(2, 64, TrialKind.EXPLORATION, 0, TrialStatus.ABANDONED, epochs=1)
    assert next_pruning_step(PruningSettings.of(job), (silent, reported)) == ExploreNext(
        batch_size=64, round=0
    )
    twice = (silent, reported, explored(0, 64, 3, status=TrialStatus.ABANDONED))
    assert next_pruning_step(PruningSettings.of(job), twice) == ExploreNext(batch_size=128, round=0)
    mixed = (silent, explored(0, 64, 2, status=TrialStatus.FAILED))
    assert next_pruning_step(PruningSettings.of(job), mixed) == ExploreNext(batch_size=128, round=0)


def test_first_report_in_a_round_decides() -> None:
    job = make_job(batch_sizes=[64], default_batch_size=64, num_pruning_rounds=1)
    history = (
        explored(0, 64, 2, converged=True, cost=5.0),
        explored(0, 64, 1, converged=False),  # late report of an abandoned trial
    )
    with pytest.raises(NoConvergedBatchSizeError):
        next_pruning_step(PruningSettings.of(job), history)


def test_round_without_converged_batch_size_is_a_clear_error() -> None:
    job = make_job(batch_sizes=[32, 64, 128], default_batch_size=64)
    history = (explored(0, 64, 1, converged=False), explored(0, 128, 2, converged=False))
    with pytest.raises(NoConvergedBatchSizeError) as info:
        next_pruning_step(PruningSettings.of(job), history)
    assert info.value.tried == [64, 128]
    assert "Reconfigure" in str(info.value)


def test_zero_rounds_makes_every_batch_size_an_arm() -> None:
    job = make_job(num_pruning_rounds=0)
    assert next_pruning_step(PruningSettings.of(job), ()) == PruningDone(
        arms=(16, 32, 64, 128, 256)
    )


def test_first_bandit_decision_uses_the_pruning_observations() -> None:
    import random

    from zeus_bso.policy import CostStats, JobHistory, TrialKind, decide

    job = make_job(
        batch_sizes=[32, 64, 128],
        default_batch_size=64,
        num_pruning_rounds=1,
        mab_num_explorations=1,
    )
    costs = {64: 30.0, 32: 50.0, 128: 20.0}
    history = JobHistory(
        explorations=tuple(
            explored(0, b, n, converged=True, cost=costs[b]) for n, b in enumerate(costs, 1)
        ),
        observations={b: CostStats.of([c]) for b, c in costs.items()},
    )
    picks = {decide(job, history, random.Random(seed)).batch_size for seed in range(20)}
    dispatch = decide(job, history, random.Random(0))
    assert dispatch.kind is TrialKind.BANDIT
    assert picks == {128}  # one exact observation each: the cheapest arm, never a random one


def walk(job: CreatedJob, costs: dict[int, float | None]) -> list[int]:
    """The explorations of one round, in order, each converging at ``costs`` (None: not
    converging); the walk ends when pruning is done."""
    history: list[TrialState] = []
    order = []
    while True:
        step = next_pruning_step(PruningSettings.of(job), tuple(history))
        if not isinstance(step, ExploreNext):
            return order
        cost = costs[step.batch_size]
        order.append(step.batch_size)
        history.append(
            explored(
                step.round,
                step.batch_size,
                len(history) + 1,
                converged=cost is not None,
                cost=cost,
            )
        )


STRIDED = {
    "num_pruning_rounds": 1,
    "prune_up_first": True,
    "prune_skip_other_direction": True,
    "prune_cost_ratio": 1.5,
}


def test_a_strided_walk_steps_over_batch_sizes_then_tries_the_cheapests_neighbours() -> None:
    sizes = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    job = make_job(batch_sizes=sizes, default_batch_size=1024, prune_stride=2, **STRIDED)
    # Cost falls all the way up to 16384 (movielens-like): up by two, 4096 then 16384, then
    # 16384's untried neighbour 8192; the way down is skipped (up found a cheaper one).
    costs: dict[int, float | None] = {1024: 100.0, 2048: 80.0, 4096: 70.0, 8192: 55.0}
    costs[16384] = 50.0
    assert walk(job, costs) == [1024, 4096, 16384, 8192]
    assert next_pruning_step(PruningSettings.of(job), ()) == ExploreNext(1024, 0)
    # Every batch size in turn with stride 1: one more full run.
    one = make_job(batch_sizes=sizes, default_batch_size=1024, prune_stride=1, **STRIDED)
    assert walk(one, costs) == [1024, 2048, 4096, 8192, 16384]


def test_a_strided_walk_follows_the_cheapest_through_its_neighbours() -> None:
    sizes = [8, 16, 32, 48, 64, 96, 128, 192]
    job = make_job(batch_sizes=sizes, default_batch_size=192, prune_stride=2, **STRIDED)
    # Down from 192 by two: 96, 48, 16 (2x the cheapest: the direction ends); 8 is never
    # tried. Then the cheapest's neighbours: 48's smaller one, 32, is cheaper still, and its own
    # neighbours (16, 48) are tried already: 64 is not, since 48 is no longer the cheapest.
    costs: dict[int, float | None] = {192: 140.0, 128: 130.0, 96: 110.0, 64: 105.0, 48: 100.0}
    costs |= {32: 95.0, 16: 200.0, 8: None}
    assert walk(job, costs) == [192, 96, 48, 16, 32]
    done = next_pruning_step(PruningSettings.of(job), tuple(_history(costs, [192, 96, 48, 16, 32])))
    assert done == PruningDone(arms=(32, 48, 96, 192))  # 16 was over the cost ratio


def _history(costs: dict[int, float | None], order: list[int]) -> list[TrialState]:
    return [
        explored(0, b, i, converged=costs[b] is not None, cost=costs[b])
        for i, b in enumerate(order, start=1)
    ]


def test_a_strided_walk_that_cannot_converge_past_a_size_still_tries_its_neighbour() -> None:
    sizes = [16, 32, 64, 128, 256]
    job = make_job(batch_sizes=sizes, default_batch_size=256, prune_stride=2, **STRIDED)
    # Down by two: 64 converges cheaper, 16 does not; 64's neighbours 32 and 128 are tried.
    costs: dict[int, float | None] = {256: 100.0, 128: 90.0, 64: 80.0, 32: 85.0, 16: None}
    assert walk(job, costs) == [256, 64, 16, 32, 128]
