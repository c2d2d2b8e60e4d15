"""The learning-curve stop: a run whose curve says it cannot converge within the early-stop
bound stops early and is charged its predicted cost; a run on track is left alone
(`zeus_bso.policy.curves`)."""

from __future__ import annotations

import pytest

from zeus_bso.policy import (
    BatchSizeStats,
    BestRun,
    JobState,
    Reported,
    TrialKind,
    TrialState,
    TrialStatus,
    after_report,
)
from zeus_bso.policy.curves import CURVES_KEPT, epochs_left, extended
from zeus_bso.spec import CreatedJob

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
    """A job in its bandit stage whose cheapest run cost ``best``; 64 had a run of 150 J, and
    ``curves``."""
    stats = {
        32: BatchSizeStats(32, reports=1, mean_cost=best, converged_count=1),
        64: BatchSizeStats(64, reports=1, mean_cost=150.0, converged_count=1, curves=curves),
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


def test_epochs_left_is_the_most_optimistic_of_the_converged_curves() -> None:
    assert epochs_left((), 0.3, True) is None
    # At 0.3: the slow run first had 0.4 (at least 0.3) at epoch 2 and met the target at 6: 4
    # left; the fast one had 0.3 at epoch 1 and the target at 3: 2 left.
    assert epochs_left([SLOW_START], 0.3, True) == 4
    assert epochs_left([SLOW_START, FAST], 0.3, True) == 2
    # Behind every curve's first point: from that point on.
    assert epochs_left([SLOW_START], 0.0, True) == 5


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
    assert second.job.stats[64].mean_cost == pytest.approx((150.0 + 210.0) / 2)
    assert second.trial.curve == ((1, 0.05), (2, 0.1))


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
    assert BatchSizeStats(64, curves=[[[3, 0.5]]]).curves == (((3, 0.5),),)  # type: ignore[arg-type]
