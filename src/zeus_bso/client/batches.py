"""The size of a training batch, whatever shape the script gives it, and the check that the
first batch a run trains has the size the server dispatched."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from zeus_bso.errors import ConfigurationError


def samples_in(batch: Any) -> int | None:
    """How many samples ``batch`` holds: the first dimension of its first tensor (a tensor, or
    one in a tuple, list or mapping, as DataLoaders collate them); None where it has none."""
    if isinstance(batch, Mapping):
        items: Any = list(batch.values())
    elif isinstance(batch, tuple | list):
        items = list(batch)
    else:
        items = [batch]
    for item in items:
        shape = getattr(item, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return None


def check_first_batch(
    batch: Any, told: int, release: Callable[[str], object], only_batch: bool = False
) -> None:
    """``batch``, a run's first, has the size it was told to train at (its DataLoader's
    ``told``: the batch size, or the micro-batch of a run that accumulates); a batch whose size
    cannot be read is not checked, nor a smaller one that is the ``only_batch`` of an epoch
    (the loop said its epoch has one: the data holds fewer samples than the size, as Lightning
    takes it too).

    Raises:
        ConfigurationError: it has another size; the run was ended first with ``release(why)``
            (a misconfiguration is not the batch size's doing), and the message says what to
            change.
    """
    found = samples_in(batch)
    if found is None or found == told or (found < told and only_batch):
        return
    smaller = (
        f", or, where the data holds {found} samples in all, leave the job's sizes above it out "
        "of its batch_sizes (a new job)"
        if found < told
        else ""
    )
    message = (
        f"the run's first training batch has {found} samples, but its batch size is {told}: "
        f"build the DataLoader with batch_size=bso.micro_batch_size (bso.batch_size without "
        f"accumulation), not a size of the script's own{smaller}; the run is not counted "
        "against the batch size"
    )
    release(message)
    raise ConfigurationError(message)
