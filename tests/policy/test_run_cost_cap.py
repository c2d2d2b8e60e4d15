"""``max_run_cost_ratio``: no run at a size other than the default costs more than that many
times the default's measured cost."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.policy.helpers import make_job, trained
from zeus_bso.policy import JobState, TrialKind, TrialState, after_report
from zeus_bso.spec import CreatedJob, ReportResponse, StopReason

# A report's cost: 0.5 * energy + 0.5 * 100 * time; beta_knob off, so only the cap stops runs.
JOB = make_job(
    eta_knob=0.5,
    max_power=100.0,
    target_metric=0.9,
    max_epochs=20,
    beta_knob=None,
    default_batch_size=64,
    max_run_cost_ratio=1.5,
)


def _default_converged_at(cost: float) -> JobState:
    """The job after its default size converged once, at ``cost`` (energy only: time 0)."""
    return after_report(
        JOB,
        JobState(),
        TrialState(1, 64, TrialKind.EXPLORATION),
        time=0.0,
        energy=2 * cost,
        metric=1.0,
        current_epoch=4,
    ).job


def _epochs(
    job: CreatedJob, state: JobState, batch_size: int, epoch_cost: float
) -> list[ReportResponse]:
    """Report epochs of ``epoch_cost`` each at ``batch_size``, never reaching the target, until
    the server stops the run: each answer."""
    return trained(job, state, TrialState(2, batch_size, TrialKind.EXPLORATION), epoch_cost)


def test_a_run_stops_before_the_epoch_that_would_take_it_over_the_cap() -> None:
    state = _default_converged_at(1000.0)  # the cap: 1500 J
    answers = _epochs(JOB, state, 32, 200.0)
    last = answers[-1]
    assert last.stop_train
    assert not last.converged
    assert last.reason is StopReason.COST_BOUND
    assert last.cost == 1400.0  # 1600 after one more epoch
    assert "default batch size's cost" in last.why
    assert "max_run_cost_ratio = 1.5" in last.why
    assert "default_cost(1000.0)" in last.message


@pytest.mark.parametrize(
    ("job", "batch_size", "why"),
    [
        (JOB.model_copy(update={"max_run_cost_ratio": None}), 32, "no cap"),
        (JOB, 64, "the default itself"),
    ],
)
def test_runs_the_cap_does_not_bound(job: CreatedJob, batch_size: int, why: str) -> None:
    answers = _epochs(job, _default_converged_at(1000.0), batch_size, 200.0)
    assert answers[-1].reason is StopReason.MAX_EPOCHS, why


def test_no_cap_before_the_default_converged() -> None:
    """A default that never converged has no measured cost to cap against."""
    failed = after_report(
        JOB,
        JobState(),
        TrialState(1, 64, TrialKind.EXPLORATION),
        time=0.0,
        energy=200.0,
        metric=0.1,
        current_epoch=20,
    ).job
    assert _epochs(JOB, failed, 32, 200.0)[-1].reason is StopReason.MAX_EPOCHS


@pytest.mark.parametrize("field", ["must_deliver", "pinned"])
def test_a_run_that_must_deliver_is_not_capped(field: str) -> None:
    state = _default_converged_at(1000.0)
    trial = TrialState(2, 32, TrialKind.EXPLORATION)
    trial = (
        replace(trial, must_deliver=True)
        if field == "must_deliver"
        else replace(trial, kind=TrialKind.PINNED)
    )
    step = after_report(JOB, state, trial, time=0.0, energy=2 * 1800.0, metric=0.1, current_epoch=9)
    assert not step.answer.stop_train


@pytest.mark.parametrize("ratio", [1.0, 0.5, 0, -1, 101, float("inf"), "cheap"])
def test_a_cap_at_or_below_the_default_is_refused(ratio: object) -> None:
    with pytest.raises(ValueError, match="max_run_cost_ratio"):
        make_job(max_run_cost_ratio=ratio)
