"""The process's ways out, one owner: what runs at interpreter exit and when a signal comes.

Several parts of a run have something to do on the way out: a GPU's power limit to put back
(`zeus_bso.power.limits`), a trial to release (`zeus_bso.training.server_run`), gloo's worker
threads to wait for (`zeus_bso.training.clean_exit`), SIGTERM to turn into an exception the run's
exit paths judge (`zeus_bso.client.sigterm`). They add hooks here, and this module alone
installs the ``atexit`` handler and the signal handlers that run them (as Lightning's signal
connector composes the handlers of a fit), so no part's handler has to know the others'.

At interpreter exit (`at_exit`): the hooks, the last added first, each once. The one ``atexit``
handler moves to the end of ``atexit``'s list whenever a hook is added, so the hooks run before
whatever the program registered before them, as their own handlers would. In a
``multiprocessing`` child (Lightning's ``ddp_spawn`` and ``ddp_notebook`` processes), also at
its end, which a forked child reaches without ``atexit``; `uncaught_error` tells a hook the
error the process is ending with.

On a signal (`on_signal`), in the process that added the hooks and on the main thread (only it
can install a handler; elsewhere `on_signal` says False):

1. the hooks run, the last added first (the same signal coming again meanwhile changes
   nothing: a limit being put back is not cut short); a forked child (a DataLoader worker,
   which inherits the handler) runs none;
2. the handler from before is put back, so a second signal does what it always did;
3. the signal does what it did before: the handler from before is called (a script's own,
   a framework's); else the exception a hook returned is raised; else the default ends the
   process.

A signal that is ignored (``SIG_IGN``), or handled outside Python, is left alone: it ends
nothing. A hook added with ``unhandled_only`` is added only where nothing handles the signal
yet (its default is in place): a SIGUSR1 that a framework uses to checkpoint is not an ending.
`forget_signal` takes a hook back; with the last one gone, the handler from before is put back,
unless one installed after ours has taken the signal (which keeps it).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

ExitHook = Callable[[], object]
SignalHook = Callable[[], BaseException | None]
"""Runs when the signal comes; may return the exception the signal should raise (where no
handler from before takes the signal)."""
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

_lock = threading.RLock()
_exit_hooks: list[ExitHook] = []


def _new_lock() -> None:
    """In a forked child: a lock of its own (the parent's copy may be held by a thread that
    does not exist here)."""
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_new_lock)


def at_exit(hook: ExitHook) -> None:
    """Run ``hook`` at interpreter exit (once, however often it is added); in a
    ``multiprocessing`` child, when it ends (`_at_child_exit`)."""
    with _lock:
        if hook not in _exit_hooks:
            _exit_hooks.append(hook)
        atexit.unregister(_run_exit_hooks)
        atexit.register(_run_exit_hooks)
        _at_child_exit()


_finalized_in: int | None = None
"""The process whose ``multiprocessing`` finalizer runs the hooks (`_at_child_exit`)."""


def _at_child_exit() -> None:
    """In a ``multiprocessing`` child (the processes Lightning's ``ddp_spawn`` and
    ``ddp_notebook`` train in, which ``torch.multiprocessing`` starts), run the hooks when it
    ends too: a forked child ends with ``os._exit``, which runs no ``atexit`` handler, but
    first runs ``multiprocessing``'s finalizers, while the error that ends it is still
    propagating (`uncaught_error`)."""
    global _finalized_in
    if multiprocessing.parent_process() is None or _finalized_in == os.getpid():
        return
    multiprocessing.util.Finalize(None, _run_exit_hooks, exitpriority=100)
    _finalized_in = os.getpid()


def uncaught_error() -> BaseException | None:
    """The error this process is ending with, for a hook at exit: in a ``multiprocessing``
    child whose work raised, the one still propagating when its finalizers run (a
    ``SystemExit`` with a failing status, raised while an error was handled, as
    ``torch.multiprocessing``'s wrapper raises it, stands for that error); else the one the
    interpreter set aside (``sys.last_value``), but not in a child, whose copy is its
    parent's (a notebook's earlier cell). None: none."""
    propagating = sys.exc_info()[1]
    if isinstance(propagating, SystemExit):
        failing = propagating.code not in (None, 0)
        return propagating.__context__ if failing else None
    if propagating is not None or multiprocessing.parent_process() is not None:
        return propagating
    uncaught = getattr(sys, "last_value", None)
    return uncaught if isinstance(uncaught, BaseException) else None


def forget_at_exit(hook: ExitHook) -> None:
    """Do not run ``hook`` at exit after all (nothing if it was not added)."""
    with _lock:
        if hook in _exit_hooks:
            _exit_hooks.remove(hook)


def _run_exit_hooks() -> None:
    while True:
        with _lock:
            if not _exit_hooks:
                return
            hook = _exit_hooks.pop()
        try:
            hook()
        except BaseException:  # the next hook runs all the same, as atexit's would
            logger.exception("a hook at exit failed: %r", hook)


@dataclass(eq=False)
class _Owned:
    """A handler of ours: the signal, what handled it before, the process that installed it
    and the hooks to run."""

    signum: int
    previous: _Handler
    pid: int
    hooks: list[SignalHook] = field(default_factory=list)
    firing: bool = False

    def __call__(self, received: int, frame: FrameType | None) -> None:
        if self.firing:  # the same signal again while the hooks run: the first one acts next
            return
        self.firing = True
        raised = None
        try:
            if os.getpid() == self.pid:
                for hook in reversed(list(self.hooks)):
                    raised = hook() or raised
        finally:
            # No lock here: the handler may run where a thread held it (a forked child's copy).
            with contextlib.suppress(ValueError):
                _handlers.remove(self)
            signal.signal(self.signum, self.previous)
        if callable(self.previous):
            self.previous(received, frame)
        elif raised is not None:
            raise raised
        else:  # the default, which ends the process
            os.kill(os.getpid(), self.signum)


_handlers: list[_Owned] = []
"""The handlers of ours with hooks (one per signal, unless a handler installed after one of them
had a new one installed above it)."""


def on_signal(signum: int, hook: SignalHook, *, unhandled_only: bool = False) -> bool:
    """Run ``hook`` first when ``signum`` comes (see the module). Returns whether it will: not
    off the main thread, nor where the signal is ignored or handled outside Python, nor, with
    ``unhandled_only``, where a handler other than the default has it."""
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        current = signal.getsignal(signum)
        owned: _Owned
        if isinstance(current, _Owned) and current.pid == os.getpid():
            owned = current
        elif current is None or current == signal.SIG_IGN:
            return False
        else:
            owned = _Owned(signum, current, os.getpid())
        if unhandled_only and owned.previous != signal.SIG_DFL:
            return False
        if owned is not current:
            signal.signal(signum, owned)
        if owned not in _handlers:
            _handlers.append(owned)
        if hook not in owned.hooks:
            owned.hooks.append(hook)
        return True


def forget_signal(signum: int, hook: SignalHook) -> None:
    """Take ``hook`` back; a handler of ours left without hooks puts the one from before back
    (from the main thread, where ours still has the signal; elsewhere, or under a handler
    installed since, ours stays and only hands the signal on)."""
    with _lock:
        for owned in [h for h in _handlers if h.signum == signum and hook in h.hooks]:
            owned.hooks.remove(hook)
            if owned.hooks:
                continue
            _handlers.remove(owned)
            previous = owned.previous
            main = threading.current_thread() is threading.main_thread()
            if main and signal.getsignal(signum) is owned:
                signal.signal(signum, previous)
