"""This process's open runs, from their dispatch (or resume) to their end, so that a new run of
a job ends the earlier ones of the same job, started on the same thread, that never ended: they
are over. Nothing ends a run that Ctrl-C stopped in a notebook's cell (IPython catches the
``KeyboardInterrupt``; a framework without an exception hook, such as the HF Trainer, never
hears of it), and its heartbeat would keep its trial open, an exploration in flight, until the
kernel exits."""

from __future__ import annotations

import weakref
from typing import Protocol


class OpenRun(Protocol):
    job_id: str

    def end_interrupted(self, why: str) -> None:
        """End the run as interrupted (its trial released, or left for its restart)."""


_OPEN: weakref.WeakKeyDictionary[OpenRun, int] = weakref.WeakKeyDictionary()
"""Each open run, with the thread it started on."""


def opened(run: OpenRun, thread: int) -> None:
    """``run``, started on ``thread``, is open until `closed`."""
    _OPEN[run] = thread


def closed(run: OpenRun) -> None:
    """``run`` ended."""
    _OPEN.pop(run, None)


def supersede(run: OpenRun, thread: int) -> None:
    """End, as interrupted, the open runs of ``run``'s job but ``run`` started on ``thread``,
    ``run``'s."""
    for other, started_on in list(_OPEN.items()):
        if other is not run and other.job_id == run.job_id and started_on == thread:
            other.end_interrupted("a later run of the job started in this process")
