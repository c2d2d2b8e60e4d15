"""This process's open runs, from their dispatch (or resume) to their end, so that a new run of
a job ends the earlier ones of the same job, started on the same thread, that never ended: they
are over. Nothing ends a run that Ctrl-C stopped in a notebook's cell (IPython catches the
``KeyboardInterrupt``; a framework without an exception hook, such as the HF Trainer, never
hears of it), nor one whose cell raised, and its heartbeat would keep its trial open, an
exploration in flight, until the kernel exits; nor one whose error `zeus_bso.until_converged`
caught to start the next attempt. The error set aside since such a run opened is the one that
ended it: the one `until_converged` caught from the attempt the run opened in, else the
interpreter's (``sys.last_value``, where IPython keeps a cell's uncaught error) where it was
raised through the training's code (a step, a Trainer's loop). The run is judged by it, as at
exit (out of memory: infeasible)."""

from __future__ import annotations

import sys
import weakref
from typing import Protocol

from zeus_bso.client import failure

SetAside = tuple[object, tuple[BaseException, object | None] | None, object | None]
"""The errors set aside at a moment (`set_aside`), and the attempt of `zeus_bso.until_converged`
under way then."""


class OpenRun(Protocol):
    job_id: str

    def superseded(self, why: str, error: BaseException | None) -> None:
        """End the run, over since ``error`` (set aside since it opened; None: none, it was
        interrupted): judged by ``error``, else as interrupted (its trial released, or left
        for its restart)."""


_OPEN: weakref.WeakKeyDictionary[OpenRun, tuple[int, SetAside]] = weakref.WeakKeyDictionary()
"""Each open run, with the thread it started on and the error set aside when it opened."""


TRAINING_PACKAGES = frozenset(
    {"torch", "transformers", "lightning", "pytorch_lightning", "accelerate", "zeus_bso"}
)
"""Where an error was raised while a run trained: one that passed through none of these (a
notebook cell's own, after the run's) says nothing of the run."""


def set_aside() -> SetAside:
    """The errors set aside last: the interpreter's (``sys.last_value``, where IPython keeps a
    cell's uncaught error) and the one the process caught from an attempt and went on past
    (`zeus_bso.client.failure.last_caught`: `zeus_bso.until_converged`'s), with the attempt
    under way now."""
    return getattr(sys, "last_value", None), failure.last_caught(), failure.ATTEMPT.get()


def error_since(before: SetAside) -> BaseException | None:
    """The error set aside since `set_aside` gave ``before``: the one caught from the attempt
    that was under way then (the run opened in it), else the interpreter's where it came
    through the training's code (`_raised_in_training`). That is the one that ended a run that
    opened then. None: none since, or another's (a notebook cell's own, another attempt's)."""
    interpreter, caught, _ = set_aside()
    if caught is not None and caught is not before[1] and caught[1] is before[2] is not None:
        return caught[0]
    if interpreter is before[0] or not isinstance(interpreter, BaseException):
        return None
    return interpreter if _raised_in_training(interpreter) else None


def _raised_in_training(error: BaseException) -> bool:
    """Whether ``error``'s traceback passes through a frame of `TRAINING_PACKAGES` (a step, a
    Trainer's loop, a callback of ours)."""
    trace = error.__traceback__
    while trace is not None:
        module = str(trace.tb_frame.f_globals.get("__name__", ""))
        if module.split(".", 1)[0] in TRAINING_PACKAGES:
            return True
        trace = trace.tb_next
    return False


def opened(run: OpenRun, thread: int) -> None:
    """``run``, started on ``thread``, is open until `closed`."""
    _OPEN[run] = (thread, set_aside())


def closed(run: OpenRun) -> None:
    """``run`` ended."""
    _OPEN.pop(run, None)


def supersede(run: OpenRun, thread: int) -> None:
    """End the open runs of ``run``'s job but ``run`` started on ``thread``, ``run``'s: each by
    the error set aside since it opened, where one was, else as interrupted."""
    for other, (started_on, before) in list(_OPEN.items()):
        if other is not run and other.job_id == run.job_id and started_on == thread:
            other.superseded("a later run of the job started in this process", error_since(before))
