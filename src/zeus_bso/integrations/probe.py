"""Try training steps and undo them: the probe behind the adapters' memory check (a batch size
whose first steps run out of memory is found before the run trains at it).

An adapter runs a few steps of its framework's model, optimizers and batches inside `undone`
and takes each one with `step`; afterwards the weights, the optimizers' state and the random
state are what they were, so the run trains as if nothing had been tried. An out-of-memory
error in a step is raised (the session's memory check catches it). A model that a strategy
shards across processes (`zeus_bso.training.sharded.sharding`) is not tried.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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
