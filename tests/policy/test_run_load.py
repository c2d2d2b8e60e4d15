"""A run on slower epochs than its batch size's converged runs is judged at its own pace."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.policy.helpers import make_job
from zeus_bso.policy import BatchSizeStats, BestRun, JobState, TrialKind, TrialState, after_report
from zeus_bso.policy.cost import MAX_LOAD, run_load
from zeus_bso.spec import CreatedJob

CURVE = ((1, 0.2), (5, 0.4), (10, 0.5))
"""32's one converged run: the target (0.5) at epoch 10, for 100 J (10 J an epoch)."""


def _job() -> CreatedJob:
    return make_job(
        learning_curve_stop=True,
        stop_on_cost_to_go=True,
        early_stop_reference="best_mean",
        bandit_exploit_after=None,
        eta_knob=1.0,  # a run's cost is its energy
    )


def _state() -> JobState:
    stats = {32: replace(BatchSizeStats(32).add(100.0, converged=True), curves=(CURVE,))}
    return JobState(next_trial_number=2, stats=stats, best=BestRun(32, 100.0))


def _metric(epoch: int) -> float:
    """The kept run's metric after ``epoch`` epochs: a run on its track."""
    return max(metric for at, metric in CURVE if at <= epoch) if epoch >= 1 else 0.0


def _run(per_epoch: float) -> tuple[int, bool, str]:
    """A bandit run of 32 on the kept run's track, its epochs costing ``per_epoch`` J: the
    epoch it stopped at, whether it converged, and why."""
    job, state = _job(), _state()
    trial = TrialState(1, 32, TrialKind.BANDIT, round=None)
    for epoch in range(1, job.max_epochs + 1):
        step = after_report(
            job,
            state,
            trial,
            time=0.0,
            energy=per_epoch * epoch,
            metric=_metric(epoch),
            current_epoch=epoch,
        )
        trial = step.trial
        if step.answer.stop_train:
            return epoch, step.answer.converged, step.answer.why or ""
    raise AssertionError("the run never stopped")


def test_a_run_on_track_but_on_slower_epochs_converges() -> None:
    """22 J an epoch where 32's converged run took 10: it would converge at 220 J, over
    beta_knob x 100 J, but it is as many epochs from the target as that run was. Taken at its
    pace (2x, the most), the reference lets it finish; it stopped at its second epoch before,
    lost whole."""
    epoch, converged, _ = _run(22.0)
    assert (epoch, converged) == (10, True)


def test_the_pace_counts_at_most_max_load() -> None:
    """50 J an epoch (5x): the reference is taken at 2x, no more, so the run still stops on
    its cost (its learning curve predicts 500 J > beta_knob x 200 J), and says why."""
    epoch, converged, why = _run(50.0)
    assert not converged
    assert epoch < 10
    assert f"{MAX_LOAD:.2f}x as dear as its batch size's converged runs'" in why


def test_a_run_at_its_sizes_pace_is_judged_as_before() -> None:
    """10 J an epoch, but the metric stalls below the target: no load, and the run stops on
    its cost as it always did (beta_knob x 100 J)."""
    job, state = _job(), _state()
    trial = TrialState(1, 32, TrialKind.BANDIT, round=None)
    for epoch in range(1, 40):
        step = after_report(
            job, state, trial, time=0.0, energy=10.0 * epoch, metric=0.4, current_epoch=epoch
        )
        trial = step.trial
        if step.answer.stop_train:
            break
    assert not step.answer.converged
    assert "as dear as its batch size's" not in (step.answer.why or "")
    assert "min_cost(100.0)" in (step.answer.message or "")
    assert (trial.cost or 0.0) <= 200.0 + 10.0  # the first epoch past the bound


def test_run_load() -> None:
    stats = _state().stats[32]
    assert run_load(stats, 15.0) == pytest.approx(1.5)
    assert run_load(stats, 5.0) == 1.0  # a faster run is judged as any
    assert run_load(stats, 80.0) == MAX_LOAD
    assert run_load(None, 80.0) == 1.0  # a size that never converged
    assert run_load(BatchSizeStats(32).add(100.0, converged=True), 80.0) == 1.0  # no curve kept
