"""The Hugging Face Trainer's memory check: training steps of its model, tried and undone
(`zeus_bso.integrations.probe`)."""

from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from zeus_bso.integrations.probe import NOT_TRIED, longest_batch, step, undone
from zeus_bso.training import TrialSession, out_of_memory
from zeus_bso.training.sharded import sharding

logger = logging.getLogger(__name__)


def sharded(args: Any, model: Any) -> str | None:
    """What shards the Trainer's model across processes: ``TrainingArguments(deepspeed=...)``
    or ``fsdp=...``, or the model's own sharding (an Accelerate configuration's FSDP:
    `zeus_bso.training.sharded.sharding`). None: nothing does, and its steps can be tried."""
    if getattr(args, "deepspeed", None):
        return "DeepSpeed (TrainingArguments.deepspeed)"
    if getattr(args, "fsdp", None):
        return "FSDP (TrainingArguments.fsdp)"
    return sharding(model)


def check_memory(
    session: TrialSession,
    args: Any,
    model: Any,
    optimizer: Any,
    loader: Any,
    trainer: Any,
    steps: int,
) -> None:
    """Try ``steps`` steps at a batch size new to these GPUs (`try_steps`, undone), with
    ``trainer``'s loss (its ``compute_loss``: None, the model's); one out of memory ends the
    run (`zeus_bso.errors.BatchSizeDoesNotFitError`; with ``auto_find_batch_size``, the Trainer
    catches it and trains on at a smaller size). A model sharded across processes is not tried
    (`sharded`: said)."""
    if (sharding := sharded(args, model)) is not None:
        if session.memory_unknown and session.is_main:
            logger.info(NOT_TRIED, session.micro_batch_size, sharding)
        return
    session.check_memory(
        lambda size: try_steps(model, optimizer, loader, size, steps, trainer),
        goes_on=bool(args.auto_find_batch_size),  # the Trainer shrinks the batch
    )


def try_steps(
    model: Any, optimizer: Any, loader: Any, size: int, steps: int, trainer: Any = None
) -> None:
    """Run ``steps`` training steps of the Trainer's model on this process alone (unwrapped: no
    collective), with the Trainer's optimizer and batches (of ``size`` samples: the Trainer's,
    or a smaller size's from the same data), then undo them: the weights, the optimizer's state
    and the random state are restored. An out-of-memory error is raised. Where the samples
    differ in length (texts of many lengths: `longest_batch`), every step takes
    the batch of the ``size`` longest, collated as the Trainer's are: the run's largest.

    A step's loss is the ``trainer``'s (its ``compute_loss``, in its autocast: a subclass's
    that runs a teacher model, or a second view of the batch, takes what it takes in
    training), and what that counts in the Trainer's plain data (TRL's metrics and token
    count: `plain_data`) is put back after; without the Trainer (and in a run of several
    processes, where a ``compute_loss`` may gather across them, TRL's does, and one process
    that ran out would leave the others waiting), it is the model's forward on the inputs its
    ``forward`` takes (`accepted`) and a backward from its loss, or from its outputs
    (`loss_of`)."""
    import torch

    batches: Iterable[Any] = loader
    if (longest := longest_batch(loader, size)) is not None:
        batches = itertools.repeat(longest)
    elif getattr(loader, "batch_size", None) != size:  # the same data, in batches of size
        batches = torch.utils.data.DataLoader(
            loader.dataset, batch_size=size, collate_fn=loader.collate_fn
        )

    device = next(model.parameters()).device
    takes = accepted(model)
    counted = plain_data(trainer) if trainer is not None else {}
    with undone(model, [optimizer]), put_back(trainer, counted):
        for _, batch in zip(range(steps), batches, strict=False):
            inputs = {
                k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
            }
            loss = trainer_loss(trainer, model, inputs, device) if trainer is not None else None
            if loss is None:  # no Trainer, or its loss reads what only its loop sets
                trainer = None
                taken = {k: v for k, v in inputs.items() if takes is None or k in takes}
                loss = loss_of(model(**taken))
            step(loss, [optimizer])


def trainer_loss(trainer: Any, model: Any, inputs: dict[str, Any], device: Any) -> Any:
    """``trainer``'s loss of ``inputs`` (its ``compute_loss``, in its autocast, given the
    batch's count of items as its loop gives it: `items_in`); None where that raised anything
    but out of memory: a subclass's that reads what the Trainer's loop sets only once it
    trains (``current_gradient_accumulation_steps``), which the loop's own step then has."""
    items = items_in(trainer, inputs, device)
    counted = {} if items is None else {"num_items_in_batch": items}
    try:
        with trainer.compute_loss_context_manager():
            return trainer.compute_loss(model, dict(inputs), **counted)
    except Exception as err:
        if out_of_memory(err):
            raise
        logger.debug("zeus-bso: the Trainer's loss before training: %r; the model's tried", err)
        return None


def items_in(trainer: Any, inputs: dict[str, Any], device: Any) -> Any:
    """What the Trainer's loop gives its ``compute_loss`` as ``num_items_in_batch`` for a step
    of one batch, ``inputs``: the count of the labels that count, where the model or a
    ``compute_loss_func`` divides by it (Transformers 4.46 and later). Counted by the base
    Trainer's ``get_batch_samples``: a subclass's may do more than count (skip batches, save
    what it saw), which the check's steps must not. None: the loop gives none."""
    import inspect

    import transformers

    samples = getattr(transformers.Trainer, "get_batch_samples", None)
    if samples is None or not isinstance(trainer, transformers.Trainer):
        return None
    batches = iter([inputs])
    try:
        if "device" in inspect.signature(samples).parameters:  # a newer Trainer's
            return samples(trainer, batches, 1, device)[1]
        return samples(trainer, batches, 1)[1]
    except Exception as err:  # a count it cannot make of these inputs: none, as its loop's
        logger.debug("zeus-bso: the Trainer's count of a batch's items: %r", err)
        return None


def plain_data(trainer: Any) -> dict[str, Any]:
    """Copies of ``trainer``'s attributes that hold plain data alone (numbers, strings, and
    lists and dicts of them: TRL's ``_metrics`` and ``_total_train_tokens``), by name."""
    return {name: copy.deepcopy(value) for name, value in vars(trainer).items() if _plain(value)}


def _plain(value: Any, depth: int = 0) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if depth > 4:
        return False
    if isinstance(value, list | tuple):
        return all(_plain(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


@contextmanager
def put_back(trainer: Any, counted: dict[str, Any]) -> Iterator[None]:
    """Inside, ``trainer``'s plain data (``counted``, `plain_data`) may change; after, it is
    put back."""
    try:
        yield
    finally:
        for name, value in counted.items():
            setattr(trainer, name, value)


def accepted(model: Any) -> set[str] | None:
    """The keyword arguments ``model``'s ``forward`` takes; None: any (it takes ``**kwargs``,
    or its signature cannot be read)."""
    import inspect

    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters}


def loss_of(outputs: Any) -> Any:
    """What a tried step takes its backward from: the model's loss (a ``ModelOutput``'s
    ``loss``, or a tuple's first element where it is a single number), else the sum of the
    floating-point outputs that need gradients (a model whose loss the Trainer's
    ``compute_loss`` makes from them: the backward runs through the same graph). None: no
    output needs a gradient."""
    import torch

    if isinstance(outputs, dict):
        if outputs.get("loss") is not None:
            return outputs["loss"]
        parts = list(outputs.values())
    elif isinstance(outputs, tuple | list):
        if outputs and isinstance(outputs[0], torch.Tensor) and outputs[0].numel() == 1:
            return outputs[0]
        parts = list(outputs)
    else:
        parts = [outputs]
    trained = [
        part
        for part in parts
        if isinstance(part, torch.Tensor) and part.is_floating_point() and part.requires_grad
    ]
    return sum(part.float().sum() for part in trained) if trained else None
