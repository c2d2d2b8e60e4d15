"""`OutcomeHandoff`: a run's outcome, from the child process that trained to the process that
called ``fit``.

Lightning's ``ddp_spawn`` and ``ddp_notebook`` strategies train in processes they start (spawned
or forked), each with a copy of the callback: the copy in the caller never sees the fit, so its
``outcome`` stayed None (and `zeus_bso.until_converged` stopped after one run). The main rank's
copy writes the outcome, as JSON, to a file whose name the caller's callback drew when it was
built (an unguessable name in the temporary folder, readable by its owner only); the caller reads
it, and removes it, when it is asked for the outcome. Processes that built their own callback
(``strategy="ddp"``, ``torchrun``: each process runs the script) write nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import tempfile
import weakref
from pathlib import Path
from typing import Any

from zeus_bso.client.outcome import RunOutcome
from zeus_bso.spec import StopReason

logger = logging.getLogger(__name__)


def outcome_fields(outcome: RunOutcome) -> dict[str, Any]:
    """``outcome`` as JSON-ready fields."""
    return dataclasses.asdict(outcome)


def outcome_from(fields: dict[str, Any]) -> RunOutcome:
    """The outcome that `outcome_fields` wrote."""
    return RunOutcome(**{**fields, "reason": StopReason(fields["reason"])})


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


class OutcomeHandoff:
    """Built in the process that builds the callback; pickled (or forked) with it into the
    processes a launcher starts."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        try:
            folder = tempfile.gettempdir()
        except OSError as err:  # no writable temporary folder (a read-only container)
            logger.debug("zeus-bso: no outcome hand-off: %s", err)
            self._path: Path | None = None
            return
        self._path = Path(folder) / f"zeus-bso-outcome-{secrets.token_hex(12)}.json"
        # An outcome that nobody asked for goes with the callback (or with this process).
        weakref.finalize(self, _remove, self._path)

    @property
    def in_child(self) -> bool:
        """Whether this process is not the one that built the callback: a launcher started it."""
        return os.getpid() != self._pid

    def send(self, outcome: RunOutcome) -> None:
        """In a process a launcher started, leave ``outcome`` for the caller (a later fit's
        replaces it); elsewhere, nothing. A failure to write is logged, never raised: the run's
        own work is done."""
        if not self.in_child or self._path is None:
            return
        staged: str | None = None
        try:
            descriptor, staged = tempfile.mkstemp(
                prefix=self._path.stem + "-", suffix=".part", dir=self._path.parent
            )
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                json.dump(outcome_fields(outcome), file)
            os.replace(staged, self._path)
        except OSError as err:
            if staged is not None:
                _remove(Path(staged))
            logger.warning(
                "zeus-bso: could not hand the run's outcome to the process that started it "
                "(%s); callback.outcome stays None there",
                err,
            )

    def receive(self) -> RunOutcome | None:
        """In the process that built the callback, the outcome a started process left (once:
        the file is removed); None if there is none."""
        if self.in_child or self._path is None:
            return None
        try:
            text = self._path.read_text(encoding="utf-8")
        except OSError:
            return None
        _remove(self._path)
        try:
            return outcome_from(json.loads(text))
        except (ValueError, TypeError, KeyError) as err:
            logger.warning("zeus-bso: the run's outcome could not be read back (%s)", err)
            return None
