"""Learning-rate schedules whose length in optimizer steps was fixed when they were built, read
back (any framework's): PyTorch's ``OneCycleLR`` (``total_steps``), ``CosineAnnealingLR``
(``T_max``) and ``PolynomialLR`` (``total_iters``), a ``SequentialLR`` ending in one of them,
and transformers' schedules (``get_linear_schedule_with_warmup``,
``get_cosine_schedule_with_warmup``..., a ``LambdaLR`` of a ``functools.partial`` that holds
``num_training_steps``). A script that sizes one from its own batch size anneals over the steps
of that size, not the run's. (``LinearLR``'s ``total_iters`` is most often a warm-up's, shorter
than the run by design: not read.)"""

from __future__ import annotations

import functools
from typing import Any

_LENGTHS = {
    "OneCycleLR": "total_steps",
    "CosineAnnealingLR": "T_max",
    "PolynomialLR": "total_iters",
}

RAISES_PAST_ITS_END = "OneCycleLR"
"""The schedule that raises when stepped past its length (the others go on, off their curve)."""


def length_of(scheduler: Any) -> tuple[str, int] | None:
    """The schedule's name and its length in steps; None: it has no length of its own. A
    ``SequentialLR`` (a warm-up chained to a decay) lasts to its last milestone and then its
    last schedule's length."""
    name = type(scheduler).__name__
    if name == "SequentialLR":
        chained, milestones = (
            getattr(scheduler, "_schedulers", []),
            getattr(scheduler, "_milestones", []),
        )
        last = length_of(chained[-1]) if chained else None
        if last is None or len(milestones) != len(chained) - 1:
            return None
        return name, (milestones[-1] if milestones else 0) + last[1]
    length = getattr(scheduler, _LENGTHS.get(name, ""), None)
    if isinstance(length, int):
        return name, length
    for function in getattr(scheduler, "lr_lambdas", []):
        if isinstance(function, functools.partial):
            steps = function.keywords.get("num_training_steps")
            if isinstance(steps, int):
                made_by = function.func.__name__.strip("_").removesuffix("_lr_lambda")
                return made_by, steps
    return None


TOLERANCE = 0.05
"""How far a schedule's length may be from the run's steps, as a share of them, at a batch size
other than the one it was written for (a script's own count, ``len(dataset) // batch_size``,
is a few steps off the run's; another batch size is off by its ratio)."""


def schedule_refusal(
    lengths: list[tuple[str, int]],
    steps: int,
    may_train: int,
    batch_size: int,
    written_for: int,
) -> str | None:
    """Why a run of ``steps`` optimizer steps at ``batch_size`` (``may_train`` of them before
    the job's ``max_epochs`` ends it) cannot take a schedule of ``lengths`` (`length_of`),
    written for ``written_for`` (the batch size of the script's own DataLoader, or the job's
    reference): a ``OneCycleLR`` shorter than ``may_train`` would raise part-way; at another
    batch size than it was written for, a schedule off the run's steps by more than
    `TOLERANCE` ends before the rate anneals, or anneals and goes on (a cosine climbs again).
    None: each fits."""
    for name, length in lengths:
        if name == RAISES_PAST_ITS_END and length < may_train:
            return (
                f"{name}'s length, {length} steps, is shorter than the run may train, "
                f"{may_train} optimizer steps at batch size {batch_size}: it would raise when "
                "stepped past its end"
            )
        if written_for != batch_size and abs(length - steps) > TOLERANCE * steps:
            return (
                f"{name}'s length, {length} steps, does not fit the run: it trains "
                f"{batch_size} samples a step, {steps} optimizer steps (the schedule was "
                f"sized, it seems, for batch size {written_for}'s), and would "
                f"{'end before the rate anneals' if length > steps else 'anneal, and go on'}"
            )
    return None
