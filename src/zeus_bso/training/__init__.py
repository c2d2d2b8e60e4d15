"""The framework-neutral training core: `TrialSession` (rank 0 talks to the server, every rank
gets its answer or its error, each physical GPU is measured once), the object collectives it
uses (`collectives`), and the one mechanism that lets a process that used gloo end cleanly
(`clean_exit`).

The framework adapters in `zeus_bso.integrations` are thin hook mappings over the session.
"""

from zeus_bso.client.outcome import RunOutcome
from zeus_bso.training.session import TrialSession

__all__ = ["RunOutcome", "TrialSession"]
"""What the adapters use: the session, and the outcome of the run it ends."""
