"""One run's HTTP side: the optimizer a training loop drives (`BatchSizeOptimizer`), the HTTP
session it talks through (`ServerClient`), job ids and run keys, and a trial's progress
(`TrialProgress`: the clock and the energy meter since training began).

Nothing here knows of ranks or frameworks: `zeus_bso.training` builds on it.
"""

from zeus_bso.client.http import ServerClient
from zeus_bso.client.optimizer import (
    RUN_KEY_VARIABLE,
    BatchSizeOptimizer,
    run_key_from_environment,
    stable_job_id,
)
from zeus_bso.client.outcome import RunOutcome, until_converged
from zeus_bso.client.progress import Elapsed, TrialProgress

__all__ = [
    "RUN_KEY_VARIABLE",
    "BatchSizeOptimizer",
    "Elapsed",
    "RunOutcome",
    "ServerClient",
    "TrialProgress",
    "run_key_from_environment",
    "stable_job_id",
    "until_converged",
]
