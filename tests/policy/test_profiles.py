"""Hardware profiles in the policy: costs convert between profiles by their measured cost of an
epoch, so a job that moves to other GPUs keeps what it learned (`zeus_bso.policy.profiles`)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from tests.policy.helpers import with_readings
from zeus_bso.policy import (
    BatchSizeStats,
    BestRun,
    CostStats,
    JobState,
    Profiles,
    profiles_of,
    state_on,
    with_profile,
)
from zeus_bso.policy.profiles import MAX_RATIO_EXPONENT, extension, probe_arm
from zeus_bso.sim import InMemoryJob
from zeus_bso.spec import CreatedJob, GpuConfig, profile_key

V100 = GpuConfig(max_power=250.0, number_of_gpus=1, gpu_model="V100")
FOUR_V100 = GpuConfig(max_power=1000.0, number_of_gpus=4, gpu_model="V100")
TWO_V100 = GpuConfig(max_power=500.0, number_of_gpus=2, gpu_model="V100")
A40 = GpuConfig(max_power=300.0, number_of_gpus=1, gpu_model="A40")


def make_job(seed: int = 1, **options: object) -> CreatedJob:
    values: dict[str, object] = {
        "job_id": "job-1",
        "job_id_prefix": "job",
        "batch_sizes": [16, 32, 64, 128],
        "default_batch_size": 32,
        "mab_seed": seed,
        **V100.model_dump(),
        **options,
    }
    return CreatedJob.model_validate(values)


def test_profile_keys_name_model_count_and_power() -> None:
    assert profile_key(V100) == "1xV100@250W"
    assert profile_key(FOUR_V100) == "4xV100@1000W"


def test_a_job_on_its_own_gpus_knows_no_profiles_and_another_makes_two() -> None:
    job = make_job()
    assert with_profile(job, JobState(), V100) == JobState()
    moved = with_profile(job, JobState(), A40)
    assert list(moved.profiles) == ["1xV100@250W", "1xA40@300W"]
    assert with_profile(job, moved, V100) == moved  # known already: nothing changes


def test_factor_is_measured_where_both_ran_else_predicted_else_one() -> None:
    profiles = Profiles(
        "a",
        {("a", 16): 10.0, ("a", 32): 20.0, ("a", 64): 30.0, ("b", 16): 40.0, ("b", 32): 60.0},
    )
    assert profiles.factor(16, "a", "b") == 4.0  # measured on both
    assert profiles.factor(32, "b", "a") == pytest.approx(1 / 3)
    # 64 ran on a only: the power law through 4 at 16 and 3 at 32 (x 3/4 a doubling) says 2.25.
    assert profiles.factor(64, "a", "b") == pytest.approx(2.25)
    assert profiles.factor(64, None, "b") == profiles.factor(64, "a", "b")  # None: the base
    assert profiles.factor(16, "a", "c") == 1.0  # c shares no batch size with a: unknown
    assert profiles.factor(16, "b", "b") == 1.0
    # A measurement is added once, where there was none.
    assert profiles.measuring("b", 64, 99.0).factor(64, "a", "b") == pytest.approx(3.3)
    assert profiles.measuring("b", 16, 99.0) is profiles


def test_a_ratio_that_follows_a_power_law_is_predicted_at_every_batch_size() -> None:
    """b gains more from large batches than a: its epochs cost 2 x (128 / b) ** 0.5 times a's.
    Two measured sizes give the law; a constant ratio would misjudge every other size."""

    def ratio(size: int) -> float:
        return 2.0 * (128 / size) ** 0.5

    costs = {("a", size): 10.0 * size for size in (8, 16, 32, 64, 128, 256, 512)}
    costs |= {("b", size): 10.0 * size * ratio(size) for size in (32, 64)}
    profiles = Profiles("a", costs)
    for size in (8, 16, 128, 512):
        assert profiles.factor(size, "a", "b") == pytest.approx(ratio(size))
        assert profiles.factor(size, "b", "a") == pytest.approx(1 / ratio(size))
    # Noisy readings: the least-squares law through them, which passes through their means.
    noisy = costs | {("b", 128): 10.0 * 128 * ratio(128) * 1.1}
    fitted = [Profiles("a", noisy).factor(size, "a", "b") for size in (32, 64, 128)]
    assert math.prod(fitted) == pytest.approx(ratio(32) * ratio(64) * ratio(128) * 1.1)
    # One shared size: its ratio at every size.
    one = Profiles("a", {("a", 32): 10.0, ("b", 32): 30.0, ("a", 512): 5.0})
    assert one.factor(512, "a", "b") == pytest.approx(3.0)


def test_the_power_law_of_a_ratio_is_at_most_proportional_to_the_batch_size() -> None:
    """Ratios 1 at 16 and 100 at 32 (an exponent of 6.6, from broken readings): the law through
    their mean is bounded at `MAX_RATIO_EXPONENT`, so a size further off is not carried away."""
    profiles = Profiles("a", {("a", 16): 1.0, ("a", 32): 1.0, ("b", 16): 1.0, ("b", 32): 100.0})
    middle = 16 * math.sqrt(2)  # the geometric mean of the two sizes, where the law gives 10
    assert MAX_RATIO_EXPONENT == 1.0
    assert profiles.factor(64, "a", "b") == pytest.approx(10.0 * 64 / middle)
    assert profiles.factor(8, "a", "b") == pytest.approx(10.0 * 8 / middle)


def epochs_to_target(batch_size: int, rng: random.Random) -> int:
    """A workload: small batch sizes need fewer epochs, with noise; 128 rarely converges."""
    base = {16: 6, 32: 5, 64: 7, 128: 14}[batch_size]
    return base + rng.randint(0, 2)


def epoch_cost(batch_size: int, gpu: GpuConfig) -> tuple[float, float]:
    """Time and energy of an epoch: larger batches run faster per epoch; two V100s (a slow
    interconnect) take one's time at twice its power."""
    time = 100.0 * (16 / batch_size) ** 0.5
    power = 200.0 * gpu.number_of_gpus
    if gpu.gpu_model == "A40":
        time *= 0.7 if batch_size >= 64 else 0.9
        power = 260.0
    return time, time * power


def recur(memory: InMemoryJob, gpu: GpuConfig, rng: random.Random) -> tuple[int, bool, int]:
    """One recurrence of the job on ``gpu``: the batch size, whether it converged, its epochs."""
    trial = memory.next_trial()
    needed = epochs_to_target(trial.batch_size, rng)
    time, energy = epoch_cost(trial.batch_size, gpu)
    for epoch in range(1, memory.job.max_epochs + 1):
        metric = 1.0 if epoch >= needed else 0.0
        answer = memory.report(
            trial, time=time * epoch, energy=energy * epoch, metric=metric, current_epoch=epoch
        )
        if answer.stop_train:
            return trial.batch_size, answer.converged, epoch
    raise AssertionError("a run always stops by max_epochs")


def epochs_after_move(seed: int, gpu: GpuConfig) -> tuple[int, int, int]:
    """Epochs trained, runs that failed and early stops in recurrences 12 to 39 of a job that
    moved to ``gpu`` at recurrence 12."""
    # Without the learning-curve stop: its stops depend on which batch sizes the bandit samples
    # again on the new profile, not on cost units (`test_curves` checks its units on a move).
    # Without the probe, whose one run of another arm is the price of finding out whether new
    # GPUs reorder the arms (tested below), not a matter of units.
    job = InMemoryJob(make_job(seed, learning_curve_stop=False, profile_probe=False))
    workload = random.Random(seed)
    epochs = failures = 0
    for recurrence in range(40):
        if recurrence == 12:
            job.register(gpu)
        _, converged, ran = recur(job, gpu if recurrence >= 12 else V100, workload)
        if recurrence >= 12:
            epochs += ran
            failures += not converged
    stops = sum(1 for t in job.trials[12:] if t.message and "upper bound" in t.message)
    return epochs, failures, stops


def test_moving_to_proportionally_costlier_hardware_costs_what_staying_does() -> None:
    # Two V100s cost exactly twice what one does per epoch (the same time at twice the power,
    # and twice the max_power), in every batch size. After the move the job must go on as if
    # it had stayed: no run stopped early for costs judged in the wrong units, about the same
    # epochs. (Judged in one V100's units, runs on two would be stopped at half their bound.)
    moved = [epochs_after_move(seed, TWO_V100) for seed in range(6)]
    stayed = [epochs_after_move(seed, V100) for seed in range(6)]
    assert sum(m[2] for m in moved) <= sum(s[2] for s in stayed) + 1
    assert sum(m[1] for m in moved) <= sum(s[1] for s in stayed) + 1
    assert sum(m[0] for m in moved) <= 1.05 * sum(s[0] for s in stayed)


def test_a_prediction_counts_as_one_observation_until_it_runs_there() -> None:
    job = make_job()
    state = with_profile(job, JobState(), A40)
    stats = {
        16: BatchSizeStats(16).add(100.0, True).add(120.0, True).add(110.0, True),
        32: BatchSizeStats(32).add(200.0, True).add(220.0, True),
    }
    state = replace(state, stats=stats)
    base, a40 = "1xV100@250W", "1xA40@300W"
    profiles = Profiles(base, {(base, 16): 10.0, (base, 32): 20.0, (a40, 16): 30.0})
    seen = state_on(job, state, profiles, a40)
    assert seen.stats[16].reports == 3  # measured on the A40: every observation counts
    assert seen.stats[16].mean_cost == pytest.approx(3 * 110.0)
    assert seen.stats[32].reports == 1  # predicted (speed ratio 3): one observation's weight
    assert seen.stats[32].mean_cost == pytest.approx(3 * 210.0)
    # The same spread (M2 per observation), which the pooled noise model reads.
    assert seen.stats[32].m2_cost == pytest.approx(9 * stats[32].costs.variance)
    assert seen.best == BestRun(16, 330.0)  # the lowest mean of converged runs, in A40 units
    assert state_on(job, state, profiles, base) is state


def test_bandit_trials_and_epochs_are_kept_per_profile_as_a_recount_gives_them() -> None:
    job = InMemoryJob(make_job(3))
    workload = random.Random(3)
    for _ in range(20):
        recur(job, V100, workload)
    assert job.state.by_profile is None  # one profile: nothing to keep
    on_v100 = sum(1 for t in job.trials if t.kind.value == "bandit")
    assert on_v100 > 5
    job.register(A40)
    for _ in range(6):  # the first dispatch on the A40 counts the trials by profile, once
        recur(job, A40, workload)
        kept = job.state.by_profile
        assert kept is not None
        recount = job.store.by_profile("1xV100@250W")
        assert kept.bandit_trials == recount.bandit_trials
        assert kept.epochs.keys() == recount.epochs.keys()
        for key, sums in kept.epochs.items():
            again = recount.epochs[key]
            assert (sums.energy, sums.time) == pytest.approx((again.energy, again.time))
            assert sums.trials == again.trials
    # The bandit samples again on the new hardware: its trials there are counted apart.
    assert kept.bandit_trials["1xV100@250W"] == on_v100
    a40 = sum(1 for t in job.trials if t.kind.value == "bandit" and t.profile == "1xA40@300W")
    assert kept.bandit_trials.get("1xA40@300W", 0) == a40 > 0


def test_a_run_on_costlier_hardware_is_judged_in_its_own_units() -> None:
    # One batch size that needs 3 epochs. On V100 an epoch costs c; on the A40 (its own
    # max_power) more. The early-stop bound (beta 2 x best) must be in the A40's units: a run
    # that needs the same 3 epochs converges there too.
    job = make_job(batch_sizes=[32], default_batch_size=32, beta_knob=2.0)
    memory = InMemoryJob(job)
    for _ in range(3):
        trial = memory.next_trial()
        for epoch in (1, 2, 3):
            answer = memory.report(
                trial,
                time=10.0 * epoch,
                energy=1000.0 * epoch,
                metric=1.0 if epoch == 3 else 0.0,
                current_epoch=epoch,
            )
        assert answer.converged
    v100_epoch = memory.trials[0].cost / 3  # type: ignore[operator]
    memory.register(A40)
    trial = memory.next_trial()
    assert memory.trials[-1].profile == "1xA40@300W"
    a40_epoch = 0.5 * 3000.0 + 0.5 * 300.0 * 30.0  # eta 0.5: energy and max_power x time
    assert a40_epoch > 2.5 * v100_epoch  # judged in V100 units the run would stop at epoch 2
    for epoch in (1, 2, 3):
        answer = memory.report(
            trial,
            time=30.0 * epoch,
            energy=3000.0 * epoch,
            metric=1.0 if epoch == 3 else 0.0,
            current_epoch=epoch,
        )
        assert answer.cost == pytest.approx(a40_epoch * epoch)  # priced with the A40's power
    assert answer.converged
    assert answer.stop_train
    # Folded into the job's statistics in the first profile's units: 3 V100 epochs again.
    stats = memory.state.stats[32]
    assert stats.reports == 4
    assert stats.mean_cost == pytest.approx(3 * v100_epoch)


def test_an_epoch_is_priced_from_its_energy_and_time_with_its_own_profiles_power() -> None:
    job = make_job(eta_knob=0.5)
    state = with_profile(job, JobState(), A40)
    base, a40 = "1xV100@250W", "1xA40@300W"
    readings = {(base, 16): (100.0, 1.0), (a40, 16): (100.0, 1.0), (a40, 32): (0.0, 0.0)}
    profiles = profiles_of(job, with_readings(state, readings))
    assert profiles is not None
    # eta x energy + (1 - eta) x max_power x time: 250 W on the V100, 300 W on the A40.
    assert profiles.epoch_costs == {(base, 16): 175.0, (a40, 16): 200.0}  # nothing: unmeasured
    assert profiles_of(job, with_readings(JobState(), readings)) is None  # nothing to convert


def test_a_run_the_learning_curve_stopped_is_read_at_its_real_cost_per_epoch() -> None:
    """Its trial counts its predicted cost, but the conversion between profiles reads what its
    epochs used."""
    memory = InMemoryJob(
        make_job(learning_curve_stop=True, batch_sizes=[16], default_batch_size=16)
    )
    memory.register(A40)
    first = memory.next_trial()
    for epoch, metric in ((1, 0.2), (2, 0.4), (3, 0.5)):
        energy, time = 30.0 * epoch, 1.0 * epoch
        memory.report(first, time=time, energy=energy, metric=metric, current_epoch=epoch)
    hopeless = memory.next_trial()
    # 1,000 J and 1 s an epoch; the stop goes by a second report (against the reference taken
    # at twice the first run's pace at most: `MAX_LOAD`)
    for epoch in (1, 2):
        answer = memory.report(
            hopeless, time=1.0 * epoch, energy=1000.0 * epoch, metric=0.0, current_epoch=epoch
        )
    assert answer.stop_train
    assert "learning curve" in (answer.message or "")
    stopped = memory.trials[hopeless.trial_number - 1]
    assert stopped.cost is not None
    assert answer.cost is not None
    assert stopped.cost > answer.cost  # counted at its prediction
    assert memory.state.by_profile is not None
    readings = memory.state.by_profile.readings()
    # The mean of the two runs' energy and time per epoch (30 J, 1 s and 1,000 J, 1 s).
    assert readings[("1xA40@300W", 16)] == pytest.approx((515.0, 1.0))


def test_a_ratio_beyond_the_plausible_counts_as_unmeasured() -> None:
    from zeus_bso.policy.profiles import MAX_PROFILE_FACTOR

    costs = {("a", 16): 10.0, ("b", 16): 10.0 * MAX_PROFILE_FACTOR, ("a", 32): 1.0}
    assert Profiles("a", costs).factor(16, "a", "b") == MAX_PROFILE_FACTOR  # still plausible
    costs |= {("b", 16): 10.0 * MAX_PROFILE_FACTOR * 1.01, ("b", 32): 1e-300}
    profiles = Profiles("a", costs)
    assert profiles.factor(16, "a", "b") == 1.0  # neither measured nor speed ratio usable
    assert profiles.factor(32, "b", "a") == 1.0


def test_a_near_zero_reading_on_new_gpus_leaves_every_statistic_finite() -> None:
    # The first run on the A40 reports (almost) no energy or time, so its cost of an epoch is
    # 1e300 times smaller than on the V100; a later run there costs what it should. Converted
    # by that ratio its cost was inf in the job's statistics (a 500 on PostgreSQL).
    job = make_job(batch_sizes=[32], default_batch_size=32)
    memory = InMemoryJob(job)
    for _ in range(2):
        trial = memory.next_trial()
        memory.report(trial, time=10.0, energy=1000.0, metric=1.0, current_epoch=1)
    memory.register(A40)
    for reading in (1e-300, 10.0):
        trial = memory.next_trial()
        answer = memory.report(
            trial, time=reading, energy=100.0 * reading, metric=1.0, current_epoch=1
        )
        assert answer.cost is not None
        assert math.isfinite(answer.cost)
    stats = memory.state.stats[32]
    assert stats.reports == 4
    for value in (stats.mean_cost, stats.costs.m2, stats.converged_cost_sum):
        assert math.isfinite(value), stats
    assert memory.state.best is not None
    assert math.isfinite(memory.state.best.cost)


def test_the_probe_is_the_arm_nearest_the_one_size_measured_on_new_gpus() -> None:
    base, new = "1xV100@250W", "1xA40@300W"
    on_base = {(base, size): float(size) for size in (16, 32, 64, 128)}
    arms = (16, 32, 128)
    # Nothing measured on the new GPUs yet: the bandit's choice runs first and measures one.
    assert probe_arm(Profiles(base, on_base), new, arms) is None
    # One size measured there: the arm nearest it in log batch size (ties: the smaller).
    assert probe_arm(Profiles(base, on_base | {(new, 16): 9.0}), new, arms) == 32
    assert probe_arm(Profiles(base, on_base | {(new, 128): 9.0}), new, arms) == 32
    assert probe_arm(Profiles(base, on_base | {(new, 32): 9.0}), new, (16, 32, 64)) == 16
    assert probe_arm(Profiles(base, on_base | {(new, 64): 9.0}), new, (16, 32, 256)) == 32
    # Two measured sizes give the power law its slope: no probe. Nor on the base, with one
    # arm, or with one profile.
    two = Profiles(base, on_base | {(new, 16): 9.0, (new, 64): 20.0})
    assert probe_arm(two, new, arms) is None
    assert probe_arm(Profiles(base, on_base | {(new, 16): 9.0}), base, arms) is None
    assert probe_arm(Profiles(base, on_base | {(new, 16): 9.0}), new, (16,)) is None
    assert probe_arm(None, new, arms) is None


REORDERING = GpuConfig(max_power=250.0, number_of_gpus=1, gpu_model="H100")
"""Hardware on which an epoch's time falls in proportion to the batch size (a GPU that large
batches fill), where on the V100 it hardly falls: it reorders the batch sizes."""


def recurrence(
    memory: InMemoryJob, epoch_time: Callable[[int], float], needed: Callable[[int], int]
) -> tuple[int, float]:
    """One recurrence: runs until one converges, a run of batch size b taking ``epoch_time(b)``
    an epoch at 150 W and reaching the target after ``needed(b)`` epochs. Returns the batch
    size that converged and what the recurrence cost."""
    spent = 0.0
    while True:
        trial = memory.next_trial()
        size = trial.batch_size
        time = epoch_time(size)
        for epoch in range(1, memory.job.max_epochs + 1):
            answer = memory.report(
                trial, time=time * epoch, energy=150.0 * time * epoch,
                metric=min(1.0, epoch / needed(size)), current_epoch=epoch,
            )  # fmt: skip
            if answer.stop_train:
                break
        assert answer.cost is not None
        spent += answer.cost
        if answer.converged:
            return size, spent


def reordering_recurrence(memory: InMemoryJob, gpu: GpuConfig) -> tuple[int, float]:
    """One recurrence of a workload whose cheapest batch size is 16 on the V100 and 64 on
    `REORDERING`: the batch size that converged, and what the recurrence cost."""
    exponent = 1.0 if gpu == REORDERING else 0.1
    needed = {16: 5, 32: 7, 64: 9}
    return recurrence(memory, lambda size: 100.0 * (16 / size) ** exponent, needed.__getitem__)


def after_reordering_move(seed: int, **options: object) -> tuple[list[int], float]:
    """The batch sizes and total cost of 20 recurrences on `REORDERING` after 15 on the V100."""
    memory = InMemoryJob(make_job(seed, batch_sizes=[16, 32, 64], default_batch_size=32,
                                  target_metric=1.0, **options))  # fmt: skip
    for _ in range(15):
        reordering_recurrence(memory, V100)
    assert memory.state.arms is not None
    assert len(memory.state.arms) >= 2
    memory.register(REORDERING)
    sizes, total = [], 0.0
    for _ in range(20):
        size, cost = reordering_recurrence(memory, REORDERING)
        sizes.append(size)
        total += cost
    return sizes, total


def test_new_gpus_that_reorder_the_batch_sizes_are_found_out_by_one_probe() -> None:
    """On the V100 16 is cheapest; on the new GPUs 64 costs under half as much. Converted costs
    keep 16 first (one measured ratio predicts the same ratio everywhere), so without the probe
    the bandit stays there; one probe run of 32 measures a second ratio, the power law through
    the two predicts 64 cheapest, and the job moves there."""
    never_left = 0
    for seed in range(6):
        sizes, total = after_reordering_move(seed)
        assert sizes[-10:].count(64) >= 8, sizes
        unprobed, unprobed_total = after_reordering_move(seed, profile_probe=False)
        assert total <= unprobed_total, (sizes, unprobed)
        never_left += 64 not in unprobed
    assert never_left >= 4  # without it, most seeds never run 64 on the new GPUs


def test_where_new_gpus_keep_the_order_the_probe_costs_one_run_of_the_next_arm() -> None:
    """Two V100s cost exactly twice one (`TWO_V100`): the probe runs the arm next to the first
    one run there, once, and the job goes back to its cheapest arm."""
    for seed in range(4):
        memory = InMemoryJob(make_job(seed, batch_sizes=[16, 32, 64], default_batch_size=32,
                                      target_metric=1.0))  # fmt: skip
        for _ in range(15):
            reordering_recurrence(memory, V100)
        memory.register(TWO_V100)
        for _ in range(8):
            reordering_recurrence(memory, TWO_V100)
        moved = [t for t in memory.trials if t.profile == profile_key(TWO_V100)]
        first, probe = moved[0], moved[1]
        assert abs(probe.batch_size - first.batch_size) in (16, 32), (first, probe)
        assert probe.batch_size != first.batch_size
        assert [t.batch_size for t in moved[-4:]] == [16] * 4, moved


def test_a_probe_that_ends_without_a_report_is_not_dispatched_again() -> None:
    """A batch size the new GPUs cannot run (out of memory before its first report): the probe
    takes it once; the runs after it are the bandit's."""
    memory = InMemoryJob(make_job(0, batch_sizes=[16, 32, 64], default_batch_size=32,
                                  target_metric=1.0))  # fmt: skip
    for _ in range(15):
        reordering_recurrence(memory, V100)
    memory.register(REORDERING)
    size, _ = reordering_recurrence(memory, REORDERING)
    probe = memory.next_trial()
    assert probe.batch_size != size
    memory.end_trial(probe)  # its client caught the crash; nothing was reported
    after = [memory.next_trial() for _ in range(3)]
    assert all(trial.batch_size != probe.batch_size for trial in after)


def test_an_extension_is_a_neighbour_of_the_best_arm_outside_the_arms_favoured_first() -> None:
    base, new = "1xV100@250W", "1xL4@72W"
    sizes = (8, 16, 32, 64, 128)
    on_base = {(base, size): 100.0 for size in sizes}
    # On the new GPUs larger batch sizes cost relatively more: the ratio grows with the size.
    two = Profiles(base, on_base | {(new, 32): 50.0, (new, 64): 80.0})
    arms = (32, 64, 128)
    seen = {32: CostStats(3, 400.0), 64: CostStats(3, 640.0), 128: CostStats(3, 1000.0)}
    stats = {size: BatchSizeStats(size) for size in sizes}

    def found(
        profiles: Profiles | None = two,
        profile: str = new,
        observations: dict[int, CostStats] = seen,
        tried: tuple[int, ...] = (),
        known: dict[int, BatchSizeStats] = stats,
    ) -> int | None:
        return extension(profiles, profile, arms, sizes, known, observations, tried)

    assert found() == 16  # the best arm, 32, has one neighbour that is no arm
    assert found(tried=(16,)) is None  # explored there once already
    # A size that ran and never converged (on any GPU) is not explored again.
    never = stats | {16: BatchSizeStats(16).add(900.0, False)}
    assert found(known=never) is None
    # One that converged: explored if its converted cost is below the best arm's (400 here).
    converged = stats | {16: BatchSizeStats(16).add(900.0, True)}
    assert found(known=converged, observations=seen | {16: CostStats(1, 300.0)}) == 16
    assert found(known=converged, observations=seen | {16: CostStats(1, 500.0)}) is None
    # The best arm's two neighbours outside the arms: the one the ratios favour first.
    wider = extension(two, new, (16, 64), sizes, stats, seen | {16: CostStats(1, 300.0)}, ())
    assert wider is None  # 16, the best, was not measured on the new GPUs: the bandit runs it
    measured = Profiles(base, two.epoch_costs | {(new, 16): 40.0})
    assert extension(measured, new, (16, 64), sizes, stats, {16: CostStats(1, 300.0)}, ()) == 8
    assert extension(measured, new, (16,), (8, 16, 32), stats, {16: CostStats(1, 1.0)}, ()) == 8
    # One measured ratio has no slope yet (the probe comes first); none on the base profile or
    # for a job with one profile.
    assert found(profiles=Profiles(base, on_base | {(new, 32): 50.0})) is None
    assert found(profile=base) is None
    assert found(profiles=None) is None


DOWN = GpuConfig(max_power=250.0, number_of_gpus=1, gpu_model="L4")
"""Hardware on which an epoch's time grows with the batch size, where on the V100 it falls in
proportion to it: the cheapest batch size moves from the largest to the smallest."""


def skewed_recurrence(memory: InMemoryJob, gpu: GpuConfig) -> tuple[int, float]:
    """One recurrence of a workload that needs 5 epochs at every batch size, on the V100 (an
    epoch's time falls in proportion to the batch size) or on `DOWN` (it grows as its square
    root): the batch size that converged, and what the recurrence cost."""
    exponent = 1.0 if gpu == V100 else -0.5
    return recurrence(memory, lambda size: 100.0 * (16 / size) ** exponent, lambda _: 5)


def moved_down(seed: int, **options: object) -> tuple[InMemoryJob, tuple[int, ...], list[int]]:
    """A job of batch sizes 8 to 64 that ran 15 recurrences on the V100 (pruning kept 32 and 64:
    the walk down stopped at 16, which cost twice what 32 did), then 15 on `DOWN`: the job, its
    arms on the V100 and the batch size that converged in each recurrence on `DOWN`."""
    memory = InMemoryJob(make_job(seed, batch_sizes=[8, 16, 32, 64], default_batch_size=32,
                                  target_metric=1.0, **options))  # fmt: skip
    for _ in range(15):
        skewed_recurrence(memory, V100)
    arms = memory.state.arms
    assert arms is not None
    memory.register(DOWN)
    return memory, arms, [skewed_recurrence(memory, DOWN)[0] for _ in range(15)]


def test_new_gpus_whose_cheapest_batch_size_pruning_left_out_are_walked_to_it() -> None:
    """On `DOWN` 8 is cheapest; the V100's pruning never ran it and kept only 32 and 64. The
    probe measures 32 after 64; the power law through the two ratios puts the cheapest at the
    smaller end; 16 and then 8 are explored there, converge and join the arms."""
    for seed in range(3):
        memory, arms, sizes = moved_down(seed)
        assert arms == (32, 64)
        assert sizes[:4] == [64, 32, 16, 8], sizes
        assert sizes[-8:] == [8] * 8, sizes
        assert memory.state.arms == (8, 16, 32, 64)
        explored = [t for t in memory.trials if t.profile == profile_key(DOWN) and t.round is None
                    and t.kind.value == "exploration"]  # fmt: skip
        assert [t.batch_size for t in explored] == [16, 8]
        _, _, stuck = moved_down(seed, profile_probe=False)
        assert set(stuck) == {64}  # without the probe the job never leaves its old best


def test_an_extension_that_ends_without_a_report_is_not_explored_again_nor_an_arm() -> None:
    """On `DOWN` the extension to 16 ends without a report (out of memory, say): the runs after
    it are the bandit's, on the arms it had."""
    memory = InMemoryJob(make_job(0, batch_sizes=[8, 16, 32, 64], default_batch_size=32,
                                  target_metric=1.0))  # fmt: skip
    for _ in range(15):
        skewed_recurrence(memory, V100)
    memory.register(DOWN)
    skewed_recurrence(memory, DOWN)  # 64
    skewed_recurrence(memory, DOWN)  # the probe, 32
    extension_trial = memory.next_trial()
    assert extension_trial.batch_size == 16
    memory.end_trial(extension_trial)  # its client caught the crash; nothing was reported
    after = [memory.next_trial() for _ in range(3)]
    assert all(trial.batch_size in (32, 64) for trial in after), after
    assert memory.state.arms == (32, 64)
