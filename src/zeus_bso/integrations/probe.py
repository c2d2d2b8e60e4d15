"""Try training steps and undo them: the probe behind the adapters' memory check (a batch size
whose first steps run out of memory is found before the run trains at it).

An adapter runs a few steps of its framework's model, optimizers and batches inside `undone`
and takes each one with `step`; afterwards the weights, the optimizers' state and the random
state are what they were, so the run trains as if nothing had been tried. An out-of-memory
error in a step is raised (the session's memory check catches it). A model that a strategy
shards across processes (`zeus_bso.training.sharded.sharding`) is not tried. Where the samples
differ in length (texts, audio: `longest_samples`), the steps take the longest of them, the
batch that needs the most memory, not the first batches drawn, which a run may outgrow later.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import logging
import statistics
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

logger = logging.getLogger(__name__)

LENGTH_COLUMNS = (
    "input_ids",
    "input_values",
    "labels",
    "decoder_input_ids",
    "prompt_ids",
    "chosen_ids",
    "rejected_ids",
    "prompt_input_ids",
    "chosen_input_ids",
    "rejected_input_ids",
)
"""The columns whose lengths, added up, make a sample's size where they hold lists: a text's
token ids, an audio clip's samples (a Hugging Face model's main inputs, where they are not all
of one length), a sequence-to-sequence model's target tokens (a summary's, a translation's),
which its decoder takes, and a preference pair's prompt, chosen and rejected answers (TRL's
``DPOTrainer``, by the names of its releases from 1.0 on, and before)."""

READ_BUDGET_S = 2.0
"""The seconds the memory check may spend reading the lengths of a dataset that keeps none (a
torch dataset of tokenized texts), sample by sample: projected from its first `FIRST_READ`."""
FIRST_READ = 16
"""The samples read to see whether a dataset holds texts and how long reading them all takes."""

NOT_TRIED = (
    "zeus-bso: batch size %d is new to these GPUs, but its steps are not tried in memory first: "
    "%s shards the model across processes, and a step outside the strategy would find only "
    "this process's shard of the parameters, or gather them in collectives that one process "
    "cannot take alone. A size that runs out of memory while it trains is marked infeasible on "
    "these GPUs when the run ends, and the next run gets one that fits"
)
"""What a run whose model is sharded says at a size new to its GPUs (the batch size, and what
shards it)."""


@contextmanager
def undone(model: Any, optimizers: Sequence[Any]) -> Iterator[None]:
    """Steps taken inside are undone after: what a step can change of ``model`` (`changeable`:
    kept on the CPU meanwhile), ``optimizers``' state and the random state (the CPU's, and the
    model's GPU's) restored in place, the gradients cleared, and the model back in the mode it
    was in. Inside, it is in training mode."""
    import torch

    kept = changeable(model)
    saved = {name: tensor.detach().to("cpu", copy=True) for name, tensor in kept.items()}
    states = [copy.deepcopy(optimizer.state_dict()) for optimizer in optimizers]
    device = next(iter(kept.values())).device if kept else torch.device("cpu")
    was_training = model.training
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            model.train()
            yield
    finally:
        for optimizer, state in zip(optimizers, states, strict=True):
            optimizer.zero_grad(set_to_none=True)
            optimizer.load_state_dict(state)
        with torch.no_grad():
            for name, tensor in kept.items():
                tensor.copy_(saved[name])
        model.train(was_training)


def changeable(model: Any) -> dict[str, Any]:
    """What a training step can change of ``model``, by name: its parameters that take
    gradients (an optimizer steps no other) and its buffers (a batch norm's running
    statistics). Frozen weights are left where they are, uncopied: a fine-tuned model's base
    (a LoRA adapter's 7B frozen parameters are 14 GB in bf16) was copied to the CPU whole."""
    trained = {name: p for name, p in model.named_parameters() if p.requires_grad}
    return trained | dict(model.named_buffers())


def step(loss: Any, optimizers: Sequence[Any]) -> None:
    """One training step from ``loss`` (None: the step made none, and nothing is taken)."""
    if loss is None:
        return
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


PREPARED_LOADERS = {
    "DataLoaderShard": "accelerator.prepare()",
    "DataLoaderDispatcher": "accelerator.prepare()",
    "_FabricDataLoader": "fabric.setup_dataloaders()",
}
"""The DataLoaders a framework prepared for its processes (by class name), and what did."""


def steps_of(
    model: Any,
    optimizers: Any,
    loader: Any,
    loss: Callable[[Any], Any],
    *,
    steps: int = 3,
    autocast: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Callable[[int], None]:
    """A hand-written loop's ``try_steps`` for `TrialSession.fit_in_memory` (Accelerate, Fabric,
    the plain client)::

        size = bso.fit_in_memory(steps_of(model, optimizer, loader, lambda b: model(**b).loss))

    At each batch size tried: ``steps`` training steps of ``model`` with ``optimizers`` (one, or
    a list) on ``loader``'s data at that size, each ``loss(batch)`` (the batch on the model's
    device) taken backward and stepped, then undone (`undone`; the loader's shuffling too). The
    steps take the batch of the size's longest samples where they are known
    (`longest_batch`), else the first batches of ``loader`` built again at the size (the same
    dataset, sampler and collation: `zeus_bso.integrations.loaders.at_batch_size`). On
    several processes, give it the model unwrapped, and call that one in ``loss``
    (``accelerator.unwrap_model(model)``, Fabric's ``model.module``): each process tries alone,
    and a wrapped model's backward (DDP's) would wait for the others, which a process out of
    memory leaves waiting. ``autocast``: the context the loop's forward runs in, where the model
    given runs without it, each ``loss(batch)`` in it: Fabric's mixed precision is its wrapper's
    (``fabric.autocast`` for ``model.module``; a step of the module alone in float32 holds
    activations twice the size of the run's in bf16-mixed, and a size that fits would be
    marked out of memory); Accelerate's unwrapped model keeps its own.

    A model that a strategy shards across processes (FSDP, DeepSpeed ZeRO-3:
    `zeus_bso.training.sharded.sharding`) is not tried, as the callbacks do not try one: each
    size "fits", and the first process says so at the log level INFO (`NOT_TRIED`); a size
    that runs out of memory while the run trains is marked infeasible when the run ends.

    Raises:
        ConfigurationError: ``loader`` is one a framework prepared for its processes (give the
            one the loop built), or cannot be built at another batch size (a batch sampler's,
            a DataLoader subclass's own ``__init__``): write ``try_steps`` by hand. From
            ``try_steps``: ``loss(batch)`` returned no tensor to take backward.
    """
    from zeus_bso.errors import ConfigurationError
    from zeus_bso.integrations.loaders import at_batch_size, generators_kept, not_resizable
    from zeus_bso.training.collectives import torch_distributed
    from zeus_bso.training.sharded import sharding

    if (sharded := sharding(model)) is not None:

        def not_tried(size: int) -> None:
            if (dist := torch_distributed()) is None or dist.get_rank() == 0:
                logger.info(NOT_TRIED, size, sharded)

        return not_tried

    if type(loader).__name__ in PREPARED_LOADERS:
        raise ConfigurationError(
            f"steps_of() was given a {type(loader).__name__}, a DataLoader that "
            f"{PREPARED_LOADERS[type(loader).__name__]} prepared for its processes: give it the "
            "DataLoader as built, before that (each process tries the sizes alone)"
        )
    if (why := not_resizable(loader)) is not None:
        raise ConfigurationError(
            f"steps_of() builds the DataLoader again at each batch size it tries, but it is "
            f"{why}: write try_steps(batch_size) for fit_in_memory by hand"
        )
    tuned = list(optimizers) if isinstance(optimizers, list | tuple) else [optimizers]

    def try_steps(size: int) -> None:
        at_size = at_batch_size(loader, size)
        longest = longest_batch(at_size, size)
        batches = itertools.repeat(longest) if longest is not None else at_size
        device = next(model.parameters()).device
        with generators_kept(loader), undone(model, tuned):
            for _, batch in zip(range(steps), batches, strict=False):
                with autocast() if autocast is not None else nullcontext():
                    taken = loss(_on(batch, device))
                if not hasattr(taken, "backward"):
                    raise ConfigurationError(
                        f"steps_of()'s loss(batch) returned {type(taken).__name__}, not the "
                        "loss: return a tensor to take backward (a Transformers model's "
                        "output: model(**batch).loss)"
                    )
                step(taken, tuned)

    return try_steps


def _on(batch: Any, device: Any) -> Any:
    """``batch`` (a tensor, or a mapping, list or tuple of them) on ``device``."""
    if hasattr(batch, "to") and hasattr(batch, "device"):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {key: _on(value, device) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(_on(value, device) for value in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(_on(value, device) for value in batch)
    return batch


def longest_samples(dataset: Any, size: int) -> tuple[list[int], int] | None:
    """The indices of ``dataset``'s ``size`` longest samples and the longest one's length, where
    its samples differ in length (the lists of its `LENGTH_COLUMNS`, added up; without them,
    its raw texts', which a collator tokenizes as it batches). A Hugging Face
    ``datasets.Dataset``'s are read off its Arrow data (`_lengths`: a million rows in 20-30
    ms, `benchmarks/longest_samples.py`); another map-style dataset (a torch ``Dataset`` of
    tokenized texts, a list of samples, a ``Subset``) is read sample by sample where that
    takes at most `READ_BUDGET_S` (`_lengths_read`, `_sample_length`).
    A batch of them holds the most padded tokens of any batch of the run, so a size whose
    steps fit them fits every batch; the first batches drawn may be shorter (a run of
    texts of many lengths ran out of memory mid-epoch, at a size its check had passed). None:
    another kind of dataset (an iterable one, samples with no text or token ids, or too many
    to read in time), fewer samples than ``size``, samples all of one length (padded to
    it), or no numpy installed (torch runs without it; the lengths are numpy arrays)."""
    if importlib.util.find_spec("numpy") is None:
        return None
    lengths = _dataset_lengths(dataset)
    if lengths is None or not 0 < size <= len(lengths) or lengths.min() == lengths.max():
        return None
    longest = lengths.argpartition(len(lengths) - size)[len(lengths) - size :]
    return [int(i) for i in longest], int(lengths.max())


def _dataset_lengths(dataset: Any) -> Any | None:
    """The lengths of ``dataset``'s samples (`longest_samples`), in its order: a
    ``datasets.Dataset``'s off its Arrow data (`_lengths`), a torch ``Subset``'s those of the
    dataset it takes its samples from, at its indices (``random_split`` of a
    ``datasets.Dataset``), and another's read sample by sample (`_lengths_read`)."""
    import numpy as np
    from torch.utils.data import Subset

    if isinstance(dataset, Subset):
        whole = _dataset_lengths(dataset.dataset)
        return None if whole is None else whole[np.asarray(dataset.indices, dtype=np.int64)]
    if getattr(dataset, "column_names", None) is None:  # not a datasets library's table
        return _lengths_read(dataset)
    try:
        return _lengths(dataset)
    except Exception:  # no Arrow table (an iterable dataset, another library's): not known
        return None


def _lengths_read(dataset: Any) -> Any | None:
    """The lengths of a map-style ``dataset``'s samples (`_sample_length`), read sample by
    sample, as a numpy array; None where a sample holds no text or token ids, where reading one
    fails (an iterable dataset's ``__getitem__``), or where reading them all
    would take more than `READ_BUDGET_S`, projected from the median time of the first
    `FIRST_READ` (the first read may be the slowest): images decoded or texts tokenized as they
    are read, whose run's first batches are tried, as before. Kept beside a dataset that takes
    weak references, for the next size its check tries."""
    try:
        kept = _READ.get(dataset)
    except TypeError:  # no weak reference to it (a list): read at each size tried
        return _read(dataset)
    if kept is None or len(kept) != len(dataset):
        kept = _read(dataset)
        if kept is not None:
            _READ[dataset] = kept
    return kept


def _read(dataset: Any) -> Any | None:
    """`_lengths_read` without keeping them."""
    import numpy as np

    try:
        count = len(dataset)
        first, spent = [], []
        for index in range(min(count, FIRST_READ)):
            began = time.perf_counter()
            first.append(_sample_length(dataset[index]))
            spent.append(time.perf_counter() - began)
        if not first or None in first:
            return None
        projected = statistics.median(spent) * count
        if projected > READ_BUDGET_S:
            if len(set(first)) == 1:  # of one length, as far as it was read: nothing to say
                return None
            logger.info(
                "zeus-bso: the memory check tries the run's first batches, not its longest "
                "samples: reading the lengths of the %d samples of its %s would take about "
                "%.1f s",
                count,
                type(dataset).__name__,
                projected,
            )
            return None
        lengths = first + [_sample_length(dataset[i]) for i in range(len(first), count)]
    except Exception:  # a dataset that cannot be read by index (an iterable one's): not known
        return None
    return None if None in lengths else np.asarray(lengths, dtype=np.int64)


_READ: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""The lengths `_lengths_read` read, by dataset."""


def _sample_length(sample: Any) -> int | None:
    """A sample's length: the lengths of the token lists (or 1-D or 2-D tensors, arrays: their
    last dimension) a mapping holds under `LENGTH_COLUMNS`, added up; where it holds none, its
    texts' and 1-D tensors' (token ids, a waveform), as of a sample that is a text, such a
    tensor, or a tuple of them (a collator that tokenizes or pads them as it batches). A class
    label (a number, a tensor of none) is not one. None: it holds none of them."""
    if isinstance(sample, Mapping):
        found = [sample[name] for name in LENGTH_COLUMNS if name in sample]
        tokens = [
            int(value.shape[-1]) if hasattr(value, "shape") else len(value)
            for value in found
            if getattr(value, "ndim", 1) > 0 and not isinstance(value, str | bytes | int | float)
        ]
        if tokens:
            return sum(tokens)
        parts = list(sample.values())
    else:
        parts = list(sample) if isinstance(sample, tuple) else [sample]
    lengths = [
        len(part) if isinstance(part, str) else int(part.shape[0])
        for part in parts
        if isinstance(part, str) or getattr(part, "ndim", None) == 1
    ]
    return sum(lengths) if lengths else None


def _lengths(dataset: Any) -> Any | None:
    """The lengths of ``dataset``'s samples, in its order, as a numpy array: its lists in
    `LENGTH_COLUMNS` (those that hold lists: a class label does not), added up by sample; where
    it has none, its texts' (its string columns', in bytes: a collator that tokenizes them as
    it batches pads to the longest); None where it has neither. Read off the offsets of its
    Arrow table, and put in its order by its indices mapping where it has one (after
    ``shuffle``, ``select``, ``filter`` or ``train_test_split``: taking the lists themselves in
    that order copied every token, 11 s for a million texts)."""
    import numpy as np
    import pyarrow.compute as compute  # type: ignore[import-untyped]  # the datasets library's

    table = dataset.data
    kinds = {field.name: str(field.type) for field in table.schema}
    lists = [
        name for name in LENGTH_COLUMNS if kinds.get(name, "").startswith(("list<", "large_list<"))
    ]
    texts = [name for name, kind in kinds.items() if kind in ("string", "large_string")]
    if not (lists or texts):
        return None
    length_of = compute.list_value_length if lists else compute.binary_length
    lengths = np.zeros(table.num_rows, dtype=np.int64)
    for column in lists or texts:
        lengths += length_of(table.column(column)).fill_null(0).to_numpy()
    mapping = getattr(dataset, "_indices", None)  # the datasets library's, since 1.0
    if mapping is None:
        return lengths
    return lengths[np.asarray(mapping.column("indices"))]


def longest_batch(loader: Any, size: int) -> Any | None:
    """``loader``'s batch of the ``size`` longest samples of its dataset (`longest_samples`),
    collated by its ``collate_fn`` as the run's batches are; None where they are not known.
    What reading and collating the samples draws at random (an augmentation, a masking
    collator's masks) leaves the random state as it was (`random_kept`): the run draws what it
    would have."""
    with random_kept():
        return _longest_batch(loader, size)


@contextmanager
def random_kept() -> Iterator[None]:
    """Inside, draw at random; after, the random state is what it was: torch's on the CPU,
    Python's ``random`` module's and numpy's global generator's (where numpy is installed:
    torch runs without it)."""
    import random

    import torch

    np = importlib.import_module("numpy") if importlib.util.find_spec("numpy") else None
    python, legacy = random.getstate(), None if np is None else np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python)
        if np is not None:
            np.random.set_state(legacy)


def _longest_batch(loader: Any, size: int) -> Any | None:
    dataset: Any = getattr(loader, "dataset", None)
    if (longest := longest_samples(dataset, size)) is None:
        return None
    indices, length = longest
    logger.info(
        "zeus-bso: the memory check tries batch size %d on the %d longest samples (the "
        "longest: %d)",
        size,
        size,
        length,
    )
    return loader.collate_fn([dataset[i] for i in indices])
