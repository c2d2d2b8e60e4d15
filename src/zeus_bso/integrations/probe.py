"""Try training steps and undo them: the probe behind the adapters' memory check (a batch size
whose first steps run out of memory is found before the run trains at it).

An adapter runs a few steps of its framework's model, optimizers and batches inside `undone`
and takes each one with `step`; afterwards the weights, the optimizers' state and the random
state are what they were, so the run trains as if nothing had been tried. An out-of-memory
error in a step is raised (the session's memory check catches it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


@contextmanager
def undone(model: Any, optimizers: Sequence[Any]) -> Iterator[None]:
    """Steps taken inside are undone after: ``model``'s weights (kept on the CPU meanwhile),
    ``optimizers``' state and the random state (the CPU's, and the model's GPU's) restored, the
    gradients cleared, and the model back in the mode it was in. Inside, it is in training
    mode."""
    import torch

    device = next(model.parameters()).device
    weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    states = [copy.deepcopy(optimizer.state_dict()) for optimizer in optimizers]
    was_training = model.training
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            model.train()
            yield
    finally:
        for optimizer, state in zip(optimizers, states, strict=True):
            optimizer.zero_grad(set_to_none=True)
            optimizer.load_state_dict(state)
        model.load_state_dict(weights)
        model.train(was_training)


def step(loss: Any, optimizers: Sequence[Any]) -> None:
    """One training step from ``loss`` (None: the step made none, and nothing is taken)."""
    if loss is None:
        return
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
