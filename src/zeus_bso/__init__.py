"""zeus-bso: learn, across recurrences of a training job, the batch size with the lowest cost.

What a training script imports. Importing this package pulls in neither torch, Lightning nor
transformers.
"""

from typing import TYPE_CHECKING

from zeus_bso.errors import (
    BatchSizeDoesNotFitError,
    NoConvergedBatchSizeError,
    OperationOrderError,
    PolicyError,
    ServerConnectionError,
    ServerRejectedError,
    ZeusBSOError,
    ZeusBSOTrainFailError,
)
from zeus_bso.spec import (
    CreatedJob,
    GpuConfig,
    JobParams,
    JobSpec,
    JobSpecFromClient,
    ReportResponse,
    StopReason,
    TrainingResult,
    TrialId,
)

if TYPE_CHECKING:
    from zeus_bso.client import BatchSizeOptimizer, RunOutcome, until_converged

__version__ = "0.1.0"


_CLIENT = frozenset({"BatchSizeOptimizer", "RunOutcome", "until_converged"})


def __getattr__(name: str) -> object:
    """The client's names are imported when first asked for: the server, which imports this
    package for its wire models and policy, has no use for the client, its HTTP library and the
    energy meters."""
    if name in _CLIENT:
        import zeus_bso.client

        return getattr(zeus_bso.client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BatchSizeDoesNotFitError",
    "BatchSizeOptimizer",
    "CreatedJob",
    "GpuConfig",
    "JobParams",
    "JobSpec",
    "JobSpecFromClient",
    "NoConvergedBatchSizeError",
    "OperationOrderError",
    "PolicyError",
    "ReportResponse",
    "RunOutcome",
    "ServerConnectionError",
    "ServerRejectedError",
    "StopReason",
    "TrainingResult",
    "TrialId",
    "ZeusBSOError",
    "ZeusBSOTrainFailError",
    "__version__",
    "until_converged",
]
