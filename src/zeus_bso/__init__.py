"""zeus-bso: learn, across recurrences of a training job, the batch size with the lowest cost.

What a training script imports. Importing this package pulls in neither torch, Lightning nor
transformers.
"""

from zeus_bso.client import BatchSizeOptimizer
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

__version__ = "0.1.0"

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
