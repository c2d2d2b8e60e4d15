"""What the adapters read of a framework's DataLoader: the batch size it takes on each process,
to hold against the batch size the server dispatched; and a DataLoader the script built itself,
built again at another batch size (`at_batch_size`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def batch_size_of(loader: Any) -> int | None:
    """A DataLoader's batch size on each process: its ``batch_size``, or, where a batch sampler
    makes its batches (Accelerate gives its prepared loaders one), the sampler's; None: neither
    says one (a dataset that yields whole batches)."""
    size = getattr(loader, "batch_size", None)
    if size is None:
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return size if isinstance(size, int) else None


def flattened(loaders: Any) -> list[Any]:
    """The DataLoaders of ``loaders``: a DataLoader, or a dict or list of them."""
    if isinstance(loaders, dict):
        return list(loaders.values())
    return list(loaders) if isinstance(loaders, list | tuple) else [loaders]


def batching_datasets(loaders: Any) -> list[str]:
    """The datasets that make their batches whole among ``loaders`` (a DataLoader, or a dict
    or list of them): those of the DataLoaders built with ``batch_size=None`` and no batch
    sampler, by class name."""
    return [
        type(getattr(loader, "dataset", None)).__name__
        for loader in flattened(loaders)
        if hasattr(loader, "batch_sampler")
        and loader.batch_sampler is None
        and getattr(loader, "batch_size", 0) is None
    ]


def no_batches(loaders: Any, batch_size: int) -> str | None:
    """Why no step can train at ``batch_size``: ``loaders`` (a DataLoader, or a dict or list of
    them) hold no batch at it, their data fewer samples than the size and their last, short
    batch dropped (``drop_last=True``). None: they hold some, or do not say how many."""
    found = flattened(loaders)
    if not found or any(sized_len(loader) != 0 for loader in found):
        return None
    samples = [sized_len(getattr(loader, "dataset", None)) for loader in found]
    held = max((n for n in samples if n is not None), default=None)
    data = f"its data holds {held} samples" if held is not None else "its data is smaller"
    return no_batch_words(
        f"batch size {batch_size}",
        f"{data}, and the train DataLoader drops the last, short batch (drop_last=True)",
        held,
        "build the DataLoader with drop_last=False",
    )


def no_batch_words(size: str, why: str, held: int | None, instead: str) -> str:
    """A refusal of a ``size`` (``"batch size 64"``) that makes no training batch, ``why`` (the
    data is smaller, the short batch dropped), the data holding ``held`` samples (None: not
    known), and what to do ``instead`` of leaving the larger sizes out; such a run is released,
    not counted against the size."""
    return (
        f"{size} makes no training batch: {why}, so no step would train at it. Each of a "
        f"job's batch sizes must fit its data: leave the sizes above {held or 'it'} out of the "
        f"job's batch_sizes (a new job), or {instead}; the run is not counted against the batch "
        "size"
    )


def sized_len(loader: Any) -> int | None:
    """``len(loader)``, its batches an epoch; None: it has none (an iterable dataset's)."""
    try:
        return len(loader)
    except TypeError:
        return None


def not_resizable(loader: Any) -> str | None:
    """Why `at_batch_size` cannot build ``loader`` again at another batch size, in words that
    name what it is; None: it can (a torch ``DataLoader``, or a subclass that keeps its
    ``__init__``, that batches its sampler's samples by ``batch_size``)."""
    from torch.utils.data import DataLoader

    kind = type(loader).__name__
    if not isinstance(loader, DataLoader):
        return f"a {kind}, not one torch DataLoader"
    if type(loader).__init__ is not DataLoader.__init__:
        return f"a {kind}, whose own __init__ may take other arguments than DataLoader's"
    if loader.batch_size is None:
        return (
            "a DataLoader whose batches its batch_sampler (or its dataset) makes, of sizes "
            "no batch_size changes"
        )
    return None


def at_batch_size(loader: Any, batch_size: int) -> Any:
    """``loader`` (a DataLoader that `not_resizable` passes) built again, the same in all but
    its ``batch_size``: the same dataset, sampler (the same shuffling, and random generator),
    workers, collation and pinning. A new DataLoader even at the same size: iterating it
    starts no worker of ``loader``'s (persistent ones included) and draws nothing from
    ``loader``'s iterators."""
    from torch.utils.data import IterableDataset

    iterable = isinstance(loader.dataset, IterableDataset)  # it takes no sampler
    return type(loader)(
        loader.dataset,
        batch_size=batch_size,
        sampler=None if iterable else loader.sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
        pin_memory_device=loader.pin_memory_device,
        **({"in_order": loader.in_order} if hasattr(loader, "in_order") else {}),
    )


@contextlib.contextmanager
def generators_kept(*loaders: Any) -> Iterator[None]:
    """Within: ``loaders`` may be iterated for steps that are undone; after: the random
    generators that shuffle them (each one's own, ``DataLoader(generator=...)``, and its
    sampler's) are where they were, so that the fit's epochs shuffle as if it had not been.
    (The global random state is the tried steps' to restore.)"""
    import torch

    found = [
        generator
        for loader in loaders
        for generator in (
            getattr(loader, "generator", None),
            getattr(getattr(loader, "sampler", None), "generator", None),
        )
    ]
    generators = {id(g): g for g in found if isinstance(g, torch.Generator)}
    states = [(g, g.get_state()) for g in generators.values()]
    try:
        yield
    finally:
        for generator, state in states:
            generator.set_state(state)
