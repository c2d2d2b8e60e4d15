"""What the hand-written loops' adapters (Accelerate, Fabric) do with their framework's
checkpoints: a checkpoint restored into a run must hold the run's trial."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from zeus_bso.errors import ConfigurationError, ZeusBSOError
from zeus_bso.training.session import TrialSession
from zeus_bso.training.trial_file import restore_refused


def check_restore(
    session: TrialSession,
    read: Callable[[], Mapping[str, Any] | None],
    how: str,
    resume_with: str,
) -> None:
    """Refuse, on every process, a checkpoint that the framework restores into ``session``'s
    run (``read``: what it holds of a trial, read on the main process) where it is not the
    run's own trial (`restore_refused`): the trial is released and `ConfigurationError` raised
    (another process's error names it)."""

    def check(_: object) -> None:
        refused = restore_refused(session.trial, read(), how, resume_with)
        if refused is not None:
            raise ConfigurationError(refused)

    try:
        session.on_main(check)
    except ZeusBSOError as err:
        session.release(str(err))  # not the batch size's fault
        raise
