"""zeus-bso: learn, across recurrences of a training job, the batch size with the lowest cost.

What a training script imports. Importing this package pulls in neither torch, Lightning nor
transformers.
"""

from zeus_bso.errors import (
    BatchSizeDoesNotFitError,
    NoConvergedBatchSizeError,
    OperationOrderError,
    PolicyError,
    ServerCertificateError,
    ServerConnectionError,
    ServerRejectedError,
    ZeusBSOError,
    ZeusBSOTrainFailError,
)
from zeus_bso.lazy import lazy_names

TYPE_CHECKING = False  # not typing's: importing typing takes ~20 ms a command's start-up needs
if TYPE_CHECKING:
    from zeus_bso.client import RunOutcome, until_converged
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
    from zeus_bso.training import BatchSizeOptimizer

__version__ = "0.1.0"


_LAZY = {
    **dict.fromkeys(("RunOutcome", "until_converged"), "zeus_bso.client"),
    "BatchSizeOptimizer": "zeus_bso.training",
    **dict.fromkeys(
        (
            "CreatedJob",
            "GpuConfig",
            "JobParams",
            "JobSpec",
            "JobSpecFromClient",
            "ReportResponse",
            "StopReason",
            "TrainingResult",
            "TrialId",
        ),
        "zeus_bso.spec",
    ),
}


# Names are imported when first asked for: the server, which imports this package for its wire
# models and policy, has no use for the client, its HTTP library and the energy meters; and
# importing the package alone (its errors, the commands' entry point) stays quick, so that Ctrl-C
# while a command loads ends it cleanly (`zeus_bso.entry`).
__getattr__ = lazy_names(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    """Every public name, those not imported yet included (a REPL's or an editor's completion)."""
    return sorted({*globals(), *__all__})


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
    "ServerCertificateError",
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
