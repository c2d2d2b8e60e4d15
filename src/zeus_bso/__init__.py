"""zeus-bso: learn, across recurrences of a training job, the batch size with the lowest cost.

What a training script imports. Importing this package pulls in neither torch, Lightning nor
transformers.
"""

from typing import TYPE_CHECKING

from zeus_bso.errors import (
    NoConvergedBatchSizeError,
    OperationOrderError,
    PolicyError,
    ServerConnectionError,
    ServerRejectedError,
    ZeusBSOError,
)
from zeus_bso.spec import (
    CreatedJob,
    GpuConfig,
    JobParams,
    JobSpec,
    JobSpecFromClient,
    ReportResponse,
    TrainingResult,
    TrialId,
)

if TYPE_CHECKING:
    from zeus_bso.client import BatchSizeOptimizer

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`BatchSizeOptimizer` is imported when first asked for: the server, which imports this
    package for its wire models and policy, has no use for the client, its HTTP library and the
    energy meters."""
    if name == "BatchSizeOptimizer":
        from zeus_bso.client import BatchSizeOptimizer

        return BatchSizeOptimizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
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
    "ServerConnectionError",
    "ServerRejectedError",
    "TrainingResult",
    "TrialId",
    "ZeusBSOError",
    "__version__",
]
