"""Out of memory is infeasible on that hardware profile: the policy never dispatches that batch
size, or a larger one, there again; other profiles keep them; convergence is not judged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.policy.helpers import explored, make_job
from zeus_bso.errors import NoConvergedBatchSizeError, NoFittingBatchSizeError
from zeus_bso.policy import (
    BatchSizeStats,
    JobState,
    TrialKind,
    TrialState,
    TrialStatus,
    out_of_memory,
    ran_out_where_it_fit,
)
from zeus_bso.policy.machine import fit_shown
from zeus_bso.policy.pruning import (
    ExplorationInFlight,
    ExploreNext,
    PruningDone,
    PruningSettings,
    next_pruning_step,
)
from zeus_bso.sim.memory import InMemoryJob
from zeus_bso.spec import UPSTREAM_OPTIONS, GpuConfig, JobSpec, TrialId, profile_key

A40 = GpuConfig(gpu_model="A40", number_of_gpus=1, max_power=300.0)


def converge(job: InMemoryJob, trial: TrialId, cost_per_epoch: float = 100.0) -> None:
    """Report one epoch that reaches the target."""
    job.report(trial, time=1.0, energy=cost_per_epoch, metric=0.99, current_epoch=1)


def test_a_default_that_does_not_fit_sends_the_walk_down_and_never_up() -> None:
    job = InMemoryJob(make_job(batch_sizes=[16, 32, 64, 128, 256], default_batch_size=64))
    sizes = []
    for _ in range(4):
        trial = job.next_trial()
        sizes.append(trial.batch_size)
        if trial.batch_size >= 64:
            job.out_of_memory(trial)
        else:
            converge(job, trial)
    # 64 ran out of memory; 32 and 16 are explored; 128 and 256 are never tried (larger).
    assert sizes[:3] == [64, 32, 16]
    assert all(size < 64 for size in sizes[1:])
    assert job.trials[0].status is TrialStatus.INFEASIBLE
    assert job.state.memory_caps == {profile_key(job.job): 64}
    assert 64 not in {s for s, st in job.state.stats.items() if st.reports}  # not judged


def test_the_walk_up_ends_at_the_first_size_that_does_not_fit() -> None:
    job = InMemoryJob(make_job(batch_sizes=[16, 32, 64, 128, 256], default_batch_size=32))
    dispatched = []
    for _ in range(8):
        trial = job.next_trial()
        dispatched.append(trial.batch_size)
        if trial.batch_size >= 128:
            job.out_of_memory(trial)
        else:
            converge(job, trial)
    assert 256 not in dispatched
    assert dispatched.count(128) == 1  # one wasted start, then never again
    assert job.state.arms is not None
    assert 128 not in job.state.arms


def test_a_bandit_size_that_trained_on_its_profile_is_not_capped_there() -> None:
    """64 converged on this profile in pruning; a bandit run of 64 that runs out of memory is
    not the size's doing (a leak, another process on the GPU): the trial is infeasible, but no
    cap is set, and 64 is still drawn. Another profile's own out-of-memory error caps it there
    alone."""
    job = InMemoryJob(
        make_job(batch_sizes=[16, 32, 64], default_batch_size=32, num_pruning_rounds=1, mab_seed=3)
    )
    for _ in range(3):  # prune: every size converges, 64 cheapest
        trial = job.next_trial()
        converge(job, trial, cost_per_epoch={16: 300.0, 32: 200.0, 64: 100.0}[trial.batch_size])
    trial = job.next_trial()  # the decision that ends pruning
    assert job.state.arms is not None
    assert 64 in job.state.arms
    while trial.batch_size != 64:  # the bandit favours 64
        converge(job, trial, 500.0)
        trial = job.next_trial()
    job.out_of_memory(trial)
    assert job.trials[-1].status is TrialStatus.INFEASIBLE
    assert job.state.memory_caps == {}
    later = []
    for _ in range(20):
        t = job.next_trial()
        later.append(t.batch_size)
        converge(job, t, 100.0 if t.batch_size == 64 else 500.0)
    assert 64 in later
    # On another profile 64 never ran: running out there caps it there.
    job.register(A40)
    for _ in range(40):
        t = job.next_trial()
        if t.batch_size == 64:
            job.out_of_memory(t)
            break
        converge(job, t, 100.0)
    assert job.state.memory_caps == {profile_key(A40): 64}


def test_nothing_fits_is_said_with_the_profile() -> None:
    job = InMemoryJob(make_job(batch_sizes=[16, 32], default_batch_size=32))
    job.out_of_memory(job.next_trial())
    job.out_of_memory(job.next_trial())
    with pytest.raises(NoFittingBatchSizeError, match=r"No batch size fits in memory on .*V100"):
        job.next_trial()
    # It names the sizes that ran out (the explorations passed over at the profile's cap).
    with pytest.raises(NoFittingBatchSizeError, match=r"16 and above .* \(tried \[16, 32\]\)"):
        job.next_trial()
    # A subclass of the error a refused dispatch already raises (a 409 for the server).
    assert issubclass(NoFittingBatchSizeError, NoConvergedBatchSizeError)


def test_a_pruning_replay_passes_over_an_infeasible_exploration() -> None:
    job = make_job(batch_sizes=[16, 32, 64, 128], default_batch_size=64)
    history = (
        explored(0, 64, 1, converged=True, cost=10.0),
        explored(0, 32, 2, converged=True, cost=12.0),
        explored(0, 16, 3, converged=True, cost=14.0),
        explored(0, 128, 4, status=TrialStatus.INFEASIBLE),
    )
    # On the profile where 128 ran out (its cap: 128), 128 is passed over.
    capped = PruningSettings.of(job, memory_cap=128, profile="1xV100@250W")
    assert next_pruning_step(capped, history) == ExploreNext(64, round=1)
    # With the dispatching profile's cap at 64, 64 and 128 are passed over from the start.
    settings = PruningSettings.of(job, memory_cap=64, profile="1xV100@250W")
    assert next_pruning_step(settings, ()) == ExploreNext(32, round=0)
    one_round = make_job(batch_sizes=[16, 32, 64, 128], default_batch_size=64, num_pruning_rounds=1)
    done = next_pruning_step(PruningSettings.of(one_round, memory_cap=128), history)
    assert done == PruningDone(arms=(16, 32, 64))
    # Where no cap covers it (another profile's GPUs, or the cap was forgotten), the
    # exploration that ran out says nothing of this profile's memory: 128 is tried again, and
    # the exploration of it that is in flight then is waited for.
    assert next_pruning_step(PruningSettings.of(job), history) == ExploreNext(128, round=0)
    in_flight = (*history, explored(0, 128, 5, status=TrialStatus.DISPATCHED))
    assert isinstance(next_pruning_step(PruningSettings.of(job), in_flight), ExplorationInFlight)


def test_only_an_open_trial_becomes_infeasible_and_a_cap_only_comes_down() -> None:
    job = make_job()
    state = JobState(memory_caps={"1xV100@250W": 64})
    open_trial = TrialState(1, 128, TrialKind.BANDIT, profile="1xV100@250W")
    after_state, after = out_of_memory(job, state, open_trial)
    assert after.status is TrialStatus.INFEASIBLE
    assert after_state.memory_caps == {"1xV100@250W": 64}  # 128 is above the cap already
    smaller = TrialState(2, 32, TrialKind.BANDIT, profile="1xV100@250W")
    assert out_of_memory(job, state, smaller)[0].memory_caps == {"1xV100@250W": 32}
    reported = TrialState(3, 16, TrialKind.BANDIT, status=TrialStatus.REPORTED, profile="x")
    assert out_of_memory(job, state, reported) == (state, reported)


def test_no_cap_is_set_at_or_below_a_size_known_to_fit() -> None:
    """A run of 64 reported on the profile: an out-of-memory error at 64 (or below) is not the
    batch size's, and leaves the cap alone; one at 128 still sets it."""
    job = make_job(batch_sizes=[32, 64, 128])
    profile = profile_key(job)
    state = JobState(stats={64: BatchSizeStats(64, reports=1, mean_cost=10.0)})
    assert state.measured(profile, 64)
    at_64 = TrialState(2, 64, TrialKind.BANDIT, profile=profile)
    after_state, after = out_of_memory(job, state, at_64)
    assert after.status is TrialStatus.INFEASIBLE
    # No cap; its fit is in doubt (see the next test).
    assert (after_state.memory_caps, after_state.memory_doubts) == ({}, {profile: 64})
    assert out_of_memory(job, state, replace(at_64, batch_size=32))[0].memory_caps == {}
    at_128 = TrialState(3, 128, TrialKind.BANDIT, profile=profile)
    assert out_of_memory(job, state, at_128)[0].memory_caps == {profile: 128}


def test_a_size_that_fit_and_runs_out_is_in_doubt_and_capped_if_it_runs_out_again() -> None:
    """A size that trained on the profile and runs out while it trains is not capped at once (a
    leak, another process), but its fit is in doubt: its next run, or a larger size's, is not
    known to fit (the client tries it first); out of memory there again sets the cap even though
    it trained there before (the model, its data or precision needs more memory now), and a
    report at or above the doubt clears it. Another profile is not touched."""
    job = make_job(batch_sizes=[32, 64, 128])
    profile = profile_key(job)
    stats = {size: BatchSizeStats(size, reports=1, mean_cost=10.0) for size in (32, 64, 128)}
    state = JobState(stats=stats)
    assert all(state.fits_known(profile, size) for size in (32, 64, 128))
    at_64 = TrialState(4, 64, TrialKind.BANDIT, profile=profile)
    doubted = ran_out_where_it_fit(job, state, at_64)
    assert doubted.memory_doubts == {profile: 64}
    assert [doubted.fits_known(profile, s) for s in (32, 64, 128)] == [True, False, False]
    assert doubted.fits_known("1xH100@700W", 64) is doubted.measured("1xH100@700W", 64)
    assert ran_out_where_it_fit(job, doubted, replace(at_64, batch_size=128)) == doubted
    assert ran_out_where_it_fit(job, doubted, replace(at_64, batch_size=32)).memory_doubts == {
        profile: 32
    }
    ended = replace(at_64, status=TrialStatus.REPORTED)
    assert ran_out_where_it_fit(job, state, ended) == state  # only an open trial's run says it

    # Its next run runs out again: capped now, and the doubt is moot.
    again = TrialState(5, 64, TrialKind.BANDIT, profile=profile)
    capped, after = out_of_memory(job, doubted, again)
    assert after.status is TrialStatus.INFEASIBLE
    assert (capped.memory_caps, capped.memory_doubts) == ({profile: 64}, {})
    # Without the doubt, the same error sets no cap (it fit), only the doubt: so does a process
    # other than the run's main one, which marks the trial infeasible itself.
    assert out_of_memory(job, state, again)[0] == doubted
    # 128 running out under a doubt at 64 caps 128, and 64 stays in doubt.
    above, _ = out_of_memory(job, doubted, replace(again, batch_size=128))
    assert (above.memory_caps, above.memory_doubts) == ({profile: 128}, {profile: 64})

    # Or its next run trains: a report at or above the doubt clears it; one below does not.
    assert fit_shown(job, doubted, replace(again, batch_size=32)) == doubted
    assert fit_shown(job, doubted, again).memory_doubts == {}
    assert fit_shown(job, doubted, replace(again, batch_size=128)).memory_doubts == {}
    assert fit_shown(job, doubted, replace(again, profile="1xH100@700W")) == doubted


def explored_sizes(job: InMemoryJob, fits_up_to: int, cost: dict[int, float]) -> list[int]:
    """The batch sizes pruning explores until it is done, every size above ``fits_up_to``
    running out of memory at its first step and the rest converging at ``cost``."""
    sizes = []
    while job.state.arms is None:
        trial = job.next_trial()
        if job.state.arms is not None:  # the decision that ended pruning dispatched an arm
            break
        sizes.append(trial.batch_size)
        if trial.batch_size > fits_up_to:
            job.out_of_memory(trial)
        else:
            converge(job, trial, cost_per_epoch=cost[trial.batch_size])
    return sizes


def test_a_stride_that_jumps_into_out_of_memory_tries_the_sizes_it_skipped() -> None:
    """Sizes 32 to 4096, default 256, out of memory above 512 (the cheapest that fits): the
    walk up jumps from 256 to 1024, which runs out; 512 is unknown, not costly, so it is tried
    before the walk turns, and it is an arm. It used to go downward only, and the bandit chose
    between 32 and 256."""
    sizes = [32, 64, 128, 256, 512, 1024, 2048, 4096]
    cost = {32: 400.0, 64: 150.0, 128: 250.0, 256: 200.0, 512: 100.0}
    job = InMemoryJob(
        make_job(batch_sizes=sizes, default_batch_size=256, prune_stride=2, num_pruning_rounds=1)
    )
    explored = explored_sizes(job, 512, cost)
    # Down first (256, 64, 32), then up: 1024 runs out, and 512 comes next. Before, the walk
    # turned there, and the cheapest so far (64) had no untried neighbour above 128.
    assert explored.index(512) == explored.index(1024) + 1, explored
    assert 2048 not in explored  # above the cap: never dispatched
    assert 4096 not in explored
    assert job.state.arms is not None
    assert 512 in job.state.arms


def test_walking_down_past_sizes_that_do_not_fit_the_largest_that_may_fit_comes_next() -> None:
    """Sizes 4 to 1024, default 1024, out of memory from 16 on (a smaller GPU than the default
    was tuned on), 8 converges and 4 does not. The walk down strode over the sizes that ran out
    (256, 64, 16) to 4, which did not converge: the job refused every next run ("no batch size
    converged"), 8 never tried. Past a size that ran out (the pivot too), the next one down
    comes first; the stride applies from the first that fits."""
    sizes = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
    job = InMemoryJob(make_job(batch_sizes=sizes, default_batch_size=1024, prune_stride=2))
    dispatched = []
    while job.state.arms is None and len(dispatched) < 20:
        trial = job.next_trial()
        dispatched.append(trial.batch_size)
        if trial.batch_size >= 16:
            job.out_of_memory(trial)
            continue
        reached = trial.batch_size == 8  # 4 never reaches the target
        epochs = 1 if reached else job.job.max_epochs
        answer = job.report(
            trial,
            time=1.0,
            energy=100.0 * epochs,
            metric=0.99 if reached else 0.1,
            current_epoch=epochs,
        )
        assert answer.stop_train
        job.end_trial(trial)
    assert dispatched[:9] == [1024, 512, 256, 128, 64, 32, 16, 8, 4], dispatched
    assert job.state.arms == (8,)


def test_a_job_of_one_arm_explores_on_larger_gpus_the_sizes_that_did_not_fit() -> None:
    """Default 128 out of memory on the A40, 64 and 32 fit and 64 is the cheapest (32 clearly
    costlier): the job's one arm is 64. On GPUs where everything fits, nothing was left to probe
    (the probe runs a second arm), so 128 and 256, never run anywhere, stayed untried there for
    good; once 64 has run there, 128 is explored, then 256 (both cheaper, larger batches)."""
    defaults = {name: JobSpec.model_fields[name].default for name in UPSTREAM_OPTIONS}
    job = InMemoryJob(make_job(**defaults, batch_sizes=[32, 64, 128, 256], default_batch_size=128))

    def run(trial: TrialId) -> None:
        converge(job, trial, 64_000.0 / trial.batch_size)
        job.end_trial(trial)

    first = job.next_trial()
    job.out_of_memory(first)
    while job.state.arms is None:
        run(job.next_trial())
    assert job.state.arms == (64,)
    job.register(GpuConfig(gpu_model="H100", number_of_gpus=1, max_power=700.0))
    larger = []
    for _ in range(4):
        trial = job.next_trial()
        larger.append((trial.batch_size, job.trials[-1].kind))
        run(trial)
    assert larger[:3] == [
        (64, TrialKind.BANDIT),
        (128, TrialKind.EXPLORATION),
        (256, TrialKind.EXPLORATION),
    ]
    assert job.state.arms == (64, 128, 256)
