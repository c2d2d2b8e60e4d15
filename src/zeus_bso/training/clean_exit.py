"""A process that used a gloo process group ends with status 0 after a successful run.

A gloo worker thread (``pt_gloo_runloop``) completes a collective, which wakes the thread that
waits for it, and only then releases the collective's tensors. A tensor whose Python object the
caller has dropped by then is kept alive by torch and freed by the worker, which takes the GIL
to do it (``c10::TensorImpl::decref_pyobject``); so does a Python callback chained on the
collective's future (`then`, below). When the program ends in that window, the worker asks
for the GIL after the interpreter began finalizing, and CPython (before 3.14) ends the thread
with ``pthread_exit``, whose forced unwind crosses a ``noexcept`` destructor: SIGABRT,
"terminate called without an active exception". Every collective called from Python can do it:
``broadcast_object_list`` (our callbacks', Lightning's, the HF Trainer's), ``all_reduce`` of a
temporary tensor.

`register_at_exit` (called by every path of ours that shares a decision across ranks) adds a
hook at interpreter exit (`zeus_bso.exits`), which runs before finalization begins; `settle`
waits there, sleeping in short steps (which releases the GIL a worker may need), until the
chained callbacks are gone and every gloo worker thread has stayed blocked, waiting for work,
over several checks.

Python callbacks handed to a process group's worker threads, and waiting until they are gone:
a DDP communication hook returns ``work.get_future().then(fn)``. The process group's worker
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
thread. It runs at the end of a fit and, through `settle`, at interpreter exit.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from zeus_bso import exits

logger = logging.getLogger(__name__)

SETTLE_TIMEOUT_S = 10.0
"""How long `settle` waits for gloo's workers (a group whose peer died may never go idle)."""
_QUIET_CHECKS = 5
_CHECK_EVERY_S = 0.01
"""`settle` takes gloo's workers for idle once all were waiting over `_QUIET_CHECKS` checks this
far apart (50 ms in all, at the exit of a process that used a process group). A worker can wait
a moment inside its own work too (a lock another thread holds, its peer's data); on a machine
whose cores are all busy that moment grows, and over 3 checks 2 ms apart one rank of a pair of
test_exit's processes died with SIGABRT once on a CI machine running the whole suite."""
_TASKS = "/proc/self/task"
_registered = False


def register_at_exit() -> None:
    """Have `settle` run at interpreter exit (once per process; cheap to call again: a DDP
    communication hook calls it at every step, from autograd's thread)."""
    global _registered
    if not _registered:
        exits.at_exit(settle)
        _registered = True


def _gloo_workers_busy() -> bool | None:
    """Whether a gloo worker thread of this process is running, runnable or in uninterruptible
    I/O (None where ``/proc`` cannot tell: not Linux)."""
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"{_TASKS}/{task}/stat") as stat:
                fields = stat.read()
        except OSError:  # the thread ended meanwhile
            continue
        # "tid (comm) state ...": comm may hold spaces and parentheses, the state follows the
        # last ')'.
        name = fields[fields.find("(") + 1 : fields.rfind(")")]
        state = fields[fields.rfind(")") + 2 :][:1]
        if name.startswith("pt_gloo") and state not in ("S", "t", "T", "Z", "X"):  # D: I/O
            return True
    return False


def settle(timeout: float = SETTLE_TIMEOUT_S) -> bool:
    """Wait until no gloo worker thread holds Python work: the DDP hook's chained callbacks
    are gone, and every ``pt_gloo*`` thread stayed blocked over `_QUIET_CHECKS` checks made
    while this thread sleeps. Returns whether that happened within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    if not drain(timeout):
        return False
    if "torch" not in sys.modules:
        return True  # no process group in this process
    quiet = 0
    while quiet < _QUIET_CHECKS:
        busy = _gloo_workers_busy()
        if busy is None:  # no /proc: give the workers a moment instead
            time.sleep(0.05)
            return True
        quiet = 0 if busy else quiet + 1
        if time.monotonic() >= deadline:
            logger.warning("gloo's worker threads were still busy after %.0f s", timeout)
            return False
        time.sleep(_CHECK_EVERY_S)
    return True


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

    register_at_exit()  # which waits for these at interpreter exit
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
