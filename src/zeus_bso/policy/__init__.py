"""The batch size optimizer's algorithm, as pure functions of a job's config and history.

No I/O, no clock, no async: the server loads a job's history under a lock, calls `decide` or
`judge_report`, and stores the result; the simulator calls the same functions in-process.
"""

from zeus_bso.policy.bandit import arm_posterior, arm_posteriors, choose_arm, conjugate_update
from zeus_bso.policy.cost import (
    best_reference,
    fold_final_report,
    judge_report,
    target_reached,
    zeus_cost,
)
from zeus_bso.policy.decide import decide, rng_for
from zeus_bso.policy.pruning import next_pruning_step
from zeus_bso.policy.types import (
    BatchSizeStats,
    BestRun,
    ConvergedStats,
    CostStats,
    Dispatch,
    Exploration,
    JobHistory,
    Posterior,
    Stage,
    TrialKind,
    TrialStatus,
    Verdict,
)

__all__ = [
    "BatchSizeStats",
    "BestRun",
    "ConvergedStats",
    "CostStats",
    "Dispatch",
    "Exploration",
    "JobHistory",
    "Posterior",
    "Stage",
    "TrialKind",
    "TrialStatus",
    "Verdict",
    "arm_posterior",
    "arm_posteriors",
    "best_reference",
    "choose_arm",
    "conjugate_update",
    "decide",
    "fold_final_report",
    "judge_report",
    "next_pruning_step",
    "rng_for",
    "target_reached",
    "zeus_cost",
]
