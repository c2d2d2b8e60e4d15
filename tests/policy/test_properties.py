"""Property tests of the policy's invariants (hypothesis)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zeus_bso import policy
from zeus_bso.errors import NoConvergedBatchSizeError
from zeus_bso.policy import (
    BestRun,
    CostStats,
    Event,
    JobHistory,
    TrialKind,
    TrialState,
    TrialStatus,
    arm_posterior,
    conjugate_update,
    decide,
)
from zeus_bso.policy.bandits import BANDITS
from zeus_bso.policy.orchestration import counted, inputs
from zeus_bso.policy.power import best_power_limit, epoch_cost
from zeus_bso.policy.types import JobState, Prior, PriorMode
from zeus_bso.sim import InMemoryJob
from zeus_bso.sim.memory import MemoryStore
from zeus_bso.spec import (
    UPSTREAM_OPTIONS,
    CreatedJob,
    GpuConfig,
    PowerMeasurement,
    TrialId,
    profile_key,
)

finite_costs = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)


@st.composite
def jobs(draw: st.DrawFn) -> CreatedJob:
    batch_sizes = draw(st.lists(st.integers(1, 4096), min_size=1, max_size=7, unique=True))
    return CreatedJob(
        job_id="job-1",
        job_id_prefix="job",
        batch_sizes=batch_sizes,
        default_batch_size=draw(st.sampled_from(batch_sizes)),
        num_pruning_rounds=draw(st.integers(0, 3)),
        mab_num_explorations=draw(st.integers(0, 3)),
        mab_prior_mean=draw(st.floats(-1e6, 0.0)),
        mab_prior_precision=draw(st.sampled_from([0.0, 1e-6, 1.0])),
        max_unreported_failures=draw(st.integers(1, 3)),
        window_size=draw(st.integers(0, 3)),
        learning_curve_stop=draw(st.booleans()),
        bandit=draw(st.sampled_from(sorted(BANDITS))),
        bandit_exploit_after=draw(st.sampled_from([None, 0, 2, 5])),
        bandit_exploit_optimism=draw(st.sampled_from([0.0, 0.5, 3.0])),
        mab_seed=draw(st.one_of(st.none(), st.integers(0, 2**32))),
        max_power=250.0,
        number_of_gpus=1,
        gpu_model="V100",
    )


OUTCOMES = ["converged", "not_converged", "failed", "abandoned", "in_flight", "move", "progress"]
GPUS = [
    GpuConfig(max_power=250.0, number_of_gpus=1, gpu_model="V100"),
    GpuConfig(max_power=1000.0, number_of_gpus=4, gpu_model="V100"),
    GpuConfig(max_power=300.0, number_of_gpus=1, gpu_model="A40"),
]
"""Hardware profiles a job moves between (outcome ``move``: registered again on other GPUs)."""


def run_recurrences(job: CreatedJob, outcomes: list[tuple[str, float]]) -> list[dict[str, Any]]:
    """Drive the policy's state machine as the server does, through the simulator's in-memory
    job: each trial ends as its outcome says (a final report that costs ``cost``, converged or
    not; ended without one; its lease expired; still running; a report of its first epoch,
    halfway to the target, which may stop it). Returns one record per
    decision, with the decision the same state gives when asked again. A ``move`` outcome
    registers the job again on other GPUs (chosen by its cost) instead of starting a trial; its
    record says only that."""
    memory = InMemoryJob(job)
    records: list[dict[str, Any]] = []
    halfway = job.target_metric / 2 - 1.0
    for outcome, cost in outcomes:
        if outcome == "move":
            memory.register(GPUS[int(cost) % len(GPUS)])
            records.append({"moved": True})
            continue
        profile = profile_key(memory.job)
        state = counted(memory.store, memory.state)
        read = inputs(memory.store, memory.job, state)
        try:
            again = policy.after_dispatch(
                memory.job,
                state,
                read.explorations,
                read.windowed,
                profile=profile,
            )
        except NoConvergedBatchSizeError:
            records.append({"error": True})
            break
        trial = memory.next_trial()
        records.append({"dispatch": memory.last_dispatch, "again": again.dispatch})
        if outcome in ("converged", "not_converged"):
            epochs = 1
            if outcome == "converged" and int(cost) % 2:  # a learning curve: a free first epoch
                memory.report(trial, time=0.0, energy=0.0, metric=halfway, current_epoch=1)
                epochs = 3
            # No time: the cost is all energy (eta x energy).
            answer = memory.report(
                trial,
                time=0.0,
                energy=cost / job.eta_knob,
                metric=job.target_metric if outcome == "converged" else -1.0,
                current_epoch=epochs if outcome == "converged" else job.max_epochs,
            )
            assert answer.stop_train
            assert answer.converged == (outcome == "converged")
        elif outcome == "progress":
            memory.report(
                trial,
                time=0.0,
                energy=cost / job.eta_knob,
                metric=halfway,
                current_epoch=1,
            )
        elif outcome == "failed":
            memory.end_trial(trial)
        elif outcome == "abandoned":
            number = trial.trial_number
            memory.trials[number - 1] = policy.after_event(memory.trials[number - 1], Event.EXPIRE)
    return records


histories = st.lists(st.tuples(st.sampled_from(OUTCOMES), finite_costs), max_size=40)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(jobs(), histories)
def test_choice_is_always_a_configured_batch_size(job: CreatedJob, outcomes: list) -> None:
    for record in run_recurrences(job, outcomes):
        if "dispatch" in record:
            dispatch = record["dispatch"]
            assert dispatch.batch_size in job.batch_sizes
            if dispatch.kind is TrialKind.BANDIT:
                assert dispatch.arms is not None
                assert dispatch.batch_size in dispatch.arms


@SETTINGS
@given(jobs(), histories)
def test_same_history_and_seed_give_the_same_decision(job: CreatedJob, outcomes: list) -> None:
    for record in run_recurrences(job, outcomes):
        if "dispatch" in record and job.mab_seed is not None:
            assert record["dispatch"] == record["again"]
        if "dispatch" in record and record["dispatch"].kind is not TrialKind.BANDIT:
            # Pruning decisions use no randomness at all.
            assert record["dispatch"] == record["again"]


@SETTINGS
@given(jobs(), histories)
def test_non_converged_batch_size_is_not_explored_again_in_that_round(
    job: CreatedJob, outcomes: list
) -> None:
    failed_in_round: set[tuple[int, int]] = set()
    failures: dict[tuple[int, int], int] = {}
    for record, (outcome, _) in zip(run_recurrences(job, outcomes), outcomes, strict=False):
        if "moved" in record:
            continue
        if "dispatch" not in record:
            break
        dispatch = record["dispatch"]
        if dispatch.kind is not TrialKind.EXPLORATION:
            continue
        key = (dispatch.round, dispatch.batch_size)
        assert key not in failed_in_round
        if outcome == "not_converged":
            failed_in_round.add(key)
        elif outcome == "failed":
            failures[key] = failures.get(key, 0) + 1
            if failures[key] >= job.max_unreported_failures:
                failed_in_round.add(key)


MOVED_MID_ROUND = (
    CreatedJob(
        job_id="job-1", job_id_prefix="job", batch_sizes=[1, 2, 3], default_batch_size=1,
        num_pruning_rounds=2, mab_num_explorations=0, mab_prior_mean=0.0,
        mab_prior_precision=0.0, max_unreported_failures=1, window_size=0,
        learning_curve_stop=False, max_power=250.0, number_of_gpus=1, gpu_model="V100",
    ),
    [("converged", 7340175352.0)] * 3 + [("converged", 0.0), ("in_flight", 0.0)]
    + [("converged", 0.0)] * 2 + [("move", 1.0), ("converged", 268641236.0), ("converged", 0.0)],
)  # fmt: skip
"""Found by hypothesis: round 1 explores 3 (in flight) from 1, the cheapest of round 0 on
the first GPUs; on the second GPUs the round-0 sizes compare anew, the walk starts from 2, and
2 was explored beside the running 3."""


@SETTINGS
@given(jobs(), histories)
@example(*MOVED_MID_ROUND)
def test_exploration_is_serial(job: CreatedJob, outcomes: list) -> None:
    in_flight = False
    for record, (outcome, _) in zip(run_recurrences(job, outcomes), outcomes, strict=False):
        if "moved" in record:
            continue
        if "dispatch" not in record:
            break
        dispatch = record["dispatch"]
        if in_flight:
            assert dispatch.kind is not TrialKind.EXPLORATION
        if dispatch.kind is TrialKind.EXPLORATION and outcome == "in_flight":
            in_flight = True


@SETTINGS
@given(
    st.floats(-1e9, 1e9),
    st.floats(0.0, 1e3),
    st.floats(1e-9, 1e9),
    st.integers(0, 1000),
    st.floats(-1e9, 1e9),
)
def test_posterior_precision_grows_with_observations_of_known_precision(
    prior_mean: float, prior_precision: float, reward_precision: float, n: int, mean: float
) -> None:
    before = conjugate_update(prior_mean, prior_precision, n, mean * n, reward_precision)
    after = conjugate_update(prior_mean, prior_precision, n + 1, mean * (n + 1), reward_precision)
    assert after.precision >= before.precision


@SETTINGS
@given(st.lists(st.floats(0.0, 1e9), min_size=2, max_size=50), st.floats(0.0, 1e3))
def test_more_of_the_same_evidence_never_lowers_precision(
    costs: list[float], prior_precision: float
) -> None:
    stats = CostStats.of(costs)
    before = arm_posterior(stats, 0.0, prior_precision).precision
    at_mean = arm_posterior(stats.add(stats.mean), 0.0, prior_precision).precision
    doubled = arm_posterior(CostStats.of(costs + costs), 0.0, prior_precision).precision
    assert at_mean >= before * (1 - 1e-9)
    assert doubled >= before * (1 - 1e-9)


@st.composite
def arbitrary_histories(draw: st.DrawFn, job: CreatedJob) -> JobHistory:
    sizes = st.sampled_from(job.batch_sizes)
    explorations = draw(
        st.lists(
            st.builds(
                TrialState,
                st.integers(1, 10_000),
                sizes,
                st.just(TrialKind.EXPLORATION),
                st.integers(0, 3),
                st.sampled_from(list(TrialStatus)),
                epochs=st.one_of(st.none(), st.integers(1, 10)),
                converged=st.one_of(st.none(), st.booleans()),
                cost=st.one_of(st.none(), finite_costs),
            ),
            max_size=30,
        )
    )
    observations = draw(
        st.dictionaries(sizes, st.lists(finite_costs, max_size=8).map(CostStats.of))
    )
    use_arms = draw(st.booleans())
    arms = tuple(sorted(draw(st.sets(sizes, min_size=1)))) if use_arms else None
    best = draw(st.one_of(st.none(), st.builds(BestRun, sizes, finite_costs)))
    return JobHistory(
        arms=arms, explorations=tuple(explorations), observations=observations, best=best
    )


@SETTINGS
@given(st.data())
def test_no_exception_on_any_finite_input(data: st.DataObject) -> None:
    job = data.draw(jobs())
    history = data.draw(arbitrary_histories(job))
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    try:
        dispatch = decide(job, history, rng)
    except NoConvergedBatchSizeError:
        return
    assert dispatch.batch_size in job.batch_sizes
    for stats in history.observations.values():
        posterior = arm_posterior(stats, job.mab_prior_mean, job.mab_prior_precision)
        assert not math.isnan(posterior.precision)


profiles = st.lists(
    st.tuples(
        st.sampled_from([100.0 + 25 * i for i in range(9)]),
        st.floats(1.0, 1e4, allow_nan=False),
        st.floats(0.0, 1e7, allow_nan=False),
    ),
    min_size=1,
    max_size=9,
    unique_by=lambda m: m[0],
)


@given(profiles, st.floats(0.0, 1.0), st.one_of(st.none(), st.floats(1.0, 3.0)))
def test_the_chosen_power_limit_is_the_cheapest_within_the_slowdown_bound(
    measured: list[tuple[float, float, float]], eta: float, bound: float | None
) -> None:
    """Whatever the profile: the limit is one measured, its epoch within the bound of the
    highest limit's (which is always within), and none within the bound costs less."""
    measurements = [
        PowerMeasurement(power_limit=w, time_per_epoch=t, energy_per_epoch=e)
        for w, t, e in measured
    ]
    chosen = best_power_limit(measurements, eta, 400.0, bound)
    by_limit = {m.power_limit: m for m in measurements}
    fastest = by_limit[max(by_limit)].time_per_epoch
    slowest = math.inf if bound is None else bound * fastest
    allowed = [m for m in measurements if m.time_per_epoch <= slowest]
    assert by_limit[chosen] in allowed
    cost = epoch_cost(by_limit[chosen], eta, 400.0)
    assert all(cost <= epoch_cost(m, eta, 400.0) for m in allowed)


SIZES = [16, 32, 64, 128, 256]


def _bounded_job(**bounds: Any) -> CreatedJob:
    return CreatedJob(
        **{
            **UPSTREAM_OPTIONS,
            "job_id": "job-1",
            "job_id_prefix": "job",
            "batch_sizes": SIZES,
            "default_batch_size": 64,
            "target_metric": 0.9,
            "eta_knob": 0.5,
            "max_power": 100.0,
            "number_of_gpus": 1,
            "gpu_model": "V100",
            **bounds,
        }
    )


@st.composite
def bounded_jobs(draw: st.DrawFn) -> tuple[CreatedJob, Prior | None]:
    """A job with any of the bounds a run may be stopped by (cost knobs, a learning curve, a
    cap against the default, a horizon) and maybe a related job's curve, in either mode."""
    job = _bounded_job(
        max_epochs=draw(st.integers(2, 8)),
        beta_knob=draw(st.sampled_from([None, 1.2, 2.0])),
        prune_cost_ratio=draw(st.sampled_from([None, 1.1, 1.5])),
        learning_curve_stop=draw(st.booleans()),
        early_stop_predictive=draw(st.booleans()),
        expected_recurrences=draw(st.sampled_from([None, 2, 5, 10])),
        max_run_cost_ratio=draw(st.sampled_from([None, 1.1, 1.5])),
    )
    if not draw(st.booleans()):
        return job, None
    costs = {size: draw(st.floats(1.0, 100.0)) for size in SIZES}
    per_epoch = {size: draw(st.floats(0.5, 50.0)) for size in SIZES}
    took = {size: float(draw(st.integers(1, 8))) for size in SIZES}
    hopeless = draw(st.sets(st.sampled_from(SIZES), max_size=2))
    mode = draw(st.sampled_from(list(PriorMode)))
    known = {size: cost for size, cost in costs.items() if size not in hopeless}
    return job, Prior.of(known, hopeless, per_epoch, mode, epochs=took)


runs = st.lists(
    st.tuples(
        st.booleans(),  # the run must deliver a model
        st.floats(0.1, 40.0),  # what an epoch costs
        st.one_of(st.none(), st.integers(1, 8)),  # the epoch it reaches the target (None: never)
    ),
    min_size=1,
    max_size=15,
)
TRUSTED = Prior.of(
    {size: 20.0 for size in SIZES}, (), {size: 10.0 for size in SIZES}, PriorMode.TRUST
)
"""A related job's curve whose epochs cost 10 at every size, trusted."""


@SETTINGS
@given(bounded_jobs(), runs)
@example((_bounded_job(max_epochs=6), TRUSTED), [(True, 50.0, 3)])  # 5x the parent's epochs
@example(  # an exploration past the budget of ten runs (the default converged at 40)
    (_bounded_job(max_epochs=6, expected_recurrences=10), None),
    [(False, 10.0, 4), (True, 30.0, 6)],
)
def test_a_run_that_must_deliver_stops_only_at_its_target_or_max_epochs(
    bounded: tuple[CreatedJob, Prior | None], planned: list[tuple[bool, float, int | None]]
) -> None:
    """Whatever bounds the job sets and whatever its history, the last attempt of
    `zeus_bso.until_converged` trains on until it reaches its target or ``max_epochs``; so does
    every run of a pinned job (one in three here, pinned to a size drawn from the runs')."""
    job, prior = bounded
    pinned = SIZES[int(planned[0][1]) % len(SIZES)] if int(planned[0][1]) % 3 == 0 else None
    memory = InMemoryJob(job, MemoryStore(job=JobState(prior=prior, pinned=pinned)))
    for deliver, per_epoch, reaches in planned:
        try:
            trial = memory.next_trial(deliver=deliver)
        except NoConvergedBatchSizeError:
            return
        for epoch, reached, answer in _trained(memory, trial, per_epoch, reaches):
            if deliver or pinned is not None:
                assert answer.stop_train is (reached or epoch == job.max_epochs), answer
        memory.end_trial(trial)


def _trained(
    memory: InMemoryJob,
    trial: TrialId,
    per_epoch: float,
    reaches: int | None,
    restarts: set[int] | None = None,
    work: float = 0.0,
) -> Iterator[tuple[int, bool, Any]]:
    """Report ``trial``'s epochs, each costing ``per_epoch``, its metric at the target from
    epoch ``reaches`` on (None: never), until the answer stops it: each epoch, whether it
    reached the target, and the answer. The run restarts after each epoch of ``restarts``
    (resumed: the next epoch costs ``work`` epochs more, the restart's one-off work)."""
    spent = 0.0
    for epoch in range(1, memory.job.max_epochs + 1):
        if restarts is not None and epoch - 1 in restarts:
            memory.resumed(trial)
            spent += work * per_epoch
        spent += per_epoch
        reached = reaches is not None and epoch >= reaches
        answer = memory.report(
            trial,
            time=0.0,
            energy=2 * spent,
            metric=0.95 if reached else 0.1,
            current_epoch=epoch,
        )
        yield epoch, reached, answer
        if answer.stop_train:
            return


events = st.lists(
    st.tuples(
        st.sampled_from(["run", "run", "out_of_memory", "ended"]),  # how the run ends
        st.booleans(),  # the run must deliver a model
        st.floats(0.1, 40.0),  # what an epoch costs
        st.one_of(st.none(), st.integers(1, 8)),  # the epoch it reaches the target (None: never)
    ),
    min_size=1,
    max_size=20,
)


@SETTINGS
@given(bounded_jobs(), events)
def test_any_bounds_prior_and_memory_cap_keep_each_decision_in_bounds(
    bounded: tuple[CreatedJob, Prior | None], history: list[tuple[str, bool, float, int | None]]
) -> None:
    """Runs that converge, never do, run out of memory or end without a report, under any of
    the bounds and with or without a related job's curve: every run gets a configured batch
    size below its GPUs' memory cap, only a run at its target converges, and the policy raises
    nothing but its own answer that no batch size is left."""
    job, prior = bounded
    memory = InMemoryJob(job, MemoryStore(job=JobState(prior=prior)))
    for ending, deliver, per_epoch, reaches in history:
        try:
            trial = memory.next_trial(deliver=deliver)
        except NoConvergedBatchSizeError:  # and NoFittingBatchSizeError
            return
        cap = memory.state.memory_caps.get(profile_key(job))
        assert trial.batch_size in job.batch_sizes
        assert cap is None or trial.batch_size < cap
        if ending == "out_of_memory":
            memory.out_of_memory(trial)
            continue
        if ending == "run":
            for _, reached, answer in _trained(memory, trial, per_epoch, reaches):
                assert answer.converged is (answer.stop_train and reached)
        memory.end_trial(trial)


restarting = st.lists(
    st.tuples(
        st.booleans(),  # the run must deliver a model
        st.floats(0.1, 40.0),  # what an epoch costs
        st.one_of(st.none(), st.integers(1, 8)),  # the epoch it reaches the target (None: never)
        st.sets(st.integers(0, 7), max_size=3),  # the epochs after which it restarts
        st.floats(0.0, 5.0),  # a restart's one-off work, in epochs
    ),
    min_size=1,
    max_size=12,
)


@SETTINGS
@given(bounded_jobs(), restarting)
def test_runs_that_restart_keep_every_decision_in_bounds(
    bounded: tuple[CreatedJob, Prior | None],
    runs_: list[tuple[bool, float, int | None, set[int], float]],
) -> None:
    """Runs killed and resumed (a checkpoint's resume: their epochs after it hold the restart's
    one-off work) under any of the bounds, with or without a related job's curve: a run that
    must deliver stops only at its target or ``max_epochs``, only a run at its target
    converges, and every run gets one of the job's batch sizes."""
    job, prior = bounded
    memory = InMemoryJob(job, MemoryStore(job=JobState(prior=prior)))
    for deliver, per_epoch, reaches, restarts, work in runs_:
        try:
            trial = memory.next_trial(deliver=deliver)
        except NoConvergedBatchSizeError:
            return
        assert trial.batch_size in job.batch_sizes
        for epoch, reached, answer in _trained(memory, trial, per_epoch, reaches, restarts, work):
            assert answer.converged is (answer.stop_train and reached)
            if deliver:
                assert answer.stop_train is (reached or epoch == job.max_epochs), answer
        memory.end_trial(trial)
