"""A process of a run other than the main one (a rank other than 0) that runs out of memory
while it trains: the main process, the one that talks to the server, does not hear of it. It
waits for this process in a collective (the gradients' all-reduce): gloo fails that collective
at once, and the main process would end the trial as failed, a failure counted against the
batch size; NCCL waits until the process group's timeout, then aborts the main process, and the
trial is left to its lease. Either way the next run got the same size, and ran out again. So
this process marks the trial infeasible itself (`ran_out`), as the main one would have: at the
run's error where its framework calls a hook (Lightning's ``on_exception``, a ``with`` block),
else at its exit (`RanOutAtExit`: the HF Trainer, which calls none)."""

from __future__ import annotations

import logging

from zeus_bso import exits
from zeus_bso.client import failure
from zeus_bso.client.memory import out_of_memory_words
from zeus_bso.errors import ZeusBSOError
from zeus_bso.spec import TrialId
from zeus_bso.training.server_settings import ServerSettings

logger = logging.getLogger(__name__)

PATIENCE_S = 10.0
"""How long a process that ran out of memory tries to reach the server, its answer and its
retries together (it is ending, or `zeus_bso.until_converged`'s processes wait for it)."""


def ran_out(settings: ServerSettings, trial: TrialId, error: BaseException) -> None:
    """Mark ``trial`` infeasible: this process, not the main one, ran out of memory (``error``)
    while it trained. A server that cannot be reached is said, not raised: the process is
    ending with ``error``."""
    logger.warning(
        "zeus-bso: this process (not the one that talks to the server) ran out of memory "
        "(%s): trial %s of job %s is marked infeasible on these GPUs from here (a main process "
        "that did not run out too waits for this one in a collective: with NCCL, until the "
        "process group's timeout)",
        out_of_memory_words(error),
        trial.trial_number,
        trial.job_id,
    )
    try:
        with settings.client(retry_seconds=PATIENCE_S) as client:
            client.infeasible(trial, patience=PATIENCE_S)
    except ZeusBSOError as err:
        logger.warning("zeus-bso: could not mark trial %s infeasible: %s", trial.trial_number, err)


class RanOutAtExit:
    """At this process's exit, a run that did not end, whose process ends with out of memory
    (`zeus_bso.exits.uncaught_error`): `ran_out` (from `watch` until `forget`)."""

    def __init__(self, settings: ServerSettings) -> None:
        self._settings = settings
        self._trial: TrialId | None = None

    def watch(self, trial: TrialId) -> None:
        """``trial``'s run goes on in this process, not the main one."""
        if self._trial is None:
            exits.at_exit(self._at_exit)
        self._trial = trial

    def forget(self) -> None:
        """The run ended (or was judged)."""
        if self._trial is not None:
            exits.forget_at_exit(self._at_exit)
            self._trial = None

    def judged(self, error: BaseException) -> None:
        """The run raised ``error``: out of memory, as `zeus_bso.client.failure.verdict` judges
        it (not in evaluation), is marked (`ran_out`)."""
        trial = self._trial
        self.forget()
        if (
            trial is None
            or failure.verdict(error, trained=True) is not failure.Verdict.OUT_OF_MEMORY
        ):
            return
        ran_out(self._settings, trial, error)

    def _at_exit(self) -> None:
        uncaught = exits.uncaught_error()
        if uncaught is not None:
            self.judged(uncaught)
