"""One run's conversation with the server: what it says and hears (`JobConversation`), the HTTP
session it talks through (`ServerClient`), job ids and run keys (`job_ids`), a trial's progress
(`TrialProgress`: the clock and the energy meter since training began), and how a run ended
(`RunOutcome`).

Nothing here knows of ranks or frameworks: `zeus_bso.training` builds on it.
"""

from zeus_bso.client.conversation import JobConversation
from zeus_bso.client.http import ServerClient
from zeus_bso.client.job_ids import RUN_KEY_VARIABLE, run_key_from_environment, stable_job_id
from zeus_bso.client.outcome import RunOutcome, until_converged
from zeus_bso.client.progress import Elapsed, TrialProgress

__all__ = [
    "RUN_KEY_VARIABLE",
    "Elapsed",
    "JobConversation",
    "RunOutcome",
    "ServerClient",
    "TrialProgress",
    "run_key_from_environment",
    "stable_job_id",
    "until_converged",
]
