"""The framework-neutral training core: `TrialSession`, the one implementation of a run (rank 0
talks to the server through its `ServerRun`, every rank gets its answer or its error, each
physical GPU is measured once), `BatchSizeOptimizer` (the session in a world of one, with
upstream Zeus's names), the object collectives the session uses (`collectives`), and the one
mechanism that lets a process that used gloo end cleanly (`clean_exit`).

The framework adapters in `zeus_bso.integrations` are thin hook mappings over the session.
"""

from zeus_bso.client.failure import evaluation_code
from zeus_bso.client.memory import out_of_memory
from zeus_bso.client.outcome import ReportAnswer, RunOutcome
from zeus_bso.training.optimizer import BatchSizeOptimizer
from zeus_bso.training.session import TrialSession
from zeus_bso.training.session_options import RunOptions, SessionOptions

__all__ = [
    "BatchSizeOptimizer",
    "ReportAnswer",
    "RunOptions",
    "RunOutcome",
    "SessionOptions",
    "TrialSession",
    "evaluation_code",
    "out_of_memory",
]
"""What the adapters use: the session and the options they pass on to it, the answer to a
report, the outcome of the run it ends, where to name a framework's evaluation code, and what
is out of memory."""
