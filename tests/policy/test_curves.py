"""The learning-curve stop: a run whose curve says it cannot converge within the early-stop
bound stops early and is charged its predicted cost; a run on track is left alone
(`zeus_bso.policy.curves`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.policy.helpers import judged, with_readings
from zeus_bso.policy import (
    BatchSizeStats,
    BestRun,
    JobState,
    Reported,
    TrialKind,
    TrialState,
    TrialStatus,
    Verdict,
    after_report,
    with_profile,
)
from zeus_bso.policy.curves import (
    CURVES_KEPT,
    MAX_CURVE_POINTS,
    as_curve,
    epochs_left,
    extended,
    thinned,
)
from zeus_bso.policy.priors import Prior, PriorMode
from zeus_bso.policy.pruning import PRIOR_ROUND
from zeus_bso.spec import CreatedJob, GpuConfig, profile_key

# A converged run of batch size 64: metric 0.2 after 1 epoch, 0.4 after 2, the target 0.5 at 6.
SLOW_START: tuple[tuple[int, float], ...] = ((1, 0.2), (2, 0.4), (6, 0.5))
FAST: tuple[tuple[int, float], ...] = ((1, 0.3), (3, 0.5))


def make_job(**options: object) -> CreatedJob:
    values: dict[str, object] = {
        "job_id": "job-1",
        "job_id_prefix": "job",
        "batch_sizes": [32, 64],
        "default_batch_size": 32,
        "target_metric": 0.5,
        "max_epochs": 50,
        "beta_knob": 2.0,
        "eta_knob": 1.0,  # cost = energy
        "max_power": 300.0,
        "number_of_gpus": 1,
        "gpu_model": "V100",
        "learning_curve_stop": True,
        **options,
    }
    return CreatedJob.model_validate(values)


def state_with(*curves: tuple[tuple[int, float], ...], best: float = 100.0) -> JobState:
    """A job in its bandit stage whose cheapest run cost ``best``; 64 had a run of 180 J, and
    ``curves`` (SLOW_START's 6 epochs at `report`'s 30 J: a later run at that pace is judged
    against the reference as it is)."""
    stats = {
        32: BatchSizeStats(32).add(best, converged=True),
        64: replace(BatchSizeStats(64).add(180.0, converged=True), curves=curves),
    }
    return JobState(next_trial_number=5, arms=(32, 64), stats=stats, best=BestRun(32, best))


def report(
    job: CreatedJob, state: JobState, trial: TrialState, epoch: int, metric: float
) -> Reported:
    # 30 J an epoch: the bound (2 x 100 J) allows 6 epochs.
    return after_report(
        job, state, trial, time=epoch, energy=30.0 * epoch, metric=metric, current_epoch=epoch
    )


def test_a_curve_keeps_the_points_where_the_best_metric_improved() -> None:
    curve = extended((), 1, 0.2, True)
    curve = extended(curve, 2, 0.1, True)  # worse: no point
    curve = extended(curve, 3, 0.2, True)  # no better: no point
    curve = extended(curve, 4, 0.3, True)
    assert curve == ((1, 0.2), (4, 0.3))
    assert extended(((1, 0.9),), 2, 0.7, False) == ((1, 0.9), (2, 0.7))  # lower is better


def test_epochs_left_is_the_most_optimistic_of_the_batch_sizes_converged_curves() -> None:
    assert epochs_left({}, 64, ((1, 0.3),), True) is None
    # At 0.3: the slow run first had 0.4 (at least 0.3) at epoch 2 and met the target at 6: 4
    # left; the fast one had 0.3 at epoch 1 and the target at 3: 2 left.
    assert epochs_left({64: [SLOW_START]}, 64, ((1, 0.3),), True) == 4
    assert epochs_left({64: [SLOW_START, FAST]}, 64, ((1, 0.3),), True) == 2
    # Behind every curve's first point: from that point on.
    assert epochs_left({64: [SLOW_START]}, 64, ((1, 0.0),), True) == 5
    # The run's best metric counts, not a worse last report (its curve keeps the best).
    assert epochs_left({64: [SLOW_START]}, 64, ((1, 0.1), (2, 0.4)), True) == 4
    # Its own batch size's curves go first; smaller or larger batch sizes' do not count then.
    assert epochs_left({32: [FAST], 64: [SLOW_START], 128: [FAST]}, 64, ((2, 0.3),), True) == 4


def test_a_first_run_of_a_batch_size_goes_by_the_smaller_ones_scaled_by_its_pace() -> None:
    kept = {32: [FAST], 64: [SLOW_START]}
    # 128 has no curve: 32's and 64's count, each at least once as many epochs (a larger batch
    # size needs at least as many epochs to get as far). At 0.3 after 1 epoch: as fast as 32
    # (2 left), faster than 64 (4 left, scaled by 1).
    assert epochs_left(kept, 128, ((1, 0.3),), True) == 2
    # At 0.3 only after 4 epochs: 4 times as slow as 32 (2 x 4 = 8 left); 64 reached 0.4 (at
    # least 0.3) at epoch 2: twice as slow (4 x 2 = 8).
    assert epochs_left(kept, 128, ((4, 0.3),), True) == 8
    # At 0.45 after 3 epochs: 32 had it at 3 (0 left), 64 at 6 (0 left).
    assert epochs_left(kept, 128, ((3, 0.45),), True) == 0
    # Lower is better: 64 went from 0.9 at epoch 1 to its target 0.5 at 4; twice as slow: 6.
    assert epochs_left({64: [((1, 0.9), (4, 0.5))]}, 128, ((2, 0.9),), False) == 6


def test_a_first_run_goes_by_larger_batch_sizes_within_the_step_bound() -> None:
    """A walk down is predicted too: a smaller batch size needs at least as many optimizer steps
    as a larger one to get as far, so at least ``small / large`` as many epochs."""
    assert epochs_left({}, 64, ((1, 0.3),), True) is None
    kept = {256: [((4, 0.3), (12, 0.5))]}  # 256 took 8 epochs from 0.3 to the target
    # At 0.3 after 4 epochs, as 256: the same pace, 8 left.
    assert epochs_left(kept, 128, ((4, 0.3),), True) == 8
    # After 1 epoch: four times as fast, but 128 needs at least half of 256's epochs: 4 left.
    assert epochs_left(kept, 128, ((1, 0.3),), True) == 4
    # 64 at least a quarter of them (2 left); 32 an eighth, but its pace says a quarter: 2.
    assert epochs_left(kept, 64, ((1, 0.3),), True) == 2
    assert epochs_left(kept, 32, ((1, 0.3),), True) == 2


def test_a_run_that_stalls_is_predicted_slower_the_longer_it_stalls() -> None:
    """A run still at 0.3 after ``epoch`` epochs, where 256 got past it at epoch 12, is at least
    ``epoch / 12`` times as slow."""
    kept = {256: [((4, 0.3), (12, 0.5))]}
    assert epochs_left(kept, 128, ((4, 0.3),), True, epoch=4) == 8
    assert epochs_left(kept, 128, ((4, 0.3),), True, epoch=12) == 8
    assert epochs_left(kept, 128, ((4, 0.3),), True, epoch=24) == 16
    assert epochs_left(kept, 512, ((4, 0.3),), True, epoch=36) == 24
    # The own batch size's curves are not scaled: a run of 256 is predicted by them as it is.
    assert epochs_left(kept, 256, ((4, 0.3),), True, epoch=36) == 8


def test_a_run_that_cannot_converge_within_the_bound_stops_early_charged_its_prediction() -> None:
    job = make_job()
    state = state_with(SLOW_START)
    trial = TrialState(5, 64, TrialKind.BANDIT)
    # Epoch 2 at 0.1: even the best curve needs 5 more epochs: 60 + 5 x 30 = 210 J > 200 J.
    first = report(job, state, trial, 1, 0.05)
    assert not first.answer.stop_train  # 30 + 5 x 30 = 180 J: may still make it
    second = report(job, first.job, first.trial, 2, 0.1)
    assert second.answer.stop_train
    assert not second.answer.converged
    assert second.final
    assert "learning curve" in (second.answer.message or "")
    assert second.answer.cost == pytest.approx(60.0)  # what it cost
    assert second.trial.cost == pytest.approx(210.0)  # what the job counts: its prediction
    assert second.trial.status is TrialStatus.REPORTED
    assert second.job.stats[64].mean_cost == pytest.approx((180.0 + 210.0) / 2)
    assert second.trial.curve == ((1, 0.05), (2, 0.1))


def exploration_at_epoch_7(job: CreatedJob, energy: float, left: int) -> Verdict:
    """The verdict on an exploration of 64 at epoch 7, ``energy`` J so far (cost = energy) and
    ``left`` epochs of 20 J predicted, against a best run of 100 J and a fresh run of 110 J."""
    return judged(
        job,
        batch_size=64,
        time=0.0,
        energy=energy,
        metric=0.3,
        current_epoch=7,
        best_cost=100.0,
        exploring=True,
        epochs_left=left,
        epoch_cost=20.0,
        fresh_cost=110.0,
    )


@pytest.mark.parametrize(
    ("energy", "left", "stops", "charged", "says"),
    [
        # 140 J and 3 epochs of 20 J left: 200 J > 1.5 x 100 J, but the 60 J still to pay are
        # less than a fresh run's 110 J: finishing is the cheaper way to a converged run.
        (140.0, 3, False, None, ""),
        # 6 epochs left: 120 J still to pay, more than a fresh run: it stops, charged 260 J.
        (140.0, 6, True, 260.0, "still to pay(120.0) > a fresh run's(110.0)"),
        # Over the cap (beta_knob x 100 J), whatever the curve says.
        (205.0, 1, True, None, "beta_knob(2.0)*min_cost(100.0)"),
        # Within the bound: it goes on, as it did before.
        (100.0, 2, False, None, ""),
    ],
)
def test_an_exploration_goes_on_while_what_it_still_has_to_pay_is_less_than_a_fresh_run(
    energy: float, left: int, stops: bool, charged: float | None, says: str
) -> None:
    verdict = exploration_at_epoch_7(make_job(), energy, left)
    assert verdict.stop is stops
    assert not verdict.converged
    assert verdict.charged == charged
    assert says in verdict.message


def test_without_stop_on_cost_to_go_a_run_stops_at_its_prediction() -> None:
    verdict = exploration_at_epoch_7(make_job(stop_on_cost_to_go=False), 140.0, 3)
    assert verdict.stop
    assert verdict.charged == 200.0  # 140 + 3 x 20 J > prune_cost_ratio(1.5) x 100 J


def test_a_run_on_track_is_left_alone_and_its_curve_kept_when_it_converges() -> None:
    job = make_job()
    state = state_with(SLOW_START)
    trial = TrialState(5, 64, TrialKind.BANDIT)
    step = report(job, state, trial, 1, 0.3)  # 30 + 4 x 30 = 150 J <= 200 J
    assert not step.answer.stop_train
    step = report(job, step.job, step.trial, 2, 0.45)  # 60 + 4 x 30 = 180 J
    assert not step.answer.stop_train
    step = report(job, step.job, step.trial, 4, 0.5)
    assert step.answer.converged
    assert step.job.stats[64].curves == (SLOW_START, ((1, 0.3), (2, 0.45), (4, 0.5)))


def test_without_the_option_nothing_stops_on_a_curve_and_no_curve_is_kept() -> None:
    job = make_job(learning_curve_stop=False)
    state = state_with(SLOW_START)
    step = report(job, state, TrialState(5, 64, TrialKind.BANDIT), 2, 0.1)
    assert not step.answer.stop_train  # 60 J: under the bound
    step = report(job, step.job, step.trial, 3, 0.5)
    assert step.answer.converged
    assert step.trial.curve == ((2, 0.1), (3, 0.5))  # the trial records its curve
    assert step.job.stats[64].curves == (SLOW_START,)  # the batch size keeps none more


def test_a_batch_size_keeps_its_latest_converged_curves_only() -> None:
    stats = BatchSizeStats(64)
    for i in range(CURVES_KEPT + 2):
        stats = stats.add(10.0, converged=True, curve=((i + 1, 0.5),))
    stats = stats.add(99.0, converged=False, curve=((1, 0.1),))
    assert [c[0][0] for c in stats.curves] == list(range(3, CURVES_KEPT + 3))
    # Stored as JSON lists, read back as the same curves.
    assert as_curve([[3, 0.5]]) == ((3, 0.5),)


def test_a_first_run_of_a_larger_batch_size_that_falls_behind_stops_early() -> None:
    job = make_job(batch_sizes=[32, 64, 128])
    state = state_with(SLOW_START)  # 64 converged along SLOW_START; 128 never ran

    def run(metrics: list[float]) -> list[bool]:
        trial, stops = TrialState(5, 128, TrialKind.BANDIT), []
        for epoch, metric in enumerate(metrics, start=1):
            # 20 J an epoch: the bound (2 x 100 J) allows 10 epochs.
            step = after_report(
                job, state, trial, time=0, energy=20 * epoch, metric=metric, current_epoch=epoch
            )
            trial = step.trial
            stops.append(step.answer.stop_train)
        return stops

    # 0.2 after 1 epoch, as 64 did: 5 epochs left, 20 + 100 J: goes on.
    assert run([0.2, 0.4]) == [False, False]
    # 0.2 only after 2 epochs: twice as slow as 64, so 10 epochs left, 40 + 200 J > 200 J: stops
    # (without the pace, 40 + 100 J would not).
    assert run([0.1, 0.2]) == [False, True]


def test_a_related_job_s_epochs_scale_other_sizes_curves_instead_of_the_pace() -> None:
    """Where a related job says how many times as many epochs a run of the batch size takes as
    one of another size, that size's curves are scaled by it, not by the run's pace."""
    kept = {32: [FAST], 64: [SLOW_START]}
    # At 0.3 after 4 epochs: by its pace 8 left (above); 32 took 2 epochs from 0.3 to the
    # target, and the related job's runs of 128 took 1.5 times 32's epochs: 3.
    assert epochs_left(kept, 128, ((4, 0.3),), True, scales={32: 1.5}) == 3
    # 64 is scaled by the related job too where it says so (SLOW_START: 4 from 0.4 on, x 0.5).
    assert epochs_left(kept, 128, ((4, 0.3),), True, scales={32: 1.5, 64: 0.5}) == 2
    # Without a scale for a size, its curves go by the bound and the pace as before.
    assert epochs_left(kept, 128, ((4, 0.3),), True, scales={}) == 8
    # Its own curves are never scaled.
    assert epochs_left({128: [FAST]}, 128, ((4, 0.3),), True, scales={128: 3.0}) == 2


def test_a_run_of_a_prior_s_walk_goes_by_the_related_job_s_epochs() -> None:
    """The run of 128 that falls behind 64's curve (the test above stops it at epoch 2) is a run
    of a trusted prior's walk, whose parent's runs took as many epochs at 128 as at 64: the
    curve's 5 epochs left are not doubled by its pace, 40 + 100 J, and it goes on. Outside the
    walk the pace counts as before."""
    job = make_job(batch_sizes=[32, 64, 128])
    prior = Prior.of({64: 1.0, 128: 1.0}, epochs={64: 6.0, 128: 6.0}, mode=PriorMode.TRUST)
    state = replace(state_with(SLOW_START), prior=prior)

    def stops(round_: int | None) -> list[bool]:
        trial, stopped = TrialState(5, 128, TrialKind.EXPLORATION, round=round_), []
        for epoch, metric in enumerate([0.1, 0.2], start=1):
            step = after_report(
                job, state, trial, time=0, energy=20 * epoch, metric=metric, current_epoch=epoch
            )
            trial = step.trial
            stopped.append(step.answer.stop_train)
        return stopped

    assert stops(PRIOR_ROUND) == [False, False]
    assert stops(0) == [False, True]


def test_the_stop_is_the_same_on_gpus_that_cost_twice_as_much() -> None:
    job = make_job()
    two = GpuConfig(max_power=600.0, number_of_gpus=2, gpu_model="V100")
    base = profile_key(job)
    readings = {(base, 64): (30.0, 0.0), (profile_key(two), 64): (60.0, 0.0)}
    state = with_readings(with_profile(job, state_with(SLOW_START), two), readings)
    moved = job.model_copy(update=two.model_dump())  # the job registered last on two V100s
    decisions = []
    for profile, scale in ((base, 1.0), (profile_key(two), 2.0)):
        trial, stops = TrialState(5, 64, TrialKind.BANDIT, profile=profile), []
        for epoch, metric in ((1, 0.05), (2, 0.1)):
            step = after_report(
                moved,
                state,
                trial,
                time=0.0,
                energy=30.0 * scale * epoch,
                metric=metric,
                current_epoch=epoch,
            )
            trial = step.trial
            stops.append(step.answer.stop_train)
        decisions.append(stops)
    # On one V100: 30 + 5 x 30 J <= 2 x 100 J, then 60 + 5 x 30 J > 200 J. On two, all doubled.
    assert decisions == [[False, True], [False, True]]


def test_a_slow_first_epoch_is_not_extrapolated() -> None:
    """A first epoch may hold one-off start-up work: nothing is predicted from it alone, and
    then the cheaper of the mean epoch and the epochs since the last report counts."""
    job = make_job()
    state = state_with(SLOW_START)  # the bound: 2 x 100 J
    trial = TrialState(5, 64, TrialKind.BANDIT)
    first = after_report(job, state, trial, time=0, energy=90.0, metric=0.2, current_epoch=1)
    assert not first.answer.stop_train  # 90 + 5 x 90 J would be over, but it is one epoch
    # Epoch 2 cost 20 J: 4 epochs left at 20 J, 110 + 80 J <= 200 J (at the mean, 55 J, over).
    second = after_report(
        job, first.job, first.trial, time=0, energy=110.0, metric=0.4, current_epoch=2
    )
    assert not second.answer.stop_train
    # Epoch 3 cost 60 J and no better: 4 epochs left at 56.7 J (the mean), 170 + 227 J > 200 J.
    third = after_report(
        job, second.job, second.trial, time=0, energy=170.0, metric=0.4, current_epoch=3
    )
    assert third.answer.stop_train
    assert "learning curve" in (third.answer.message or "")


def test_a_curve_of_twenty_thousand_improving_epochs_stays_short_and_keeps_its_ends() -> None:
    curve: tuple[tuple[int, float], ...] = ()
    for epoch in range(1, 20_001):
        curve = extended(curve, epoch, epoch / 20_000, higher_is_better=True)
        assert len(curve) <= MAX_CURVE_POINTS
    assert curve[0] == (1, 1 / 20_000)
    assert curve[-1] == (20_000, 1.0)
    epochs = [e for e, _ in curve]
    assert epochs == sorted(set(epochs))
    assert len(curve) > MAX_CURVE_POINTS // 2  # thinned by half at a time, not to nothing


def test_a_thinned_curve_never_predicts_more_epochs_left_than_the_whole_one() -> None:
    whole = tuple((e, 1 - 0.9**e) for e in range(1, 300))
    short = thinned(thinned(whole))
    for reached in range(1, 299, 7):
        run = ((reached, 1 - 0.9**reached),)
        full = epochs_left({64: [whole]}, 64, run, higher_is_better=True)
        thin = epochs_left({64: [short]}, 64, run, higher_is_better=True)
        assert full is not None
        assert thin is not None
        assert thin <= full
        first = epochs_left({32: [whole]}, 64, ((reached * 2, 1 - 0.9**reached),), True)
        first_thin = epochs_left({32: [short]}, 64, ((reached * 2, 1 - 0.9**reached),), True)
        assert first is not None
        assert first_thin is not None
        assert first_thin <= first


def test_an_exploration_that_stalls_where_the_kept_curve_jumped_to_the_target_stops() -> None:
    """32's curve reached 0.3 only where it met the target (a jump, as at a learning-rate
    step): it predicts no epochs left for a run at 0.3, however long that run stays there. An
    exploration is expected to stall as long again as it has, and stops once what it still has
    to pay is more than a fresh run (100 J); a bandit run is judged by the curve alone, up to
    the cap (beta_knob x 100 J)."""
    job = make_job()
    jump = ((1, 0.2), (12, 0.5))
    stats = {32: replace(BatchSizeStats(32).add(100.0, converged=True), curves=(jump,))}
    state = JobState(next_trial_number=2, stats=stats, best=BestRun(32, 100.0))

    def stops_at(kind: TrialKind) -> tuple[int, float | None, str]:
        trial = TrialState(1, 64, kind, round=0)
        for epoch in range(1, 30):
            # 0.3 from the second epoch on, 12 J an epoch.
            metric = 0.2 if epoch == 1 else 0.3
            step = after_report(
                job, state, trial, time=0, energy=12 * epoch, metric=metric, current_epoch=epoch
            )
            trial = step.trial
            if step.answer.stop_train:
                return epoch, trial.cost, step.answer.message or ""
        raise AssertionError("the run never stopped")

    epoch, charged, message = stops_at(TrialKind.EXPLORATION)
    # Stalled since epoch 2: 9 epochs more at epoch 11, 108 J still to pay > 100 J.
    assert epoch == 11
    assert charged == pytest.approx(12.0 * 11 + 12.0 * 9)
    assert "still to pay(108.0) > a fresh run's(100.0)" in message
    epoch, charged, message = stops_at(TrialKind.BANDIT)
    assert epoch == 17  # 204 J > 200 J
    assert "beta_knob(2.0)" in message


@pytest.mark.parametrize("restarted", [True, False])
def test_a_restarts_one_off_work_is_not_extrapolated(restarted: bool) -> None:
    """A run killed and resumed compiles again: its first report since the restart holds that
    work, and predicts nothing (`TrialState.since`), as a first epoch does. The same epoch
    without a restart is an epoch that cost that much, and stops the run."""
    job = make_job()
    state = state_with(SLOW_START)  # the bound: 2 x 100 J
    trial = TrialState(5, 64, TrialKind.BANDIT)
    first = after_report(job, state, trial, time=0, energy=30.0, metric=0.2, current_epoch=1)
    assert not first.answer.stop_train  # 30 + 5 x 30 J: on track
    resumed = replace(first.trial, resumed_at_epoch=1 if restarted else None)
    # Epoch 2 cost 60 J (30 J of them the restart's) and is no better: the curve's epochs left
    # at 45 J an epoch take it over 200 J.
    second = after_report(job, first.job, resumed, time=0, energy=90.0, metric=0.2, current_epoch=2)
    assert second.answer.stop_train is not restarted
    if not restarted:
        assert "learning curve" in (second.answer.message or "")
