"""Schedules of a Lightning fit whose length in optimizer steps was fixed before the callback set
the batch size (`zeus_bso.integrations.schedules`: ``OneCycleLR(total_steps=...)``,
``get_linear_schedule_with_warmup(..., num_training_steps=...)``...), stepped each optimizer
step. A script that gives ``trainer.fit`` its train DataLoader often sizes them from that loader
(``steps_per_epoch=len(train_loader)``), at its own batch size, and a module may fix one in its
``__init__``: at another size the fit takes more or fewer steps than the schedule. Fewer: it
ends before the rate anneals, and the server learns a batch size's cost at a rate the script
never meant; more: ``OneCycleLR`` raises part-way, and a cosine climbs again. Refused when
training starts, before any step, saying how to size the schedule from the fit."""

from __future__ import annotations

import math
from typing import Any

from zeus_bso.integrations.schedules import length_of, schedule_refusal


def _lengths(trainer: Any) -> list[tuple[str, int]]:
    """Each schedule stepped every optimizer step that anneals over a length
    (`zeus_bso.integrations.schedules.length_of`): its name and that length."""
    stepped = [
        config.scheduler
        for config in getattr(trainer, "lr_scheduler_configs", [])
        if config.interval == "step" and config.frequency == 1
    ]
    return [length for length in map(length_of, stepped) if length is not None]


def _steps(trainer: Any, epochs: int | None) -> int | None:
    """The optimizer steps of ``epochs`` epochs of the fit (None: no bound of epochs), within
    its ``max_steps``; None: unknown (an endless epoch, or no bound at all)."""
    bound = trainer.max_steps if trainer.max_steps > 0 else None
    batches = trainer.num_training_batches
    if epochs is None or not isinstance(batches, int):  # inf: a DataLoader without a length
        return bound
    steps = math.ceil(batches / max(1, int(trainer.accumulate_grad_batches))) * epochs
    return steps if bound is None else min(steps, bound)


def schedule_refused(
    trainer: Any, written_for: int, batch_size: int, job_max_epochs: int
) -> str | None:
    """Why the fit's schedules cannot train at ``batch_size`` (`schedule_refusal`; the batch
    size of each process's optimizer step), known when training starts: ``written_for`` is the
    batch size of the train DataLoader the script gave ``trainer.fit``, or, where the model or
    a datamodule builds it, the job's reference size. The fit's steps are its Trainer's
    ``max_epochs`` (within its ``max_steps``); those it may train, within the job's
    ``max_epochs`` too. None: each fits, or the fit has no count of its steps (an endless
    epoch without ``max_steps``)."""
    epochs = (
        trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
    )
    if (steps := _steps(trainer, epochs)) is None:
        return None
    may_train = _steps(trainer, min(epochs or job_max_epochs, job_max_epochs)) or steps
    why = schedule_refusal(_lengths(trainer), steps, may_train, batch_size, written_for)
    if why is None:
        return None
    return (
        f"{why}; size the schedule in configure_optimizers from "
        "self.trainer.estimated_stepping_batches, which counts the fit's steps at the batch "
        "size it trains (the run is not counted against the batch size)"
    )
