"""The batch size optimizer's algorithm, as pure functions of a job's config and history.

No I/O, no clock, no async. The job's state machine is in `machine`: the server loads a job's
state under its row's lock, calls `after_dispatch`, `after_report` or `after_event`, and stores
what they return; the simulator calls the same functions in-process.
"""

from zeus_bso.policy.bandits import (
    BANDITS,
    Bandit,
    arm_posteriors,
    bandit_factory,
    bandit_for,
    choose_arm,
    recommended,
)
from zeus_bso.policy.cost import (
    Report,
    StopRules,
    best_reference,
    fold_final_report,
    judge_report,
    target_reached,
    zeus_cost,
)
from zeus_bso.policy.decide import decide, rng_for
from zeus_bso.policy.history import history_of
from zeus_bso.policy.machine import (
    LIFECYCLE,
    OPEN,
    Dispatched,
    Event,
    StatusChange,
    after_dispatch,
    after_event,
    moved,
    out_of_memory,
    ran_out_where_it_fit,
)
from zeus_bso.policy.posteriors import arm_posterior, conjugate_update
from zeus_bso.policy.priors import learned_prior
from zeus_bso.policy.profiles import (
    Profiles,
    profiles_of,
    registered_on,
    state_on,
    with_profile,
)
from zeus_bso.policy.pruning import PruningSettings, next_pruning_step
from zeus_bso.policy.reporting import Reported, after_report, with_stop_settings
from zeus_bso.policy.types import (
    Arms,
    BatchSizeStats,
    BestRun,
    ByProfile,
    ConvergedStats,
    CostStats,
    Dispatch,
    EpochSums,
    JobHistory,
    JobState,
    Observations,
    Posterior,
    Prior,
    PriorMode,
    Stage,
    TrialState,
    Verdict,
)
from zeus_bso.spec import TrialKind, TrialStatus

__all__ = [
    "BANDITS",
    "LIFECYCLE",
    "OPEN",
    "Arms",
    "Bandit",
    "BatchSizeStats",
    "BestRun",
    "ByProfile",
    "ConvergedStats",
    "CostStats",
    "Dispatch",
    "Dispatched",
    "EpochSums",
    "Event",
    "JobHistory",
    "JobState",
    "Observations",
    "Posterior",
    "Prior",
    "PriorMode",
    "Profiles",
    "PruningSettings",
    "Report",
    "Reported",
    "Stage",
    "StatusChange",
    "StopRules",
    "TrialKind",
    "TrialState",
    "TrialStatus",
    "Verdict",
    "after_dispatch",
    "after_event",
    "after_report",
    "arm_posterior",
    "arm_posteriors",
    "bandit_factory",
    "bandit_for",
    "best_reference",
    "choose_arm",
    "conjugate_update",
    "decide",
    "fold_final_report",
    "history_of",
    "judge_report",
    "learned_prior",
    "moved",
    "next_pruning_step",
    "out_of_memory",
    "profiles_of",
    "ran_out_where_it_fit",
    "recommended",
    "registered_on",
    "rng_for",
    "state_on",
    "target_reached",
    "with_profile",
    "with_stop_settings",
    "zeus_cost",
]
