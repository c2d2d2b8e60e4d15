"""Optimizer steps whose batch size changes within a run (`zeus_bso.elastic.ElasticBatchSize`
wraps an optimizer's ``step`` and tells each one here), counted by thread.

A run of the batch size optimizer (`zeus_bso.training.TrialSession`: `BatchSizeOptimizer`,
``ZeusBSOAccelerate``, ``ZeusBSOFabric``, the callbacks) is judged and charged at the size the
server dispatched: one whose thread took such a step since the run began trained at sizes the
elastic batch size chose, and its next report is refused (`refusal`). Counting the steps, not
the objects attached, refuses only a run that such steps trained: an elastic batch size of an
earlier run in the same process (a notebook, a test runner) does not step in this one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

_STEPS: dict[int, int] = {}
"""The steps each thread took at an elastic batch size."""


def stepped() -> None:
    """This thread took an optimizer step at an elastic batch size."""
    thread = threading.get_ident()
    _STEPS[thread] = _STEPS.get(thread, 0) + 1


@dataclass(frozen=True, slots=True)
class Mark:
    """Where a thread's count stood when a run began."""

    thread: int
    steps: int


def mark() -> Mark:
    """Where this thread's count stands now (a run's start)."""
    thread = threading.get_ident()
    return Mark(thread, _STEPS.get(thread, 0))


def refusal(since: Mark) -> str | None:
    """Why a run that began at ``since`` cannot be reported: its thread took steps at an
    elastic batch size since. None: it took none."""
    taken = _STEPS.get(since.thread, 0) - since.steps
    if taken <= 0:
        return None
    return (
        f"an elastic batch size (zeus_bso.elastic.ElasticBatchSize) took {taken} of this run's "
        "optimizer steps: it changes the batch size within the run, while the server judges "
        "and charges the run at the size it dispatched. Use one of them: the batch size "
        "optimizer learns one size across the job's recurrences; ElasticBatchSize grows it "
        "within a run (attach it to a run of no zeus-bso job); the run is not counted against "
        "the batch size"
    )
