"""The cost of a run and the stop rules applied after every report."""

from __future__ import annotations

from zeus_bso.policy.types import Verdict
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
) -> Verdict:
    """Decide whether a run stops after this report, and whether it converged.

    ``best_cost`` is the lowest cost of a *converged* run of this job so far (upstream lets a cheap
    failed run lower it; we do not). The rules, in order: target reached (stop, converged);
    ``current_epoch >= max_epochs`` (stop, not converged); cost above ``beta_knob * best_cost``
    (stop, not converged); otherwise keep training.
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
    if job.beta_knob is not None and best_cost is not None and cost > job.beta_knob * best_cost:
        return Verdict(
            stop=True,
            converged=False,
            cost=cost,
            message=(
                f"Batch Size({batch_size}) exceeded the cost upper bound: current cost({cost}) > "
                f"beta_knob({job.beta_knob})*min_cost({best_cost})"
            ),
        )
    return Verdict(
        stop=False, converged=False, cost=cost, message="Stop condition not met, keep training"
    )
