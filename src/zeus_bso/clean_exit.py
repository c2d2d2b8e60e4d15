"""A process that used a gloo process group ends with status 0 after a successful run.

A gloo worker thread (``pt_gloo_runloop``) completes a collective, which wakes the thread that
waits for it, and only then releases the collective's tensors. A tensor whose Python object the
caller has dropped by then is kept alive by torch and freed by the worker, which takes the GIL
to do it (``c10::TensorImpl::decref_pyobject``); so does a Python callback chained on the
collective's future (see `zeus_bso.elastic.callbacks_in_flight`). When the program ends in that
window, the worker asks for the GIL after the interpreter began finalizing, and CPython (before
3.14) ends the thread with ``pthread_exit``, whose forced unwind crosses a ``noexcept``
destructor: SIGABRT, "terminate called without an active exception". Every collective called
from Python can do it: ``broadcast_object_list`` (our callbacks', Lightning's, the HF
Trainer's), ``all_reduce`` of a temporary tensor.

`register_at_exit` (called by every path of ours that shares a decision across ranks) adds an
``atexit`` handler, which runs before finalization begins; `settle` waits there, sleeping in
short steps (which releases the GIL a worker may need), until the chained callbacks are gone and
every gloo worker thread has stayed blocked, waiting for work, over several checks.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time

logger = logging.getLogger(__name__)

SETTLE_TIMEOUT_S = 10.0
"""How long `settle` waits for gloo's workers (a group whose peer died may never go idle)."""
_QUIET_CHECKS = 3
_CHECK_EVERY_S = 0.002
_TASKS = "/proc/self/task"

_lock = threading.Lock()
_registered = False


def register_at_exit() -> None:
    """Have `settle` run at interpreter exit (once per process; cheap to call again)."""
    global _registered
    with _lock:
        if not _registered:
            atexit.register(settle)
            _registered = True


def _gloo_workers_busy() -> bool | None:
    """Whether a gloo worker thread of this process is running or runnable (None where
    ``/proc`` cannot tell: not Linux)."""
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
        if name.startswith("pt_gloo") and state not in ("S", "D", "t", "T", "Z", "X"):
            return True
    return False


def settle(timeout: float = SETTLE_TIMEOUT_S) -> bool:
    """Wait until no gloo worker thread holds Python work: the DDP hook's chained callbacks
    are gone, and every ``pt_gloo*`` thread stayed blocked over `_QUIET_CHECKS` checks made
    while this thread sleeps. Returns whether that happened within ``timeout`` seconds."""
    from zeus_bso.elastic import callbacks_in_flight  # imports this module

    deadline = time.monotonic() + timeout
    if not callbacks_in_flight.drain(timeout):
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
