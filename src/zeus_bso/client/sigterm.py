"""SIGTERM during a run: the run's trial is released, not charged to its batch size.

A preemption, a scheduler's time limit, ``kill`` or ``docker stop`` sends SIGTERM. By default it
ends the process at once, without Python's cleanup: the trial is left dispatched until its
lease runs out, and a trial abandoned before its first report counts against its batch size as
a crash would (`zeus_bso.policy.pruning`). While a run's trial is open, `SigtermGuard` turns
SIGTERM into `zeus_bso.client.failure.Terminated`, a ``SystemExit`` with status 143 raised in
the main thread: the run's exit paths judge it an interruption, release the trial (or, with a
run key, leave it to the restart) and the process ends with the status SIGTERM gives it. The
guard is one of the process's hooks on SIGTERM (`zeus_bso.exits` installs the handler); a GPU's
power limit, where the run set one, is put back first.

- A SIGTERM handler of the script's own comes first: the guard notes the signal and calls it.
  However the run then ends before the server's stop (an exception, an exit, `end` after a
  graceful stop), it ends as interrupted.
- SIGTERM ignored (``SIG_IGN``) or handled outside Python is left alone.
- A process forked from the one that installed the guard (a DataLoader worker inherits its
  handlers) ends as it would have without it; so does one whose run ended in another thread
  (only the main thread can put the handler from before back).
- A second SIGTERM is the default's again: it ends the process at once.
- Lightning turns SIGTERM into its own exception at the next step; its callback installs no
  guard. Neither does a Jupyter kernel (an exception in a cell does not end the kernel, which
  the signal was sent to end), nor a thread other than the main one, which cannot.
"""

from __future__ import annotations

import signal
import sys

from zeus_bso import exits
from zeus_bso.client.failure import Terminated


class SigtermGuard:
    """Turns SIGTERM into `Terminated` between `install` and `uninstall` (see the module)."""

    def __init__(self) -> None:
        self.received = False
        """Whether SIGTERM came while the guard was installed."""

    def install(self) -> None:
        """Take SIGTERM from here on (see the module for when nothing is installed)."""
        if "ipykernel" not in sys.modules:
            exits.on_signal(signal.SIGTERM, self._on_sigterm)

    def uninstall(self) -> None:
        """Give SIGTERM back to what had it before `install` (a handler installed after the
        guard's keeps it)."""
        exits.forget_signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self) -> BaseException:
        self.received = True
        return Terminated()
