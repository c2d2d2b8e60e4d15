"""SIGTERM during a run: the run's trial is released, not charged to its batch size.

A preemption, a scheduler's time limit, ``kill`` or ``docker stop`` sends SIGTERM. By default it
ends the process at once, without Python's cleanup: the trial is left dispatched until its
lease runs out, and a trial abandoned before its first report counts against its batch size as
a crash would (`zeus_bso.policy.pruning`). While a run's trial is open, `SigtermGuard` turns
SIGTERM into `zeus_bso.client.failure.Terminated`, a ``SystemExit`` with status 143 raised in
the main thread: the run's exit paths judge it an interruption, release the trial (or, with a
run key, leave it to the restart) and the process ends with the status SIGTERM gives it.

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

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from zeus_bso.client.failure import Terminated

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class SigtermGuard:
    """Turns SIGTERM into `Terminated` between `install` and `uninstall` (see the module)."""

    def __init__(self) -> None:
        self.received = False
        """Whether SIGTERM came while the guard was installed."""
        self._handler: Callable[[int, FrameType | None], None] | None = None
        self._previous: _Handler = None

    def install(self) -> None:
        """Take SIGTERM from here on (see the module for when nothing is installed)."""
        if self._handler is not None or not _may_install():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is None or previous == signal.SIG_IGN:
            return
        pid = os.getpid()

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            signal.signal(signal.SIGTERM, previous)  # a second SIGTERM: as before the guard
            ours = self._handler is on_sigterm and os.getpid() == pid
            if ours:
                self.received = True
            if callable(previous):
                previous(signum, frame)
            elif ours:
                raise Terminated
            else:  # a forked child, or a guard uninstalled from another thread: the default
                os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
        self._handler, self._previous = on_sigterm, previous

    def uninstall(self) -> None:
        """Give SIGTERM back to what had it before `install` (a handler installed after the
        guard's keeps it)."""
        handler, self._handler = self._handler, None
        if handler is None or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, self._previous)


def _may_install() -> bool:
    return threading.current_thread() is threading.main_thread() and "ipykernel" not in sys.modules
