"""Python callbacks handed to a process group's worker threads, and waiting until they are gone.

A DDP communication hook returns ``work.get_future().then(fn)``. The process group's worker
thread runs ``fn`` when the all-reduce completes, completes the hook's future (which wakes the
training thread), and only then drops ``fn``, which takes the GIL. If the training thread
reaches the end of the program first, the interpreter is finalizing when the worker asks for the
GIL, and CPython (before 3.14) ends that thread with ``pthread_exit``; its forced unwind crosses
a ``noexcept`` destructor in ``libtorch_python`` and the process dies with SIGABRT ("terminate
called without an active exception") after a successful fit. Where the training thread instead
frees the process group while holding the GIL, it waits for a worker that waits for the GIL:
the process hangs.

`then` chains a callback as ``future.then`` does, counting it until the worker lets go of it (a
weak reference's callback) and keeping the future it returns until then: that future's value
is a Python object too, and the worker must not be the one to free it. `drain` waits, with the
GIL released, until every such callback is gone, and then frees the futures on the calling
thread. It runs at the end of a fit and, through `zeus_bso.clean_exit`, at interpreter exit.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from zeus_bso import clean_exit

logger = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0
"""How long `drain` waits for the workers (a process group whose peer died never finishes)."""

_lock = threading.Lock()
_alive: set[weakref.ref[Callable[..., Any]]] = set()
_children: list[tuple[weakref.ref[Callable[..., Any]], Any]] = []
"""Each chained future, kept until its callback is gone."""


def then(future: Any, callback: Callable[..., Any]) -> Any:
    """``future.then(callback)`` (a ``torch.futures.Future``), tracked until the thread that
    completes ``future`` has let go of ``callback`` and of the returned future."""
    _forget_finished()

    def gone(ref: weakref.ref[Callable[..., Any]]) -> None:
        with _lock:
            _alive.discard(ref)

    clean_exit.register_at_exit()  # which waits for these at interpreter exit
    ref = weakref.ref(callback, gone)
    with _lock:
        _alive.add(ref)
    child = future.then(callback)
    with _lock:
        _children.append((ref, child))
    return child


def _forget_finished() -> None:
    """Drop the futures whose callbacks are gone, on this thread (it may take the GIL)."""
    with _lock:
        finished = [entry for entry in _children if entry[0]() is None]
        _children[:] = [entry for entry in _children if entry[0]() is not None]
    del finished  # freed here, outside the lock


def in_flight() -> int:
    """How many tracked callbacks a worker thread still holds."""
    with _lock:
        return len(_alive)


def drain(timeout: float = DRAIN_TIMEOUT_S) -> bool:
    """Wait until the worker threads have let go of every tracked callback.

    Sleeps in short steps, which releases the GIL the workers need. Returns whether they all
    did within ``timeout`` seconds (if not, a warning says how many are left).
    """
    deadline = time.monotonic() + timeout
    while (left := in_flight()) and time.monotonic() < deadline:
        time.sleep(0.001)
    _forget_finished()
    if left:
        logger.warning(
            "%d DDP communication hook callback(s) still held by the process group's threads "
            "after %.0f s; the process may not exit cleanly",
            left,
            timeout,
        )
    return not left
