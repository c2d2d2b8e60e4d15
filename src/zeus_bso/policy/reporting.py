"""What a report does to a job and its trial (`after_report`): the half of the job's state
machine (`zeus_bso.policy.machine`) that judges a run's reports.

A report is priced in its run's profile's units and judged by the stop rules of a run
(`zeus_bso.policy.cost.judge_report`), then by the job's own bounds (a related job's
prediction, ``expected_recurrences``); one that ends the run folds its cost into the job's
statistics. A report of a trial that already ended is answered with its final verdict; one of a
trial whose size cannot train on its GPUs is answered and not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NotRequired, TypedDict

from zeus_bso.errors import ReportMismatchError
from zeus_bso.policy.cost import (
    Report,
    StopRules,
    answer_of,
    best_reference,
    fold_final_report,
    fresh_run_cost,
    judge_report,
    run_load,
    stopped_itself,
    zeus_cost,
)
from zeus_bso.policy.curves import Curve, epochs_left, extended, outlasting_its_stall
from zeus_bso.policy.horizon import over_horizon
from zeus_bso.policy.machine import horizon_of, is_extension
from zeus_bso.policy.priors import epoch_scales, over_prior
from zeus_bso.policy.profiles import Profiles, counted_anew, job_on, profiles_of, state_on
from zeus_bso.policy.pruning import PRIOR_ROUND
from zeus_bso.policy.types import JobState, TrialState, Verdict
from zeus_bso.spec import CreatedJob, ReportResponse, TrialKind, TrialStatus


@dataclass(frozen=True, slots=True)
class Reported:
    """A report's outcome: the job and the trial after it, and the answer to the client."""

    job: JobState
    trial: TrialState
    answer: ReportResponse
    final: bool
    """Whether this report ended the trial (its cost is now in the job's statistics)."""


def _check_cumulative(trial: TrialState, *, time: float, energy: float, current_epoch: int) -> None:
    if trial.epochs is not None and current_epoch < trial.epochs:
        raise ReportMismatchError(
            f"current_epoch {current_epoch} is below the {trial.epochs} epochs already "
            f"reported for trial {trial.trial_number}; report cumulative values"
        )
    for name, value, before in (("time", time, trial.time), ("energy", energy, trial.energy)):
        if before is not None and value < before:
            raise ReportMismatchError(
                f"{name} {value:g} is below the {before:g} already reported for trial "
                f"{trial.trial_number}; time and energy are cumulative since the run began"
            )


class Measured(TypedDict):
    """A report's measurements (cumulative since its run began) and whether it is the run's
    last (``final``), as `after_report` takes them."""

    time: float
    energy: float
    metric: float
    current_epoch: int
    final: NotRequired[bool]
    why: NotRequired[str | None]
    diverged: NotRequired[bool]


def after_report(
    job: CreatedJob,
    state: JobState,
    trial: TrialState,
    *,
    time: float,
    energy: float,
    metric: float,
    current_epoch: int,
    final: bool = False,
    why: str | None = None,
    diverged: bool = False,
) -> Reported:
    """Judge a report of ``trial`` (cumulative time, energy and epochs since its run began);
    ``final``: its run stops after it of its own accord (`stopped_itself`; ``why``, in words);
    ``diverged``: so, because its training diverged, and ``metric`` is none (the trial keeps its
    last one, and its curve).

    The run's cost is priced with its own profile's ``max_power`` and judged against the
    early-stop reference in that profile's units (see `after_dispatch`). A report that ends the
    run folds its cost into the job's statistics and early-stop reference (`_ended`); one that
    does not renews the run (an abandoned trial is dispatched again). A job with two profiles
    counts the report's epoch in its `JobState.by_profile`.

    Raises:
        ReportMismatchError: fewer epochs, or less time or energy, than already reported.
    """
    priced = job_on(job, state, trial.profile)
    if trial.status is TrialStatus.REPORTED:
        return _already_reported(priced, state, trial)
    if trial.status in NOT_MEASURED:
        return _not_counted(state, trial)
    _check_cumulative(trial, time=time, energy=energy, current_epoch=current_epoch)
    cost = zeus_cost(energy, time, priced.eta_knob, priced.max_power)
    profiles = _measuring(job, state, trial, cost / current_epoch)
    seen = state_on(job, state, profiles, trial.profile)
    rules = _rules_for(job, trial)
    hib = rules.higher_is_better
    curve = trial.curve if diverged else extended(trial.curve, current_epoch, metric, hib)
    report = _report_of(rules, state, seen, trial, (curve, cost, metric, current_epoch))
    best = seen.best.cost if seen.best else None
    verdict = judge_report(rules, report, best, nothing_converged=best is None)
    if not (verdict.stop or trial.must_deliver):  # one that must deliver: the target alone
        verdict = _job_bound(job, state, seen, trial, report) or verdict
    if (final and not verdict.stop) or diverged:
        verdict = stopped_itself(rules, report, why)
    answer = answer_of(verdict)
    charged = verdict.cost if verdict.charged is None else verdict.charged
    metric_kept = trial.metric if diverged else metric
    measured = replace(trial, epochs=current_epoch, time=time, energy=energy, metric=metric_kept)
    measured = replace(measured, cost=charged, curve=curve)
    state = counted_anew(state, trial, measured)
    if not verdict.stop:
        return Reported(state, replace(measured, status=TrialStatus.DISPATCHED), answer, False)
    return _ended(rules, state, measured, verdict, answer, profiles)


def _measuring(
    job: CreatedJob, state: JobState, trial: TrialState, epoch_cost: float
) -> Profiles | None:
    """The job's hardware profiles (None: it has one), ``trial``'s report measuring its
    profile's cost of an epoch (``epoch_cost``) too."""
    profiles = profiles_of(job, state)
    if profiles is None:
        return None
    return profiles.measuring(trial.profile or profiles.base, trial.batch_size, epoch_cost)


def _rules_for(job: CreatedJob, trial: TrialState) -> StopRules:
    """The stop rules ``trial``'s reports are judged by: the job's, without a cost stop for a
    run that must deliver (a pinned one, or one `TrialState.must_deliver`)."""
    rules = StopRules.of(job)
    if trial.kind is TrialKind.PINNED or trial.must_deliver:
        return replace(rules, beta_knob=None, prune_cost_ratio=None, run_cost_ratio=None)
    return rules


def with_stop_settings(job: CreatedJob, state: JobState) -> JobState:
    """The job's state under ``job``'s stop settings (registered again with another
    ``early_stop_reference``): its early-stop reference made again from its batch sizes'
    converged runs, as its next final report would make it."""
    converged = {size: entry.converged for size, entry in state.stats.items()}
    return replace(state, best=best_reference(StopRules.of(job), converged))


NOT_MEASURED = frozenset({TrialStatus.INFEASIBLE})
"""Ended statuses whose batch size cannot train on the run's GPUs: a late report of such a
trial (a rank that went on, a delivery that came after) is answered, and not counted. (A
``released`` trial is different: a run resumed from a checkpoint continues it and reports.)"""


def _not_counted(state: JobState, trial: TrialState) -> Reported:
    """The answer to a late report of a trial that ended ``infeasible``: stop; the trial stays
    as it ended and nothing is counted."""
    answer = ReportResponse(
        stop_train=True,
        converged=False,
        message=(
            f"Trial({trial.trial_number}) ended as {trial.status.value}; its report is not counted."
        ),
    )
    return Reported(state, trial, answer, final=False)


def _already_reported(priced: CreatedJob, state: JobState, trial: TrialState) -> Reported:
    """The answer to a report of a trial that already ended: its final verdict again."""
    spent = trial.cost  # what it cost, as its final answer said (not a predicted cost)
    if trial.energy is not None and trial.time is not None:
        spent = zeus_cost(trial.energy, trial.time, priced.eta_knob, priced.max_power)
    answer = ReportResponse(
        stop_train=True,
        converged=bool(trial.converged),
        message=f"Result for this trial({trial.trial_number}) is already reported.",
        cost=spent,
    )
    return Reported(state, trial, answer, final=False)


def _job_bound(
    job: CreatedJob, state: JobState, seen: JobState, trial: TrialState, report: Report
) -> Verdict | None:
    """The stop of a run that the job's own bounds end, beyond the stop rules of a run: a run
    of a prior's walk past what the prior predicted (`over_prior`), or an exploration past what
    the job's ``expected_recurrences`` allow (`over_horizon`); None: neither ends it."""
    if trial.round == PRIOR_ROUND and state.prior is not None:
        size, default = trial.batch_size, job.default_batch_size
        since = trial.since(report.cost, report.epoch)
        bound = over_prior(state.prior, seen.stats, size, report.cost, report.epoch, default, since)
        if bound is not None:
            return bound
    horizon = horizon_of(job, state, seen) if report.exploring else None
    return None if horizon is None else over_horizon(horizon, report)


def _report_of(
    rules: StopRules,
    state: JobState,
    seen: JobState,
    trial: TrialState,
    reported: tuple[Curve, float, float, int],
) -> Report:
    """The report (its curve, cost, metric and epoch) as the stop rules read it. With
    ``learning_curve_stop``, from a run's second report on, it carries the epochs the run still
    needs (predicted from the kept curves; for a run of a prior's walk, scaled by the related
    job's epochs: `zeus_bso.policy.priors.epoch_scales`; for an exploration, at least its stall:
    `outlasting_its_stall`), what an epoch costs (the cheaper of its mean epoch and its epochs
    since the last report: its first may hold a compile; neither, and no prediction, at its
    first report since it restarted, whose epochs hold the restart's: `TrialState.since`, nor at
    a report of the same epoch again), what a fresh run costs (`fresh_run_cost`)
    and how much dearer its epochs are than its size's converged runs' (`run_load`), both from
    ``seen`` (the job's statistics in the run's profile's units). With ``max_run_cost_ratio``, a
    run at another size than the default carries the default's measured cost (in those units)."""
    curve, cost, metric, current_epoch = reported
    left, epoch_cost, fresh, load = None, None, None, 1.0
    if rules.learning_curve and trial.epochs and trial.cost is not None:
        # None: the epochs since the last report hold a restart's one-off work, or there are
        # none (a report of the same epoch again): nothing is predicted from them.
        since = trial.since(cost, current_epoch)
        mean = cost / current_epoch
        epoch_cost = None if since is None else min(mean, since)
        load = run_load(
            seen.stats.get(trial.batch_size), mean if epoch_cost is None else epoch_cost
        )
        if epoch_cost is not None:
            kept = {size: entry.curves for size, entry in state.stats.items()}
            prior = state.prior if trial.round == PRIOR_ROUND else None
            scales = None if prior is None else epoch_scales(prior, trial.batch_size)
            hib = rules.higher_is_better
            left = epochs_left(kept, trial.batch_size, curve, hib, current_epoch, scales)
            if left is not None and trial.kind is TrialKind.EXPLORATION:
                left = outlasting_its_stall(left, curve, current_epoch)
            fresh = None if left is None else fresh_run_cost(seen.stats)
    default_cost, size = None, rules.default_batch_size
    if rules.run_cost_ratio is not None and size is not None and size != trial.batch_size:
        default = seen.stats.get(size)
        default_cost = None if default is None else default.converged.mean
    return Report(
        trial.batch_size,
        cost,
        metric,
        current_epoch,
        trial.kind is TrialKind.EXPLORATION,
        left,
        epoch_cost,
        fresh,
        default_cost,
        load,
    )


def _ended(
    rules: StopRules,
    state: JobState,
    measured: TrialState,
    verdict: Verdict,
    answer: ReportResponse,
    profiles: Profiles | None,
) -> Reported:
    """A run's final report: the trial ends, and its cost (in the job's first profile's units)
    joins the job's statistics and early-stop reference."""
    ended = replace(
        measured,
        status=TrialStatus.REPORTED,
        converged=verdict.converged,
        message=verdict.message,
    )
    base_cost, paid = ended.cost, verdict.cost
    assert base_cost is not None
    if profiles is not None:
        factor = profiles.factor(measured.batch_size, measured.profile, profiles.base)
        base_cost, paid = base_cost * factor, paid * factor
    stats, base_best = fold_final_report(
        rules,
        state.stats,
        measured.batch_size,
        base_cost,
        verdict.converged,
        measured.curve if rules.learning_curve else None,
        paid,
    )
    arms = state.arms
    if arms is not None and is_extension(ended) and verdict.converged:
        arms = tuple(sorted({*arms, ended.batch_size}))
    after = replace(state, stats=stats, best=base_best, arms=arms)
    return Reported(after, ended, answer, final=True)
