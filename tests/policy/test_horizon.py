"""``expected_recurrences``: a short-lived job explores only while what an exploration may lose
fits within the runs it expects (`zeus_bso.policy.horizon`)."""

from __future__ import annotations

import math
import statistics

import pytest

from tests.policy.helpers import make_job, trained
from zeus_bso.policy import JobState, TrialKind, TrialState, after_dispatch, after_report
from zeus_bso.policy.horizon import (
    CLEAR_SAVING,
    EXPLORATION_RESERVE,
    HORIZON_SLACK,
    PRIOR_SPREAD,
    Horizon,
    expected_saving,
)
from zeus_bso.policy.types import BatchSizeStats, Prior, PriorMode
from zeus_bso.sim.parents import parent_curve
from zeus_bso.sim.runner import in_process, job_spec, simulate
from zeus_bso.sim.trace import load_trace_job

# A report's cost: 0.5 * energy + 0.5 * 100 * time; energy only below (time 0).
SIZES = [16, 32, 64, 128, 256]


def _job(expected: int | None):  # type: ignore[no-untyped-def]
    return make_job(
        eta_knob=0.5,
        max_power=100.0,
        target_metric=0.9,
        max_epochs=20,
        batch_sizes=SIZES,
        default_batch_size=64,
        expected_recurrences=expected,
    )


def _converged(size: int, *costs: float) -> BatchSizeStats:
    entry = BatchSizeStats(size)
    for cost in costs:
        entry = entry.add(cost, True)
    return entry


def _ran(size: int, cost: float, epochs: int) -> BatchSizeStats:
    """A size with one converged run of ``cost`` whose curve met the target after ``epochs``."""
    curve = tuple((epoch, 0.1 * epoch) for epoch in range(1, epochs + 1))
    return BatchSizeStats(size).add(cost, True, curve)


def test_the_allowance_is_what_the_budget_has_left_after_the_runs_to_come() -> None:
    stats = {64: _converged(64, 100.0, 110.0), 128: _converged(128, 80.0)}
    stats[32] = BatchSizeStats(32).add(30.0, False)  # a stopped exploration: lost whole
    horizon = Horizon.of(10, stats, 64)
    assert (horizon.done, horizon.spent) == (3, 320.0)
    assert (horizon.default_cost, horizon.best_cost, horizon.left) == (105.0, 80.0, 7)
    expected = (1 + HORIZON_SLACK) * 10 * 105.0 - 320.0 - 7 * 80.0
    assert horizon.allowance == pytest.approx(expected)


def test_nothing_is_bounded_before_a_run_converged_and_the_last_run_never_explores() -> None:
    assert Horizon.of(5, {}, 64).allowance is None
    assert Horizon.of(5, {}, 64).may_explore(32)
    last = Horizon.of(3, {64: _converged(64, 100.0, 100.0)}, 64)
    assert last.left == 1
    assert last.allowance is not None
    assert last.allowance > 0
    assert not last.may_explore(32)  # nothing after it would use what it found


def test_a_job_that_outlived_its_expected_runs_is_expected_to_run_as_many_again() -> None:
    # Five runs expected; a loss spent the budget of five.
    lost = {64: _converged(64, 100.0, 100.0), 32: BatchSizeStats(32).add(60.0, False)}
    assert not Horizon.of(5, lost, 64).may_explore(128)
    ran = dict(lost)
    ran[64] = _converged(64, *[100.0] * 5)
    horizon = Horizon.of(5, ran, 64)
    assert (horizon.done, horizon.horizon, horizon.left) == (5, 10, 5)
    expected = (1 + HORIZON_SLACK) * 10 * 100.0 - 560.0 - 5 * 100.0
    assert horizon.allowance == pytest.approx(expected)
    assert expected < EXPLORATION_RESERVE * 100.0
    assert not horizon.may_explore(128)
    # Each run at the default banks 3% of one over two runs of horizon: at 14 runs (28
    # expected) the budget has paid for the loss and holds a fifth of a run again.
    ran[64] = _converged(64, *[100.0] * 13)
    assert not Horizon.of(5, ran, 64).may_explore(128)
    ran[64] = _converged(64, *[100.0] * 14)
    assert Horizon.of(5, ran, 64).may_explore(128)


def test_a_size_is_explored_only_if_what_it_could_save_pays_back() -> None:
    from zeus_bso.policy.horizon import least_cost, likely_cost

    # Costs convex in log2 of the size: 100 at 64, 90 at 128, 82 at 256 (each step saves less
    # than the one before); a line through two sizes bounds the next one from below.
    means = {64: 100.0, 128: 90.0, 256: 82.0}
    assert least_cost(means, 512) == pytest.approx(74.0)  # through 128 and 256
    assert least_cost(means, 32) == pytest.approx(110.0)  # through 64 and 128
    assert least_cost({64: 100.0}, 128) is None  # one point bounds nothing
    assert likely_cost(means, 512) == pytest.approx(74.0)  # beyond the three: the line alone
    stats = {size: _converged(size, cost) for size, cost in means.items()}
    # 512 could save at most 8 a run (less than a tenth of one): over one run after it, too
    # little; over three, enough.
    few = Horizon.of(5, stats, 64)  # three done, two left: one after the exploration
    assert few.allowance is not None
    assert few.allowance > EXPLORATION_RESERVE * 82.0
    assert not few.may_explore(512)
    assert Horizon.of(7, stats, 64).may_explore(512)
    assert not Horizon.of(7, stats, 64).may_explore(32)  # it cannot beat the cheapest at all
    assert Horizon.of(7, stats, 64).may_explore(1024)  # two sizes away: it could save more


def test_between_measured_sizes_the_parabola_through_three_estimates_a_size() -> None:
    """The line bound through two sizes on one side goes on falling past the cheapest (a walk
    that halved the cost from 1024 to 4096 and found 16384 cheaper still makes 8192, between
    them, look cheaper than 16384); the parabola through the three measured sizes nearest to
    it turns up as the costs do, and the payback rule takes the higher of the two. Beyond the
    three (its vertex a guess there) it estimates nothing: the line bound alone is left."""
    from zeus_bso.policy.horizon import least_cost, likely_cost, parabola_cost

    means = {1024: 240.0, 4096: 128.0, 16384: 80.0}  # log2: 10, 12, 14
    assert least_cost(means, 8192) == pytest.approx(72.0)  # through 1024 and 4096
    # The parabola 240 + b * u + a * u**2 through them, u = log2 - 10: 2b + 4a = -112 and
    # 4b + 16a = -160, so a = 8, b = -72; at 13 (u = 3), 240 - 216 + 72.
    assert parabola_cost(means, 8192) == pytest.approx(96.0)
    assert likely_cost(means, 8192) == parabola_cost(means, 8192)
    assert parabola_cost(means, 4096) == pytest.approx(128.0)  # at a measured size, its cost
    # Beyond the three: the line bound alone (through 4096 and 16384, falling on).
    assert parabola_cost(means, 32768) is None
    assert parabola_cost(means, 512) is None
    assert likely_cost(means, 32768) == least_cost(means, 32768) == pytest.approx(56.0)
    assert parabola_cost({1024: 240.0, 4096: 128.0}, 2048) is None  # two sizes: no parabola
    # Noise that bends it downwards estimates nothing either.
    bent = {128: 100.0, 256: 120.0, 512: 100.0}
    assert parabola_cost(bent, 384) is None
    assert likely_cost(bent, 384) == least_cost(bent, 384)
    stats = {size: _converged(size, cost) for size, cost in means.items()}
    # Seven runs after the exploration: the line's 72 would pay back (8 a run), the parabola's
    # 96 not; past 16384 the line's 56 does.
    horizon = Horizon.of(11, stats, 1024)
    assert horizon.allowance is not None
    assert horizon.allowance > EXPLORATION_RESERVE * 80.0
    assert horizon.left - 1 == 7
    assert not horizon.may_explore(8192)
    assert horizon.may_explore(32768)


def test_beyond_the_measured_sizes_an_epochs_cost_estimates_a_size() -> None:
    """One epoch more at one of two sizes tilts the line through their whole costs: the default
    192 converging at 9 epochs (an epoch 1.27) and 128 at 10 (an epoch 1.19) say smaller sizes
    cost more (V100 librispeech, whose costs fall to 48). An epoch's cost, measured whole by
    every run, falls towards 64: the line through it, times the fewer epochs of the two (192's
    9), says 64 could save 2 a run, and the job explores it."""
    from zeus_bso.policy.horizon import epoch_line_cost, least_cost, likely_cost

    means, epochs = {128: 11.9, 192: 11.43}, {128: 10.0, 192: 9.0}
    rising = 11.9 + 0.47 * math.log(2) / math.log(1.5)  # more than 192 costs
    assert least_cost(means, 64) == pytest.approx(rising)
    by_parts = epoch_line_cost(means, epochs, 64)
    per_128, per_192 = 1.19, 11.43 / 9.0
    slope = (per_192 - per_128) / (math.log(192) - math.log(128))
    assert by_parts == pytest.approx((per_128 - slope * math.log(2)) * 9.0)
    assert by_parts is not None
    assert by_parts < 11.43 - 1.9  # 2 a run below the cheapest
    assert likely_cost(means, 64, epochs) == by_parts  # the lower of the two beyond them
    assert likely_cost(means, 64) == least_cost(means, 64)  # without the epochs: the line
    # With one size on its side it says nothing (between sizes: the next test).
    assert epoch_line_cost(means, {128: 10.0}, 64) is None
    assert likely_cost(means, 64, {128: 10.0}) == least_cost(means, 64)
    # The fewer epochs of the two, whichever is nearer.
    p128, p192 = 11.9 / 9.0, 11.43 / 10.0
    at_64 = p128 - (p192 - p128) * math.log(2) / math.log(1.5)
    assert epoch_line_cost(means, {128: 9.0, 192: 10.0}, 64) == pytest.approx(at_64 * 9.0)

    stats = {192: _ran(192, 11.43, 9), 128: _ran(128, 11.9, 10)}
    horizon = Horizon.of(10, stats, 192)
    assert horizon.epochs == {192: 9.0, 128: 10.0}  # from the converged runs' curves
    assert horizon.may_explore(64)
    assert not Horizon(
        10, horizon.done, horizon.spent, horizon.default_cost, horizon.best_cost, horizon.means
    ).may_explore(64)  # the line alone refuses it


def test_a_clear_saving_is_explored_with_whatever_the_budget_has_left() -> None:
    """P100 squad: the default 24 converged at 4 epochs (2.53), 12 an epoch late at 5 (3.05),
    and the budget of 10 runs is left a tenth of a run, less than the reserve. An epoch's cost
    at the two (0.61, 0.63) says 4 saves 9% of a run at each of the 7 runs after its
    exploration: the job explores it (it kept to 24, 19% above 4, for good). A saving under
    `CLEAR_SAVING` of a run still needs the reserve, and a budget spent refuses even a clear
    one."""
    from zeus_bso.policy.horizon import likely_cost

    stats = {24: _ran(24, 2.53, 4), 12: _ran(12, 3.05, 5)}
    horizon = Horizon.of(10, stats, 24)
    assert horizon.allowance is not None
    assert 0.0 < horizon.allowance < EXPLORATION_RESERVE * 2.53
    likely = likely_cost(horizon.means, 4, horizon.epochs)
    assert likely is not None
    assert 7 * (2.53 - likely) / 2.53 > CLEAR_SAVING
    assert horizon.may_explore(4)
    # Eight runs expected, five after the exploration: 4 still saves more than a clear
    # saving, 8 (whose estimate saves 6% of a run at each) not, and the reserve refuses it.
    short = Horizon.of(8, stats, 24)
    assert short.allowance is not None
    assert 0.0 < short.allowance < EXPLORATION_RESERVE * 2.53
    nearer = likely_cost(short.means, 8, short.epochs)
    assert nearer is not None
    assert 5 * (2.53 - nearer) / 2.53 < CLEAR_SAVING < 5 * (2.53 - likely) / 2.53
    assert short.may_explore(4)
    assert not short.may_explore(8)
    # A budget spent (a third run lost whole) refuses it too.
    stats[8] = BatchSizeStats(8).add(1.0, False)
    spent = Horizon.of(10, stats, 24)
    assert spent.allowance is not None
    assert spent.allowance < 0.0
    assert not spent.may_explore(4)


def test_between_measured_sizes_an_epochs_cost_and_the_epochs_estimate_a_size() -> None:
    """V100 librispeech: 32 converging at 7 epochs (1.05 of the oracle) and 56 at 8 (1.07),
    with 72 at 8 (1.09): the line through 56 and 72 puts 48 above 32, so the walk ended on 32.
    By its parts, an epoch's cost on the line between 32's and 56's, times the epochs between
    theirs less one and no fewer than 7, puts 48 below 32, and the job explores it. Where the
    two sizes' epochs differ by far more than one (cifar100's 256 at 28 and 1024 at 71), the
    epochs on the line keep a size between them from looking as cheap as the faster's."""
    from zeus_bso.policy.horizon import between_by_parts, epoch_line_cost, likely_cost

    means, epochs = {32: 1.05, 56: 1.07, 72: 1.09}, {32: 7.0, 56: 8.0, 72: 8.0}
    whole = likely_cost(means, 48)
    assert whole is not None
    assert whole > 1.05  # the whole costs' line and parabola: dearer than 32
    share = math.log(48 / 32) / math.log(56 / 32)
    epoch_cost = 1.05 / 7 + (1.07 / 8 - 1.05 / 7) * share
    expected = epoch_cost * 7.0  # 7 + share - 1 < 7: the fewer of the two
    assert epoch_line_cost(means, epochs, 48) == pytest.approx(expected)
    assert likely_cost(means, 48, epochs) == pytest.approx(expected)
    assert expected < 1.05 - 0.02  # it could save 2% of a run at the cheapest
    # Between measured sizes the parts alone count, also where they say dearer than the whole
    # costs (P100 movielens-1m, one seed: 1024 at 6 epochs, 4096 and 16384, the cheapest, at 4).
    wide, wide_epochs = {1024: 4.53, 4096: 1.38, 16384: 0.91}, {1024: 6.0, 4096: 4.0, 16384: 4.0}
    by_parts = between_by_parts({s: wide[s] / wide_epochs[s] for s in wide}, wide_epochs, 8192)
    whole_8192 = likely_cost(wide, 8192)
    assert by_parts is not None
    assert whole_8192 is not None
    assert by_parts > 0.91 > whole_8192  # no saving by its parts; the whole costs' says one
    assert likely_cost(wide, 8192, wide_epochs) == pytest.approx(by_parts)

    # Ten expected runs, five of them done: 48 could save 4 x 0.021 > 0.1 x 1.05 only by parts.
    runs = {192: (1.28, 9), 128: (1.20, 9), 72: (1.09, 8), 56: (1.07, 8), 32: (1.05, 7)}
    stats = {size: _ran(size, cost, ran_epochs) for size, (cost, ran_epochs) in runs.items()}
    horizon = Horizon.of(10, stats, 192)
    assert horizon.allowance is not None
    assert horizon.allowance > 0.2 * 1.05
    assert horizon.may_explore(48)
    whole_only = Horizon(
        10, horizon.done, horizon.spent, horizon.default_cost, horizon.best_cost, horizon.means
    )
    assert not whole_only.may_explore(48)

    # Epochs far apart: the line between them, less one (512 between 256 at 28 and 1024 at 71).
    per_epoch, far = {256: 0.96 / 28, 1024: 1.89 / 71}, {256: 28.0, 1024: 71.0}
    half = 0.5  # 512 halfway between in the log
    on_line = (per_epoch[256] + (per_epoch[1024] - per_epoch[256]) * half) * (28 + 43 * half - 1)
    assert between_by_parts(per_epoch, far, 512) == pytest.approx(on_line)
    assert on_line > 0.96  # not cheaper than 256: no exploration on its word
    # No measured size on one side: nothing.
    assert between_by_parts(per_epoch, far, 128) is None
    assert between_by_parts(per_epoch, far, 2048) is None


def test_an_exploration_stops_once_converging_would_take_the_job_over_its_budget() -> None:
    job = _job(5)
    state = _report(job, JobState(), TrialState(1, 64, TrialKind.EXPLORATION), 100.0).job
    # Spent 100 on the default; the budget is 515, the four runs left cost 400 at the cheapest:
    # an exploration may lose 15, so it stops before an epoch that takes it past 115.
    answers = trained(job, state, TrialState(2, 32, TrialKind.EXPLORATION), 30.0, most=9)
    assert len(answers) == 3  # 90 spent; a fourth epoch would take it to 120
    last = answers[-1]
    assert not last.converged
    assert last.reason is not None
    assert last.reason.value == "cost_bound"
    assert last.why is not None
    assert "expected_recurrences (5)" in last.why
    unbounded = _job(None)
    cold = _report(unbounded, JobState(), TrialState(1, 64, TrialKind.EXPLORATION), 100.0).job
    goes_on = after_report(
        unbounded,
        cold,
        TrialState(2, 32, TrialKind.EXPLORATION),
        time=0.0,
        energy=2 * 90.0,
        metric=0.1,
        current_epoch=3,
    )
    assert not goes_on.answer.stop_train  # beta_knob 2: up to 200


def test_a_run_that_must_deliver_is_not_held_to_the_budget() -> None:
    """The last attempt of `until_converged` (``deliver``) that the walk made an exploration: the
    budget that stops the run above after its third epoch leaves it to its target."""
    job = _job(5)
    state = _report(job, JobState(), TrialState(1, 64, TrialKind.EXPLORATION), 100.0).job
    trial = TrialState(2, 32, TrialKind.EXPLORATION, must_deliver=True)
    answers = trained(job, state, trial, 30.0, reaches=6)
    assert [answer.stop_train for answer in answers] == [False] * 5 + [True]
    assert answers[-1].converged


def test_a_stopped_run_counts_what_it_paid_not_the_cost_charged_for_it() -> None:
    entry = BatchSizeStats(32).add(300.0, False, paid=40.0)  # a learning-curve stop's charge
    assert entry.mean_cost == 300.0
    assert entry.paid == 40.0
    stored_before = BatchSizeStats(32, reports=2, mean_cost=50.0)  # no paid_sum kept
    assert stored_before.paid == 100.0
    assert stored_before.add(10.0, True).paid == 110.0
    assert entry.scaled(2.0).paid == 80.0


def _dispatch(job, state: JobState, explorations=()):  # type: ignore[no-untyped-def]
    return after_dispatch(job, state, explorations)


def _report(job, state: JobState, trial: TrialState, energy: float):  # type: ignore[no-untyped-def]
    return after_report(job, state, trial, time=0.0, energy=2 * energy, metric=1.0, current_epoch=4)


def test_a_job_that_cannot_pay_back_an_exploration_runs_the_cheapest_so_far() -> None:
    runs = {}
    for expected in (2, None):
        job, state = _job(expected), JobState()
        kinds = []
        trials: list[TrialState] = []
        for _ in range(3):
            step = _dispatch(job, state, tuple(trials))
            kinds.append((step.trial.batch_size, step.trial.kind))
            reported = _report(job, step.job, step.trial, 100.0)
            state = reported.job
            trials.append(reported.trial)
        runs[expected] = kinds
    # Cold, pruning walks on from the default; with two runs expected, the second run is the
    # last one: it takes the default, which converged, and explores nothing.
    assert runs[None][0] == (64, TrialKind.EXPLORATION)
    assert runs[None][1][1] is TrialKind.EXPLORATION
    assert runs[None][1][0] != 64
    assert runs[2][0] == (64, TrialKind.EXPLORATION)
    assert runs[2][1] == (64, TrialKind.EXPLOIT)
    # Past its two runs it is expected to run twice as many, four: too few to pay back.
    assert runs[2][2] == (64, TrialKind.EXPLOIT)


def test_a_refused_step_lets_the_job_explore_a_neighbour_of_the_cheapest_that_pays() -> None:
    """Where the payback rule refuses the first round's next step, the job explores instead an
    untried neighbour of the cheapest size that it allows (one the round's stride stepped
    over), not the cheapest so far for good."""
    job, without = (
        make_job(
            eta_knob=0.5,
            max_power=100.0,
            target_metric=0.9,
            max_epochs=20,
            batch_sizes=[8, 16, 32, 64, 128],
            default_batch_size=128,
            prune_stride=2,
            expected_recurrences=expected,
        )
        for expected in (10, None)
    )
    state, trials = JobState(), list[TrialState]()
    runs = []
    for cost in (100.0, 100.0, 80.0, 80.0):
        step = _dispatch(job, state, tuple(trials))
        runs.append((step.trial.batch_size, step.trial.kind, step.trial.round))
        if len(runs) == 3:  # while that exploration runs, another run explores nothing
            beside = _dispatch(job, step.job, (*trials, step.trial)).trial
            assert (beside.batch_size, beside.kind) == (32, TrialKind.CONCURRENT)
        reported = _report(job, step.job, step.trial, cost)
        state = reported.job
        trials.append(reported.trial)
    # The round walks down from the default with a stride of two: 32, then 8, whose cost the
    # line through 32 and 128 (flat) bounds at theirs, so exploring it cannot pay back; 16 is
    # bounded so too; 64, between two sizes measured once each, is not.
    assert runs[:2] == [(128, TrialKind.EXPLORATION, 0), (32, TrialKind.EXPLORATION, 0)]
    assert runs[2] == (64, TrialKind.EXPLORATION, 0)
    # 64 is now the cheapest, with both its neighbours tried; 8 is still refused (the line
    # through 32 and 64 puts it above them): the job runs the cheapest.
    assert runs[3] == (64, TrialKind.EXPLOIT, None)
    cold = JobState()
    walked: list[TrialState] = []
    for cost in (100.0, 100.0):
        step = _dispatch(without, cold, tuple(walked))
        reported = _report(without, step.job, step.trial, cost)
        cold = reported.job
        walked.append(reported.trial)
    assert _dispatch(without, cold, tuple(walked)).trial.batch_size == 8  # the round's own step


@pytest.mark.parametrize("gpu", ["v100", "p100"])
def test_five_expected_runs_cost_little_more_than_the_default_on_the_trace(gpu: str) -> None:
    """The issue's bound: with ``expected_recurrences=5`` no workload's five runs cost more than
    5% over always running its default (the mean over seeds); without it, some do."""
    worst = {}
    for expected in (5, None):
        over = []
        for name in ("imagenet", "sentiment140", "librispeech"):
            trace = load_trace_job(name, gpu)
            totals = []
            for seed in range(8):
                options = {} if expected is None else {"expected_recurrences": expected}
                spec = job_spec(trace, f"h-{name}-{seed}", mab_seed=seed, **options)
                runs = simulate(trace, in_process(spec), recurrences=5, seed=seed, eta_knob=0.5)
                totals.append(sum(r.cost for r in runs))
            always = 5 * trace.expected_cost(trace.default_batch_size, 0.5)
            over.append(statistics.fmean(totals) / always - 1.0)
        worst[expected] = max(over)
    assert worst[5] <= 0.05
    assert worst[None] > 0.05


def test_an_exploration_an_epoch_late_does_not_keep_a_short_lived_job_off_its_optimum() -> None:
    """P100 squad with ten runs expected, in the seeds whose 12 converged an epoch late: the
    job reaches 4, the optimum (it kept to the default 24, 19% dearer, for good)."""
    trace = load_trace_job("squad", "p100")
    for seed in (11, 14, 19):
        spec = job_spec(trace, f"late-{seed}", mab_seed=seed, expected_recurrences=10)
        runs = simulate(trace, in_process(spec), recurrences=10, seed=seed, eta_knob=0.5)
        sizes = [run.trials[-1].batch_size for run in runs]
        assert sizes[:2] == [24, 12]
        assert sizes[-1] == 4


def test_a_related_jobs_curve_lets_a_short_lived_job_explore_what_it_predicts_pays() -> None:
    """With five runs expected the budget after the default's run holds too little for a cold
    exploration, but a prior that predicts a size far cheaper than the default lets the job try
    it (the prior's walk), and the job keeps it."""
    trace = load_trace_job("cifar100", "v100")
    prior = parent_curve(trace, trace, eta_knob=0.5, seed=0).prior(PriorMode.CHECK)
    best = prior.best(trace.batch_sizes)
    assert best is not None
    assert best != trace.default_batch_size
    sizes = {}
    for seeded in (prior, None):
        spec = job_spec(trace, "h-cifar", mab_seed=0, expected_recurrences=5)
        runs = simulate(trace, in_process(spec, seeded), recurrences=5, seed=0, eta_knob=0.5)
        sizes[seeded is not None] = [t.batch_size for r in runs for t in r.trials if t.converged]
    assert sizes[False] == [trace.default_batch_size] * 5
    assert sizes[True][0] == trace.default_batch_size
    assert sizes[True][1] == best
    assert sizes[True][-1] == best


def test_a_trusted_parent_s_job_budgets_against_the_default_its_prior_predicts() -> None:
    """A job that ran the prior's best first has no measured default: the prior's word on it
    (three times the best) sets the budget, where the best alone left nothing to explore."""
    prior = Prior.of({32: 3.0, 64: 3.0, 128: 1.0, 256: 1.5}, mode=PriorMode.TRUST)
    stats = {128: _converged(128, 100.0)}
    seeded, cold = Horizon.of(10, stats, 64, prior), Horizon.of(10, stats, 64)
    assert seeded.default_cost == pytest.approx(300.0)
    assert cold.default_cost is None
    assert seeded.allowance == pytest.approx((1 + HORIZON_SLACK) * 10 * 300.0 - 100.0 - 9 * 100.0)
    assert cold.allowance == pytest.approx((1 + HORIZON_SLACK) * 10 * 100.0 - 1000.0)
    measured = {**stats, 64: _converged(64, 250.0)}
    assert Horizon.of(10, measured, 64, prior).default_cost == 250.0  # measured: as it is


def test_the_prior_s_word_on_an_unbounded_size_is_weighed_by_how_far_it_may_be_off() -> None:
    """With one measured size nothing of the job's own estimates a neighbour: the saving the
    prior predicts, weighed by `PRIOR_SPREAD`, must pay back over the runs left. A neighbour it
    calls 46% dearer (P100 movielens-1m's 8192 beside 16384) is not worth a run over 5
    recurrences, and is over 50; one it calls 10% dearer is over 10."""
    assert expected_saving(1.0, 0.0) == 0.0
    assert expected_saving(0.8, 0.0) == pytest.approx(0.2)
    assert expected_saving(1.46, PRIOR_SPREAD) == pytest.approx(0.013, abs=0.001)
    assert expected_saving(1.105, PRIOR_SPREAD) == pytest.approx(0.065, abs=0.001)
    # a Monte Carlo of the same expectation
    draws = [math.exp(PRIOR_SPREAD * statistics.NormalDist().inv_cdf((i + 0.5) / 20000))
             for i in range(20000)]  # fmt: skip
    mean = statistics.fmean(max(0.0, 1.0 - 1.105 * d) for d in draws)
    assert expected_saving(1.105, PRIOR_SPREAD) == pytest.approx(mean, rel=0.01)

    prior = Prior.of({8: 1.46, 16: 1.0}, mode=PriorMode.TRUST)
    stats = {16: _converged(16, 100.0)}

    def explores(recurrences: int, size: int, predicted: float) -> bool:
        horizon = Horizon.of(recurrences, stats, 8, prior)
        assert horizon.allowance is not None
        assert horizon.allowance > EXPLORATION_RESERVE * 100
        return horizon.may_explore(size, predicted)

    assert not explores(5, 8, 146.0)
    assert explores(50, 8, 146.0)
    assert explores(10, 8, 110.5)
    assert not explores(2, 8, 110.5)  # one run left after it: 0.065 of a run, under the margin


def test_an_exploration_that_never_converges_takes_a_job_at_most_one_run_past_its_budget() -> None:
    """P100 imagenet's only other size never converges: exploring it loses a whole run, which
    the budget planned as a saving. The run stops by the cheapest size's cost plus the
    allowance (the job's figures when it ran), so the job ends at most one run at its cheapest
    size past its budget, its runs' noise aside; and nothing is explored after it."""
    trace = load_trace_job("imagenet", "p100")
    expected, past = 10, []
    for seed in range(8):
        spec = job_spec(trace, f"h-never-{seed}", mab_seed=seed, expected_recurrences=expected)
        runs = simulate(trace, in_process(spec), recurrences=expected, seed=seed, eta_knob=0.5)
        trials = [t for run in runs for t in run.trials]
        failed = [i for i, t in enumerate(trials) if not t.converged]
        if not failed:
            continue
        (at,) = failed  # one at most: it spends the allowance
        before = trials[:at]
        converged: dict[int, list[float]] = {}
        for trial in before:
            if trial.converged:
                converged.setdefault(trial.batch_size, []).append(trial.cost)
        default = statistics.fmean(converged[trace.default_batch_size])
        cheapest = min(statistics.fmean(costs) for costs in converged.values())
        done = sum(len(costs) for costs in converged.values())
        budget = (1.0 + HORIZON_SLACK) * expected * default
        allowance = budget - sum(t.cost for t in before) - (expected - done) * cheapest
        assert trials[at].cost <= cheapest + allowance, seed
        sizes_before = {t.batch_size for t in before} | {trials[at].batch_size}
        assert {t.batch_size for t in trials[at:]} <= sizes_before  # nothing new explored
        past.append(sum(run.cost for run in runs) > budget)
    assert any(past)  # the budget is overrun on the trace: the bound is what holds
