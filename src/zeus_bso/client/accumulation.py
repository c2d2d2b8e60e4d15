"""Gradient accumulation: how a run reaches the server's batch size with micro-batches that fit.

A run that opts in (``max_micro_batch_size``) trains a batch size above that limit, or at or
above the smallest size that ran out of memory on its GPUs (the profile's memory cap), as
``steps`` micro-batches of ``micro_batch_size`` samples whose gradients add up before each
optimizer step: the batch per optimizer step is the server's, exactly (the micro-batch divides
it). The learning-rate rule sees that batch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Accumulation:
    """How one run trains its batch size."""

    batch_size: int
    """Samples an optimizer step (per process): the server's batch size."""
    micro_batch_size: int
    """Samples a forward and backward pass (what the DataLoader gives)."""
    steps: int
    """Micro-batches an optimizer step: ``batch_size == steps * micro_batch_size``."""

    @classmethod
    def none(cls, batch_size: int) -> Accumulation:
        """No accumulation: one micro-batch of the whole batch."""
        return cls(batch_size, batch_size, 1)


def plan(batch_size: int, max_micro_batch_size: int | None, memory_cap: int | None) -> Accumulation:
    """The fewest micro-batches that reach ``batch_size`` exactly with each at most
    ``max_micro_batch_size`` and below ``memory_cap`` (either None: no such limit)."""
    limit = batch_size
    if max_micro_batch_size is not None:
        limit = min(limit, max_micro_batch_size)
    if memory_cap is not None:
        limit = min(limit, memory_cap - 1)
    limit = max(limit, 1)
    if batch_size <= limit:
        return Accumulation.none(batch_size)
    steps = next(
        s for s in range(2, batch_size + 1) if batch_size % s == 0 and batch_size // s <= limit
    )
    return Accumulation(batch_size, batch_size // steps, steps)
