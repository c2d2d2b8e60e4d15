"""The cost of a run and the stop rules applied after every report."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from zeus_bso.policy.curves import Curve
from zeus_bso.policy.types import BatchSizeStats, BestRun, ConvergedStats, Verdict
from zeus_bso.spec import ReportResponse, StopReason

if TYPE_CHECKING:
    from zeus_bso.spec import CreatedJob


def zeus_cost(energy: float, time: float, eta_knob: float, max_power: float) -> float:
    """Cost in joules: ``eta * energy + (1 - eta) * max_power * time``."""
    return eta_knob * energy + (1.0 - eta_knob) * max_power * time


@dataclass(frozen=True, slots=True)
class StopRules:
    """When a job's runs stop, and what their costs are judged against (from its options:
    `of`)."""

    target_metric: float
    higher_is_better: bool
    max_epochs: int
    beta_knob: float | None
    prune_cost_ratio: float | None
    reference: Literal["best_run", "best_mean"]
    """``early_stop_reference``."""
    predictive: bool
    """``early_stop_predictive``."""
    learning_curve: bool
    """``learning_curve_stop``."""
    cost_to_go: bool
    """``stop_on_cost_to_go``."""
    run_cost_ratio: float | None = None
    """``max_run_cost_ratio``: no run at a size other than the default may cost more than this
    many times the default's measured cost (`Report.default_cost`)."""
    default_batch_size: int | None = None

    @classmethod
    def of(cls, job: CreatedJob) -> StopRules:
        """The job's stop rules (its target, ``max_epochs``, ``beta_knob``, ``prune_cost_ratio``,
        ``early_stop_*``, ``learning_curve_stop``, ``stop_on_cost_to_go`` and
        ``max_run_cost_ratio``)."""
        return cls(
            job.target_metric,
            job.higher_is_better_metric,
            job.max_epochs,
            job.beta_knob,
            job.prune_cost_ratio,
            job.early_stop_reference,
            job.early_stop_predictive,
            job.learning_curve_stop,
            job.stop_on_cost_to_go,
            job.max_run_cost_ratio,
            job.default_batch_size,
        )


def target_reached(rules: StopRules, metric: float) -> bool:
    """Whether ``metric`` meets the job's target."""
    if rules.higher_is_better:
        return metric >= rules.target_metric
    return metric <= rules.target_metric


@dataclass(frozen=True, slots=True)
class Report:
    """One report of a run, as the stop rules read it: its cost priced once, on the run's own
    hardware profile."""

    batch_size: int
    cost: float
    """The run's cost so far (J, `zeus_cost`)."""
    metric: float
    epoch: int
    """The epochs the run has trained (cumulative)."""
    exploring: bool = False
    """Whether the run is a pruning exploration."""
    epochs_left: int | None = None
    """The learning-curve stop's prediction of the epochs it still needs to converge."""
    epoch_cost: float | None = None
    """What one more epoch costs, for that prediction (default: its mean epoch)."""
    fresh_cost: float | None = None
    """What a fresh run costs at the batch size whose converged runs cost least on average (the
    alternative to finishing this run; `fresh_run_cost`)."""
    default_cost: float | None = None
    """With ``max_run_cost_ratio``, for a run at a size other than the default: the mean cost of
    the default batch size's converged runs (None before one converged: no cap yet)."""
    load: float = 1.0
    """How much dearer its epochs are than its batch size's converged runs' were (`run_load`):
    the early-stop reference is taken at its pace."""

    @property
    def next_epoch_cost(self) -> float:
        """What one more epoch costs, for a prediction: `epoch_cost`, or the mean epoch."""
        return self.cost / self.epoch if self.epoch_cost is None else self.epoch_cost


def judge_report(
    rules: StopRules, report: Report, best_cost: float | None, *, nothing_converged: bool = False
) -> Verdict:
    """Decide whether a run stops after this report, and whether it converged (with
    ``nothing_converged``, no run of the job has reached the target yet, and a run that ends at
    ``max_epochs`` says what that means: `_max_epochs_why`).

    ``best_cost`` is the early-stop reference: the lowest cost of a *converged* run of this job
    so far, or the lowest mean of a batch size's converged runs (``early_stop_reference``);
    upstream lets a cheap failed run lower it, we do not. A run whose epochs cost more than its
    batch size's converged runs' did (`Report.load`) is judged against the reference at its
    pace. The rules, in order: target reached
    (stop, converged); ``max_epochs`` reached (stop, not converged); cost above the run's cap
    (`over_cap`: stop, not converged); cost above the bound (`early_stop_bound`, `over_bound`:
    stop, not converged); otherwise keep training.
    """
    cost = report.cost
    if target_reached(rules, report.metric):
        side = ">=" if rules.higher_is_better else "<="
        return Verdict(
            stop=True,
            converged=True,
            cost=cost,
            message="Train succeeded",
            reason=StopReason.CONVERGED,
            why=f"it reached the target ({report.metric:.4g} {side} {rules.target_metric:g})",
        )
    if report.epoch >= rules.max_epochs:
        return Verdict(
            stop=True,
            converged=False,
            cost=cost,
            message=f"Train failed to converge within max_epoch({rules.max_epochs})",
            reason=StopReason.MAX_EPOCHS,
            why=_max_epochs_why(rules, report, nothing_converged),
        )
    capped = over_cap(rules, report)
    if capped is not None:
        return capped
    bound = early_stop_bound(rules, report.exploring)
    if bound is not None and best_cost is not None:
        verdict = over_bound(rules, report, bound, best_cost * report.load)
        if verdict is not None:
            return _at_its_pace(verdict, report.load)
    return Verdict(
        stop=False, converged=False, cost=cost, message="Stop condition not met, keep training"
    )


def _at_its_pace(verdict: Verdict, load: float) -> Verdict:
    """``verdict`` saying that the reference it names was taken at the run's pace."""
    if load <= 1.0:
        return verdict
    return replace(
        verdict,
        why=f"{verdict.why}; the reference taken at this run's pace, its epochs {load:.2f}x"
        " as dear as its batch size's converged runs' were",
    )


def _max_epochs_why(rules: StopRules, report: Report, nothing_converged: bool) -> str:
    """Why a run stopped at ``max_epochs``, and, where no run of the job has converged, what
    that costs: with nothing converged there is no cost to bound a run by, so every batch size
    the job explores trains to ``max_epochs`` until one reaches the target. A target out of
    reach (a typo, a fraction for a percentage) or a ``max_epochs`` too short for it made a
    whole pruning round of such runs, and the job blocked at its end, each run saying only that
    it trained its ``max_epochs``."""
    why = f"it trained the job's max_epochs ({rules.max_epochs})"
    if not nothing_converged:
        return why
    return (
        f"{why}, and no run of the job has reached target_metric {rules.target_metric:g} yet"
        f" (this one's last metric: {report.metric:.4g}): until one does, each batch size it"
        " explores trains as long. If the default batch size cannot reach that target within"
        " max_epochs, none may: check both"
    )


def stopped_itself(rules: StopRules, report: Report, why: str | None = None) -> Verdict:
    """The verdict on a run's last report where the run stopped of its own accord below the
    target (a framework's early stopping: its metric stopped improving; ``why``, the run's
    words, go into the message): it did not converge, and is charged as if it had trained the
    job's ``max_epochs`` at its mean epoch's cost, which its early stopping says it would have
    done in vain (its cost so far would make a batch size look cheap for giving up early)."""
    epochs = rules.max_epochs
    said = f" ({why})" if why else ""
    return Verdict(
        stop=True,
        converged=False,
        cost=report.cost,
        message=f"Train failed to converge: the run stopped itself at epoch {report.epoch}"
        f"{said}, charged as max_epochs({epochs})",
        charged=max(report.cost, report.cost / report.epoch * epochs),
        reason=StopReason.ENDED_EARLY,
        why=f"counted as not converging at this size, charged as if it had trained the job's "
        f"max_epochs ({epochs})",
    )


def answer_of(verdict: Verdict) -> ReportResponse:
    """The answer to a report that ``verdict`` judged."""
    return ReportResponse(
        stop_train=verdict.stop,
        converged=verdict.converged,
        message=verdict.message,
        cost=verdict.cost,
        reason=verdict.reason,
        why=verdict.why,
    )


class CostBound(StrEnum):
    """The option whose ratio to the early-stop reference bounds a run's cost."""

    BETA_KNOB = "beta_knob"
    PRUNE_COST_RATIO = "prune_cost_ratio"
    MAX_RUN_COST_RATIO = "max_run_cost_ratio"
    """Its reference is the default batch size's measured cost, not the cheapest run's."""


def early_stop_bound(rules: StopRules, exploring: bool) -> tuple[CostBound, float] | None:
    """The option that bounds a run's cost and its ratio to the reference: ``beta_knob``, or
    for a pruning exploration ``prune_cost_ratio`` where it is lower (the run would be dropped
    at that ratio anyway). None: no bound."""
    knob, ratio = CostBound.BETA_KNOB, rules.beta_knob
    prune = rules.prune_cost_ratio if exploring else None
    if prune is not None and (ratio is None or prune < ratio):
        knob, ratio = CostBound.PRUNE_COST_RATIO, prune
    return None if ratio is None else (knob, ratio)


def over_bound(
    rules: StopRules, report: Report, bound: tuple[CostBound, float], best_cost: float
) -> Verdict | None:
    """The stop of a run over ``bound`` times ``best_cost``, or None if it may go on: its cost
    now, with ``early_stop_predictive`` its cost after one more epoch, and with a learning-curve
    prediction its cost at convergence (charged, not paid: the run would have cost that); with
    ``stop_on_cost_to_go`` too, see `over_cost_to_go`."""
    if report.epochs_left is not None and rules.cost_to_go:
        return over_cost_to_go(rules, report, bound, best_cost)
    knob, ratio = bound
    cost, epoch = report.cost, report.epoch
    limit = ratio * best_cost
    next_epoch = cost / epoch if rules.predictive else 0.0
    predicted = cost + report.next_epoch_cost * (report.epochs_left or 0)
    if predicted > limit and cost + next_epoch <= limit:
        return _predicted_over(report, knob, ratio, best_cost, predicted)
    if cost + next_epoch > limit:
        return _over(report, knob, ratio, best_cost, next_epoch)
    return None


def over_cap(rules: StopRules, report: Report) -> Verdict | None:
    """The stop of a run that would cost more than ``max_run_cost_ratio`` times the default's
    measured cost (`Report.default_cost`), or None: it stops before an epoch that would take it
    over (its cost of an epoch known from the first). Always predictive: the cap is a promise
    to the platform, not a reference to beat. A learning-curve prediction does not stop it:
    on the trace, stopping runs predicted to converge over the cap cost V100 jobs more than
    the cap alone (1.9 points of regret at 10 recurrences, against 1.3)."""
    ratio, default_cost = rules.run_cost_ratio, report.default_cost
    if ratio is None or default_cost is None:
        return None
    next_epoch = report.next_epoch_cost
    if report.cost + next_epoch <= ratio * default_cost:
        return None
    return _over(report, CostBound.MAX_RUN_COST_RATIO, ratio, default_cost, next_epoch)


def over_cost_to_go(
    rules: StopRules, report: Report, bound: tuple[CostBound, float], best_cost: float
) -> Verdict | None:
    """The stop of a run whose learning curve predicts the epochs it still needs: it goes on
    while its predicted cost at convergence is within ``bound``, or while what it still has to
    pay is no more than a fresh run at the cheapest batch size (`Report.fresh_cost`; finishing
    is then the cheaper way to a converged run); it stops over the cap, ``beta_knob`` times
    ``best_cost`` (or ``bound`` without one), which ends a run whose optimistic prediction
    never comes true."""
    knob, ratio = bound
    cost, epoch = report.cost, report.epoch
    beta = rules.beta_knob
    cap_knob, cap_ratio = (knob, ratio) if beta is None else (CostBound.BETA_KNOB, beta)
    if cap_ratio < ratio:
        cap_knob, cap_ratio = knob, ratio
    next_epoch = cost / epoch if rules.predictive else 0.0
    if cost + next_epoch > cap_ratio * best_cost:
        return _over(report, cap_knob, cap_ratio, best_cost, next_epoch)
    still = report.next_epoch_cost * (report.epochs_left or 0)
    predicted = cost + still
    fresh = best_cost if report.fresh_cost is None else report.fresh_cost
    if predicted <= ratio * best_cost or still <= fresh:
        return None
    verdict = _predicted_over(report, knob, ratio, best_cost, predicted)
    message = f"{verdict.message}, and the cost still to pay({still}) > a fresh run's({fresh})"
    why = f"{verdict.why}, and what it still has to pay is more than a fresh run costs"
    return replace(verdict, message=message, why=why)


def _predicted_over(
    report: Report, knob: CostBound, ratio: float, best_cost: float, predicted: float
) -> Verdict:
    return Verdict(
        stop=True,
        converged=False,
        cost=report.cost,
        charged=predicted,
        message=(
            f"Batch Size({report.batch_size}) is predicted by its learning curve to exceed"
            f" the cost upper bound: cost at convergence({predicted}) after"
            f" {report.epochs_left} more epochs > {knob}({ratio})*{_reference(knob)}({best_cost})"
        ),
        reason=StopReason.PREDICTED_COST,
        why=(
            f"its learning curve predicts a cost at convergence, {report.epochs_left} more"
            f" epochs on, of {_times(predicted, best_cost)} {_whose(knob)}"
            f" (the bound: {knob} = {ratio:g})"
        ),
    )


def _over(
    report: Report, knob: CostBound, ratio: float, best_cost: float, next_epoch: float
) -> Verdict:
    cost = report.cost
    return Verdict(
        stop=True,
        converged=False,
        cost=cost,
        message=(
            f"Batch Size({report.batch_size}) exceeded the cost upper bound: current"
            f" cost({cost}) > {knob}({ratio})*{_reference(knob)}({best_cost})"
            + (" (predicted for the next epoch)" if cost <= ratio * best_cost else "")
        ),
        reason=StopReason.COST_BOUND,
        why=(
            f"its cost is {_times(cost, best_cost)} {_whose(knob)}"
            + (
                f", {_times(cost + next_epoch, best_cost)} after one more epoch"
                if cost <= ratio * best_cost
                else ""
            )
            + f" (the bound: {knob} = {ratio:g})"
        ),
    )


def _reference(knob: CostBound) -> str:
    """The reference ``knob`` multiplies, in upstream's message's words."""
    return "default_cost" if knob is CostBound.MAX_RUN_COST_RATIO else "min_cost"


def _whose(knob: CostBound) -> str:
    """The reference ``knob`` multiplies, for a person."""
    if knob is CostBound.MAX_RUN_COST_RATIO:
        return "the default batch size's cost"
    return "the cheapest run's"


def _times(cost: float, best_cost: float) -> str:
    """``cost`` as a multiple of ``best_cost``, rounded for a person (``2.2x``)."""
    if best_cost > 0 and math.isfinite(cost / best_cost):
        ratio = cost / best_cost
        return f"{ratio:.1f}x" if ratio < 10 else f"{ratio:.0f}x"
    return f"{cost:.3g} J against {best_cost:.3g} J,"


def converged_means(stats: Mapping[int, BatchSizeStats]) -> dict[int, float]:
    """The mean cost of each batch size's converged runs (the sizes with one)."""
    return {
        size: mean for size, entry in stats.items() if (mean := entry.converged.mean) is not None
    }


def fresh_run_cost(stats: Mapping[int, BatchSizeStats]) -> float | None:
    """The mean cost of the converged runs of the batch size where it is lowest: what a fresh
    run is expected to cost (None before any run converged)."""
    return min(converged_means(stats).values(), default=None)


MAX_LOAD = 2.0
"""How much dearer than its batch size's converged runs' a run's epochs may make the early-stop
reference it is judged against (`run_load`): a run that a stalled machine or a fault makes many
times slower is still stopped on its cost. On the trace at a pace spread of 0.3
(`benchmarks/regret.py --loaded`): without a bound the same within 0.005 at 50 recurrences; at
1.5, 41 and 24 stops at sizes that converged before on the V100 and P100, against 4 and 3."""


def run_load(stats: BatchSizeStats | None, epoch_cost: float) -> float:
    """How much dearer a run's epochs (``epoch_cost``) are than its batch size's converged runs'
    were (``stats``: their mean cost over their mean epochs to converge), from 1 to `MAX_LOAD`;
    1 where the size has no converged run with its learning curve kept.

    On a loaded or shared machine the same batch size's runs take from a fraction to several
    times as long an epoch, and one lucky run sets the early-stop reference; a run as many epochs
    from the target as that one was, but on slower epochs, was stopped on its cost (by
    ``beta_knob`` or its learning curve's prediction), lost whole, and the recurrence paid for a
    new run. Taken at the run's pace, the reference stops a run for needing more epochs, not for
    a slow machine. Measured: `benchmarks/regret.py --loaded`."""
    epochs = None if stats is None else stats.converged_epochs
    mean = None if stats is None else stats.converged.mean
    if epochs is None or mean is None or epochs <= 0.0 or mean <= 0.0:
        return 1.0
    return min(MAX_LOAD, max(1.0, epoch_cost * epochs / mean))


def best_reference(rules: StopRules, converged: Mapping[int, ConvergedStats]) -> BestRun | None:
    """The early-stop reference of a job from its batch sizes' converged runs.

    ``early_stop_reference="best_run"``: the cheapest converged run (upstream). ``"best_mean"``:
    the batch size whose converged runs cost least on average, at that mean.
    """
    candidates: list[tuple[float, int]] = []
    for batch_size, stats in converged.items():
        value = stats.best if rules.reference == "best_run" else stats.mean
        if stats.count == 0 or value is None:
            continue
        candidates.append((value, batch_size))
    if not candidates:
        return None
    cost, batch_size = min(candidates)
    return BestRun(batch_size, cost)


def fold_final_report(
    rules: StopRules,
    stats: Mapping[int, BatchSizeStats],
    batch_size: int,
    cost: float,
    converged: bool,
    curve: Curve | None = None,
    paid: float | None = None,
) -> tuple[dict[int, BatchSizeStats], BestRun | None]:
    """A job's per-batch-size statistics after a run's final report, and the early-stop
    reference they give (see `best_reference`); ``curve``, the run's learning curve, is kept if
    it converged; ``paid``, what the run cost where ``cost`` is what it is charged. The server
    and the simulator both record a final report with this."""
    per_size = dict(stats)
    entry = per_size.get(batch_size, BatchSizeStats(batch_size))
    per_size[batch_size] = entry.add(cost, converged, curve, paid)
    return per_size, best_reference(rules, {b: s.converged for b, s in per_size.items()})
