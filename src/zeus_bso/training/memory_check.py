"""The memory check's steps on every process of a run: a size tried everywhere at once
(`try_everywhere`), and whether out of memory is the size's doing at all (`smallest_fits`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from zeus_bso.client.memory import (
    free_accelerator_memory,
    out_of_memory,
    out_of_memory_words,
    smallest_to_try,
)
from zeus_bso.errors import ZeusBSOError
from zeus_bso.training.collectives import Collectives


def try_everywhere(
    collectives: Collectives, size: int, try_steps: Callable[[int], None]
) -> str | None:
    """Run ``try_steps(size)`` on every process; the first out-of-memory error's words (any
    process's), or None when it fit everywhere. Another error is raised on every process."""
    oom: str | None = None
    failed: Exception | None = None
    try:
        try_steps(size)
    except Exception as err:
        if out_of_memory(err):
            oom = out_of_memory_words(err)
            free_accelerator_memory()
        else:
            failed = err
    said = None if failed is None else f"{type(failed).__name__}: {failed}"
    results = collectives.all_gather((oom, said))
    if failed is not None:
        raise failed
    errors = [message for _, message in results if message is not None]
    if errors:
        raise ZeusBSOError(f"another process failed while trying batch size {size}: {errors[0]}")
    ooms = [message for message, _ in results if message is not None]
    return ooms[0] if ooms else None


def smallest_fits(
    collectives: Collectives,
    size: int,
    batch_sizes: Sequence[int],
    accumulates: bool,
    try_steps: Callable[[int], None],
) -> int | None:
    """``size`` ran out of memory on some process: the smallest size (the job's smallest
    batch size, or micro-batches of one sample where the run accumulates) is tried on every
    process. None: it fits, and running out was ``size``'s doing; else the smallest size
    tried (``size`` itself where none is smaller), which ran out too: not the size's doing."""
    smallest = smallest_to_try(size, list(batch_sizes), accumulates)
    if smallest is not None and try_everywhere(collectives, smallest, try_steps) is None:
        return None
    return size if smallest is None else smallest
