"""Schedules of a Lightning fit whose length in optimizer steps was fixed before the callback set
the batch size: ``OneCycleLR(total_steps=...)``, ``CosineAnnealingLR(T_max=...)``,
``LinearLR``/``PolynomialLR(total_iters=...)``, stepped each optimizer step. A script that gives
``trainer.fit`` its train DataLoader often sizes them from that loader
(``steps_per_epoch=len(train_loader)``), at its own batch size: at another, the fit takes more
or fewer steps than the schedule. Fewer: it ends before the rate anneals, and the server learns a
batch size's cost at a rate the script never meant; more: ``OneCycleLR`` raises part-way, and a
cosine climbs again. Refused when training starts, before any step, saying how to size the
schedule from the fit."""

from __future__ import annotations

import math
from typing import Any

LENGTHS = {
    "OneCycleLR": "total_steps",
    "CosineAnnealingLR": "T_max",
    "PolynomialLR": "total_iters",
}
"""The schedules that anneal over a length in steps, by class name, and its attribute.
(``LinearLR``'s ``total_iters`` is most often a warm-up's, shorter than the fit by design.)"""


def _lengths(trainer: Any) -> list[tuple[str, int]]:
    """Each schedule stepped every optimizer step that anneals over a length: its class name
    and that length."""
    found = []
    for config in getattr(trainer, "lr_scheduler_configs", []):
        if config.interval != "step" or config.frequency != 1:
            continue
        scheduler = config.scheduler
        name = type(scheduler).__name__
        length = getattr(scheduler, LENGTHS.get(name, ""), None)
        if isinstance(length, int):
            found.append((name, length))
    return found


def _steps(trainer: Any, epochs: int) -> int | None:
    """The optimizer steps of ``epochs`` epochs of the fit (within its ``max_steps``); None:
    unknown (an endless epoch)."""
    batches = trainer.num_training_batches
    if not isinstance(batches, int):  # inf: a DataLoader without a length
        return None
    steps = math.ceil(batches / max(1, int(trainer.accumulate_grad_batches))) * epochs
    return min(steps, trainer.max_steps) if trainer.max_steps > 0 else steps


def schedule_refused(trainer: Any, given: Any, batch_size: int, job_max_epochs: int) -> str | None:
    """Why the fit's schedule cannot train at ``batch_size`` (samples a step on each process;
    micro-batches of it where the callback accumulates), known when training starts: one that
    anneals over the fit's steps at its train DataLoader's own size (``given``: the DataLoader
    the script gave ``trainer.fit``, built at its size; None: the model or a datamodule builds
    it, at the fit's size), ``len(train_loader)`` times the Trainer's ``max_epochs``, but not
    over this size's; or a ``OneCycleLR`` shorter than the epochs the run may train (the
    Trainer's ``max_epochs`` or the job's, the fewer), which would raise part-way. None: none
    of them."""
    epochs = trainer.max_epochs if trainer.max_epochs is not None else -1
    if epochs <= 0 or (steps := _steps(trainer, epochs)) is None:
        return None
    may_train = _steps(trainer, min(epochs, job_max_epochs)) or steps
    own = getattr(given, "batch_size", None)
    script_steps = None  # len(train_loader) x epochs, at the loader's own size
    if given is not None and own != batch_size and hasattr(given, "__len__"):
        script_steps = len(given) * epochs
    for name, length in _lengths(trainer):
        if length == script_steps and length != steps:
            why = (
                f"{name}'s length, {length} steps, is the fit's at the train DataLoader's own "
                f"batch size ({own}: len(train_loader) x max_epochs), but the fit trains "
                f"{batch_size} samples a step, {steps} optimizer steps"
            )
        elif name == "OneCycleLR" and length < may_train:
            why = (
                f"OneCycleLR(total_steps={length}) is shorter than the run may train, "
                f"{may_train} optimizer steps at batch size {batch_size}: it would raise when "
                "stepped past its end"
            )
        else:
            continue
        return (
            f"{why}; size the schedule in configure_optimizers from "
            "self.trainer.estimated_stepping_batches, which counts the fit's steps at the "
            "batch size it trains (the run is not counted against the batch size)"
        )
    return None
