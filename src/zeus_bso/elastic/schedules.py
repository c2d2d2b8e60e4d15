"""Learning-rate schedules stepped each optimizer step, under a batch size that grows.

A schedule sized in optimizer steps (``OneCycleLR(total_steps=...)``, a warm-up of so many
steps, a cosine over ``trainer.estimated_stepping_batches``) counts steps of the batch size it
was sized at, the initial one. A larger batch takes fewer steps an epoch, so stepped once a step
it would fall behind the training: a run that grows its batch 16-fold ends with its one-cycle
schedule still warming up. `follow` steps such a schedule by what each optimizer step is worth
in steps of the initial batch size (`step_worth`), so it keeps pace with the training. A
schedule of a fixed number of steps (``OneCycleLR``'s ``total_steps``) is never stepped past it.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from zeus_bso.elastic.lr import LrRule

logger = logging.getLogger(__name__)


def step_worth(rule: LrRule, scale: float, gain: float, fraction: float) -> float:
    """What one optimizer step at ``scale`` times the initial batch is worth in steps of the
    initial batch: its gain where the rate follows the gradient noise (``adascale``, ``sqrt``:
    AdaScale's scale-invariant steps), its samples otherwise (``linear``, ``none``); times the
    ``fraction`` of a whole batch it took (an epoch's last, short batch). A step at the initial
    size, or below it, is worth one, as the schedule was written."""
    if scale <= 1.0:
        return 1.0
    return (gain if rule in ("adascale", "sqrt") else scale) * fraction


class Progress:
    """The optimizer steps taken so far, and what they were worth (`step_worth`)."""

    def __init__(self) -> None:
        self.steps = 0
        self.worth = 0.0

    def stepped(self, worth: float) -> None:
        self.steps += 1
        self.worth += worth


class FollowedSchedule:
    """A learning-rate schedule stepped by what the optimizer steps are worth (`follow`); all
    else (``get_last_lr``, ``state_dict``, ``load_state_dict``, its attributes) is the
    schedule's own, so that a checkpoint holds the schedule as it is."""

    def __init__(self, schedule: Any, progress: Progress) -> None:
        self.schedule = schedule
        self._progress = progress
        self._last = (progress.steps, progress.worth)
        self._carried = 0.0

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step the schedule as many times as the optimizer steps since the last call are worth
        on average, the fraction carried to the next call; once, as written, where the
        optimizer took no step since (a step that AMP's ``GradScaler`` skipped)."""
        progress, (steps, worth) = self._progress, self._last
        if progress.steps <= steps:
            calls, self._carried = 1, 0.0
        else:
            due = self._carried + (progress.worth - worth) / (progress.steps - steps)
            calls = math.floor(due + 1e-9)
            self._carried = max(0.0, due - calls)
        self._last = (progress.steps, progress.worth)
        total = getattr(self.schedule, "total_steps", None)
        if isinstance(total, int):  # OneCycleLR: a step past its total raises
            # Batches that do not divide an epoch evenly at a scale that is not a whole number
            # may be worth a fraction of a step more an epoch than the schedule was sized for.
            calls = min(calls, max(0, total - int(self.schedule.last_epoch)))
        for _ in range(calls):
            self.schedule.step(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["schedule"], name)


def follow(schedule: Any, progress: Progress) -> FollowedSchedule:
    """``schedule`` (stepped once each optimizer step, or each few) stepped by what those
    steps are worth (`FollowedSchedule`); one followed already, as it is."""
    if isinstance(schedule, FollowedSchedule):
        return schedule
    return FollowedSchedule(schedule, progress)


class UnfollowedSchedule:
    """Recognises, from the rates the optimizer steps take, a schedule stepped each step that
    no `follow` wraps: the rates change from step to step within an epoch (twice at least: a
    single drop is a plateau's) at a batch larger than the initial one. Such a schedule, sized
    in steps of the initial batch size, ends a fraction of the way through its course."""

    def __init__(self) -> None:
        self._rates: list[float] | None = None
        """The rates of the last step this epoch (None: none since the epoch started)."""
        self._changes = 0
        """The steps this epoch whose rates differed from the step before."""

    def epoch_starts(self) -> None:
        self._rates, self._changes = None, 0

    def falls_behind(self, rates: list[float], scale: float) -> bool:
        """Notes a step's ``rates`` (its groups', unscaled) at ``scale`` times the initial
        batch; True, once warned, where they tell such a schedule."""
        changed = self._rates is not None and rates != self._rates and scale > 1.0
        self._rates = rates
        if not changed:
            return False
        self._changes += 1
        if self._changes < 2:
            return False
        logger.warning(
            "ElasticBatchSize: the learning rate changes from optimizer step to step at a "
            "batch %.3gx the initial one, and no schedule is followed. A schedule stepped "
            "each optimizer step counts steps of the initial batch size, so as the batch "
            "grows it falls behind the training and ends a fraction of the way through its "
            "course: step the schedule that ebs.follow(scheduler) returns instead (a rate set "
            "by hand each step: compute it from ebs.schedule_progress.worth, the steps of the "
            "initial size so far). A schedule that counts epochs or samples needs nothing "
            "(and ebs.check_schedules = False keeps this quiet).",
            scale,
        )
        return True
