"""The read side's answers, as the server's modules name them: the read routes' response models,
defined once in `zeus_bso.wire.reads`, beside the protocol's, where a client can read them too;
`zeus_bso_server.queries` fills them."""

from zeus_bso.wire.reads import (
    BatchSizeView,
    FleetSummary,
    ForgottenMemoryCaps,
    ForgottenPowerProfile,
    ForgottenPowerProfiles,
    JobStage,
    JobSummary,
    JobView,
    NextRun,
    Pin,
    PinRequest,
    Recommendation,
    Savings,
    SeededFrom,
    SettingDifference,
    SiblingJob,
    TrialView,
)

__all__ = [
    "BatchSizeView",
    "FleetSummary",
    "ForgottenMemoryCaps",
    "ForgottenPowerProfile",
    "ForgottenPowerProfiles",
    "JobStage",
    "JobSummary",
    "JobView",
    "NextRun",
    "Pin",
    "PinRequest",
    "Recommendation",
    "Savings",
    "SeededFrom",
    "SettingDifference",
    "SiblingJob",
    "TrialView",
]
