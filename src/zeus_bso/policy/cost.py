"""The cost of a run and the stop rules applied after every report."""

from __future__ import annotations

from collections.abc import Mapping

from zeus_bso.policy.curves import Curve
from zeus_bso.policy.types import BatchSizeStats, BestRun, ConvergedStats, Verdict
from zeus_bso.spec import CreatedJob


def zeus_cost(energy: float, time: float, eta_knob: float, max_power: float) -> float:
    """Cost in joules: ``eta * energy + (1 - eta) * max_power * time``."""
    return eta_knob * energy + (1.0 - eta_knob) * max_power * time


def target_reached(job: CreatedJob, metric: float) -> bool:
    """Whether ``metric`` meets the job's target."""
    if job.higher_is_better_metric:
        return metric >= job.target_metric
    return metric <= job.target_metric


def judge_report(
    job: CreatedJob,
    *,
    batch_size: int,
    time: float,
    energy: float,
    metric: float,
    current_epoch: int,
    best_cost: float | None,
    exploring: bool = False,
    epochs_left: int | None = None,
    epoch_cost: float | None = None,
) -> Verdict:
    """Decide whether a run stops after this report, and whether it converged.

    ``best_cost`` is the early-stop reference: the lowest cost of a *converged* run of this job
    so far, or the lowest mean of a batch size's converged runs (``early_stop_reference``);
    upstream lets a cheap failed run lower it, we do not. The rules, in order: target reached
    (stop, converged); ``current_epoch >= max_epochs`` (stop, not converged); cost above the
    bound (stop, not converged); otherwise keep training.

    The bound is ``beta_knob * best_cost``. A pruning exploration (``exploring``) that would be
    dropped for costing more than ``prune_cost_ratio`` times the best is stopped at that ratio.
    With ``early_stop_predictive`` the run also stops when one more epoch would cross the bound.
    With ``epochs_left`` (the learning-curve stop's prediction of the epochs the run still needs
    to converge) it also stops when that many more epochs at ``epoch_cost`` (default: its mean
    cost per epoch) would.
    """
    cost = zeus_cost(energy, time, job.eta_knob, job.max_power)
    if target_reached(job, metric):
        return Verdict(stop=True, converged=True, cost=cost, message="Train succeeded")
    if current_epoch >= job.max_epochs:
        return Verdict(
            stop=True,
            converged=False,
            cost=cost,
            message=f"Train failed to converge within max_epoch({job.max_epochs})",
        )
    knob, ratio = "beta_knob", job.beta_knob
    prune = job.prune_cost_ratio if exploring else None
    if prune is not None and (ratio is None or prune < ratio):
        knob, ratio = "prune_cost_ratio", prune
    if ratio is not None and best_cost is not None:
        bound = ratio * best_cost
        next_epoch = cost / current_epoch if job.early_stop_predictive else 0.0
        per_epoch = cost / current_epoch if epoch_cost is None else epoch_cost
        predicted = cost + per_epoch * (epochs_left or 0)
        if predicted > bound and cost + next_epoch <= bound:
            return Verdict(
                stop=True,
                converged=False,
                cost=cost,
                charged=predicted,
                message=(
                    f"Batch Size({batch_size}) is predicted by its learning curve to exceed the"
                    f" cost upper bound: cost at convergence({predicted}) after {epochs_left} more"
                    f" epochs > {knob}({ratio})*min_cost({best_cost})"
                ),
            )
        if cost + next_epoch > bound:
            return Verdict(
                stop=True,
                converged=False,
                cost=cost,
                message=(
                    f"Batch Size({batch_size}) exceeded the cost upper bound: current cost({cost})"
                    f" > {knob}({ratio})*min_cost({best_cost})"
                    + (" (predicted for the next epoch)" if cost <= bound else "")
                ),
            )
    return Verdict(
        stop=False, converged=False, cost=cost, message="Stop condition not met, keep training"
    )


def best_reference(job: CreatedJob, converged: Mapping[int, ConvergedStats]) -> BestRun | None:
    """The early-stop reference of a job from its batch sizes' converged runs.

    ``early_stop_reference="best_run"``: the cheapest converged run (upstream). ``"best_mean"``:
    the batch size whose converged runs cost least on average, at that mean.
    """
    candidates: list[tuple[float, int]] = []
    for batch_size, stats in converged.items():
        value = stats.best if job.early_stop_reference == "best_run" else stats.mean
        if stats.count == 0 or value is None:
            continue
        candidates.append((value, batch_size))
    if not candidates:
        return None
    cost, batch_size = min(candidates)
    return BestRun(batch_size, cost)


def fold_final_report(
    job: CreatedJob,
    stats: Mapping[int, BatchSizeStats],
    batch_size: int,
    cost: float,
    converged: bool,
    curve: Curve | None = None,
) -> tuple[dict[int, BatchSizeStats], BestRun | None]:
    """A job's per-batch-size statistics after a run's final report, and the early-stop
    reference they give (see `best_reference`); ``curve``, the run's learning curve, is kept if it
    converged. The server and the simulator both record a final report with this."""
    per_size = dict(stats)
    entry = per_size.get(batch_size, BatchSizeStats(batch_size))
    per_size[batch_size] = entry.add(cost, converged, curve)
    return per_size, best_reference(job, {b: s.converged for b, s in per_size.items()})
