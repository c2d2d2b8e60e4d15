"""What a report gets that no server judges: the server is away (the run trains offline), or
the run trains at a size the optimizer did not choose (a framework that went on at its own)."""

from __future__ import annotations

from zeus_bso.policy.cost import Report, StopRules, answer_of, judge_report
from zeus_bso.spec import JobSpec, ReportResponse


def judged_without_server(
    spec: JobSpec, batch_size: int, metric: float, epoch: int
) -> ReportResponse:
    """A report that no server judges (the server is down, or the run trains at a size the
    optimizer did not choose), by the policy's own rules without a cost bound (no run to compare
    with): stop at the job's target or at its ``max_epochs``."""
    rules = StopRules(
        spec.target_metric,
        spec.higher_is_better_metric,
        spec.max_epochs,
        beta_knob=None,
        prune_cost_ratio=None,
        reference="best_run",
        predictive=False,
        learning_curve=False,
        cost_to_go=False,
    )
    report = Report(batch_size=batch_size, cost=0.0, metric=metric, epoch=epoch)
    return answer_of(judge_report(rules, report, None)).model_copy(update={"cost": None})
