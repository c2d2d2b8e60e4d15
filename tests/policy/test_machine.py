"""The job's state machine: dispatch, report, end, expiry and renewal as pure functions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.policy.helpers import make_job
from zeus_bso.errors import ReportMismatchError
from zeus_bso.policy import (
    LIFECYCLE,
    BatchSizeStats,
    Event,
    JobState,
    TrialKind,
    TrialState,
    TrialStatus,
    after_dispatch,
    after_event,
    after_report,
    history_of,
)
from zeus_bso.policy.machine import micro_batch_out_of_memory

# The cost of a report below is eta * energy + (1 - eta) * max_power * time.
JOB = make_job(eta_knob=0.5, max_power=100.0, target_metric=0.9, max_epochs=10, beta_knob=2.0)


def _cost(time: float, energy: float) -> float:
    return 0.5 * energy + 0.5 * 100.0 * time


def test_dispatch_numbers_trials_and_enters_the_bandit_once() -> None:
    state = JobState()
    first = after_dispatch(JOB, state)
    assert first.trial == TrialState(
        1, 64, TrialKind.EXPLORATION, 0, accumulates=False, power_profiling=False
    )
    assert first.job.next_trial_number == 2
    assert first.job.arms is None
    assert not first.entered_bandit

    # Pruning is over once every batch size converged in the only round (upstream's 1 round
    # needs num_pruning_rounds=1): the next decision sets the arms and starts the bandit.
    job = make_job(num_pruning_rounds=1, batch_sizes=[32, 64], default_batch_size=64)
    explored = (
        TrialState(1, 64, TrialKind.EXPLORATION, 0, TrialStatus.REPORTED, cost=5.0, converged=True),
        TrialState(2, 32, TrialKind.EXPLORATION, 0, TrialStatus.REPORTED, cost=9.0, converged=True),
    )
    stats = {64: BatchSizeStats(64).add(5.0, True), 32: BatchSizeStats(32).add(9.0, True)}
    pruned = JobState(next_trial_number=3, stats=stats)
    entering = after_dispatch(job, pruned, explored)
    assert entering.entered_bandit
    assert entering.job.arms == (32, 64)
    assert entering.job.bandit_start == 3
    assert entering.trial.kind is TrialKind.BANDIT
    later = after_dispatch(job, entering.job)
    assert not later.entered_bandit
    assert later.job.bandit_start == 3
    assert entering.job.bandit_pulls == 1
    assert later.job.bandit_pulls == 2


def test_a_progress_report_measures_and_revives_without_touching_the_job() -> None:
    trial = TrialState(1, 64, TrialKind.BANDIT, status=TrialStatus.ABANDONED)
    step = after_report(
        JOB, JobState(), trial, time=10.0, energy=500.0, metric=0.5, current_epoch=1
    )
    assert not step.final
    assert not step.answer.stop_train
    assert step.job == JobState()
    assert step.trial.status is TrialStatus.DISPATCHED
    assert (step.trial.epochs, step.trial.time, step.trial.energy) == (1, 10.0, 500.0)
    assert step.trial.cost == step.answer.cost == _cost(10.0, 500.0)


def test_a_final_report_folds_its_cost_into_the_statistics_and_the_reference() -> None:
    trial = TrialState(1, 64, TrialKind.BANDIT)
    step = after_report(
        JOB, JobState(), trial, time=10.0, energy=500.0, metric=0.95, current_epoch=3
    )
    cost = _cost(10.0, 500.0)
    assert step.final
    assert step.answer.stop_train
    assert step.answer.converged
    assert step.trial.status is TrialStatus.REPORTED
    assert step.trial.converged
    assert step.job.stats[64] == BatchSizeStats(64).add(cost, True)
    assert step.job.best is not None
    assert (step.job.best.batch_size, step.job.best.cost) == (
        64,
        cost,
    )

    # The report again: the same verdict, nothing changes.
    again = after_report(
        JOB, step.job, step.trial, time=99.0, energy=9.0, metric=0.0, current_epoch=9
    )
    assert again.job == step.job
    assert again.trial == step.trial
    assert not again.final
    assert again.answer.stop_train
    assert again.answer.converged
    assert again.answer.cost == cost


def test_a_run_that_stopped_itself_below_the_target_did_not_converge_charged_to_max_epochs() -> (
    None
):
    """A report marked final (its run's early stopping ended it) ends the trial as not
    converged, charged as if the run had trained the job's max_epochs at its mean epoch's cost;
    what it paid is its cost so far. At the target, it converged as any run does."""
    trial = TrialState(1, 64, TrialKind.EXPLORATION, 0)
    step = after_report(
        JOB, JobState(), trial, time=10.0, energy=500.0, metric=0.5, current_epoch=2, final=True
    )
    cost = _cost(10.0, 500.0)
    assert step.final
    assert (step.answer.stop_train, step.answer.converged) == (True, False)
    assert (step.answer.reason, step.answer.cost) == ("ended_early", cost)
    assert step.answer.why == (
        "counted as not converging at this size, charged as if it had trained the job's "
        "max_epochs (10)"
    )
    assert step.trial.status is TrialStatus.REPORTED
    assert (step.trial.converged, step.trial.cost) == (False, cost * 5)
    assert step.job.stats[64] == BatchSizeStats(64).add(cost * 5, False, paid=cost)
    assert step.job.best is None
    reached = after_report(
        JOB, JobState(), trial, time=10.0, energy=500.0, metric=0.95, current_epoch=2, final=True
    )
    assert (reached.answer.converged, reached.answer.reason, reached.trial.cost) == (
        True,
        "converged",
        cost,
    )


def test_the_early_stop_bound_comes_from_the_job_state() -> None:
    state = after_report(
        JOB,
        JobState(),
        TrialState(1, 64, TrialKind.BANDIT),
        time=1.0,
        energy=100.0,
        metric=1.0,
        current_epoch=1,
    ).job
    best = _cost(1.0, 100.0)
    # Twice the best cost is the bound (beta_knob 2): a run above it stops, not converged.
    step = after_report(
        JOB,
        state,
        TrialState(2, 32, TrialKind.BANDIT),
        time=3.0,
        energy=300.0,
        metric=0.1,
        current_epoch=1,
    )
    assert _cost(3.0, 300.0) > 2 * best
    assert step.final
    assert not step.answer.converged
    assert step.trial.status is TrialStatus.REPORTED
    assert step.job.stats[32].reports == 1
    assert step.job.best == state.best


def test_a_run_at_max_epochs_says_what_it_costs_while_no_run_has_converged() -> None:
    """With nothing converged there is no cost to bound a run by: every batch size explored
    trains to ``max_epochs`` until one reaches the target, and the first such run says so (a
    target out of reach made a whole pruning round of them, each saying only that it trained
    its ``max_epochs``). Once a run converged, the stop says that alone."""

    def at_max_epochs(state: JobState, number: int) -> str | None:
        step = after_report(
            JOB,
            state,
            TrialState(number, 32, TrialKind.EXPLORATION),
            time=10.0,
            energy=100.0,
            metric=0.42,
            current_epoch=10,
        )
        assert step.final
        assert not step.answer.converged
        return step.answer.why

    first = at_max_epochs(JobState(), 1)
    assert first == (
        "it trained the job's max_epochs (10), and no run of the job has reached target_metric"
        " 0.9 yet (this one's last metric: 0.42): until one does, each batch size it explores"
        " trains as long. If the default batch size cannot reach that target within"
        " max_epochs, none may: check both"
    )
    converged = after_report(
        JOB,
        JobState(),
        TrialState(1, 64, TrialKind.EXPLORATION),
        time=1.0,
        energy=100.0,
        metric=0.95,
        current_epoch=1,
    ).job
    assert at_max_epochs(converged, 2) == "it trained the job's max_epochs (10)"


@pytest.mark.parametrize(
    ("field", "value"), [("current_epoch", 1), ("time", 9.0), ("energy", 499.0)]
)
def test_reports_that_go_backwards_are_refused(field: str, value: float) -> None:
    trial = replace(TrialState(1, 64, TrialKind.BANDIT), epochs=2, time=10.0, energy=500.0)
    report = {"time": 10.0, "energy": 500.0, "metric": 0.1, "current_epoch": 2, field: value}
    with pytest.raises(ReportMismatchError, match=field):
        after_report(JOB, JobState(), trial, **report)  # type: ignore[arg-type]


@pytest.mark.parametrize("event", list(Event))
@pytest.mark.parametrize("status", list(TrialStatus))
def test_events_follow_the_lifecycle_table(event: Event, status: TrialStatus) -> None:
    trial = TrialState(1, 64, TrialKind.BANDIT, status=status)
    change = LIFECYCLE[event]
    expected = change.target if status in change.sources else status
    assert after_event(trial, event).status is expected


def test_lifecycle_rules() -> None:
    """The rules the table encodes, spelled out: a finished trial never changes by an event."""
    for event in Event:
        for done in (TrialStatus.REPORTED, TrialStatus.FAILED):
            assert done not in LIFECYCLE[event].sources
    assert LIFECYCLE[Event.END].target is TrialStatus.FAILED
    assert LIFECYCLE[Event.EXPIRE].sources == {TrialStatus.DISPATCHED}
    assert LIFECYCLE[Event.RENEW].target is TrialStatus.DISPATCHED


def test_history_with_a_window_needs_windowed_costs() -> None:
    with pytest.raises(ValueError, match="window_size"):
        history_of(make_job(window_size=3), JobState())


@pytest.mark.parametrize(
    ("accumulates", "lowers"),
    [(True, True), (None, True), (False, False)],  # None: a trial stored before it was kept
)
def test_a_micro_batch_lowers_the_cap_only_for_a_run_that_accumulates(
    accumulates: bool | None, lowers: bool
) -> None:
    state = JobState()
    trial = replace(after_dispatch(JOB, state).trial, accumulates=accumulates)
    if not lowers:
        with pytest.raises(ReportMismatchError, match="did not say it accumulates"):
            micro_batch_out_of_memory(JOB, state, trial, 16)
        return
    after = micro_batch_out_of_memory(JOB, state, trial, 16)
    assert set(after.memory_caps.values()) == {16}
