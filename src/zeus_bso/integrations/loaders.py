"""What the adapters read of a framework's DataLoader: the batch size it takes on each process,
to hold against the batch size the server dispatched."""

from __future__ import annotations

from typing import Any


def batch_size_of(loader: Any) -> int | None:
    """A DataLoader's batch size on each process: its ``batch_size``, or, where a batch sampler
    makes its batches (Accelerate gives its prepared loaders one), the sampler's; None: neither
    says one (a dataset that yields whole batches)."""
    size = getattr(loader, "batch_size", None)
    if size is None:
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return size if isinstance(size, int) else None
