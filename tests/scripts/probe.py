"""What a training script really did, seen from outside it: the samples of every optimizer step
and the rate the step took, against the rate its schedule set.

The corpus's scripts build their models from a first ``Linear(FEATURES, ...)`` layer (a
language model: a token ``Embedding(VOCABULARY, ...)``) and train them with plain SGD (no
momentum, no weight decay), as many real scripts do. The probe hooks
into PyTorch itself (global hooks on every module's forward and every optimizer's step), not
into the scripts or zeus-bso: it counts the samples that the first layer sees in training
between two steps, reads the rate the step's param group holds before any hook of the
optimizer's own (the schedule's), and measures the rate the step applied from the change of
the weights, which for SGD is ``rate x gradient``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

FEATURES = 7
"""The width of the corpus's inputs: the first layer of every model of theirs."""
VOCABULARY = 53
"""The words of the corpus's language model (`tests.scripts.words`): its token embedding's rows,
whose input's first dimension is a batch's texts."""


@dataclass(frozen=True)
class Step:
    """One optimizer step: the samples it took (every micro-batch's), the rate its schedule set
    and the rate it applied."""

    samples: int
    schedule: float
    taken: float
    device: str = "cpu"
    """The type of the device its samples trained on (``cpu``, ``cuda``)."""

    @property
    def factor(self) -> float:
        return self.taken / self.schedule if self.schedule else float("nan")


@dataclass
class Probe:
    """Records every `Step` while it is entered (one run of a script: `take` its steps)."""

    steps: list[Step] = field(default_factory=list)
    _samples: int = 0
    _device: str = "cpu"
    _before: dict[int, tuple[float, list[tuple[torch.Tensor, torch.Tensor]]]] = field(
        default_factory=dict
    )
    _handles: list[Any] = field(default_factory=list)

    def __enter__(self) -> Probe:
        self._handles = [
            register_module_forward_pre_hook(self._forward),
            register_optimizer_step_pre_hook(self._step_begins),
            register_optimizer_step_post_hook(self._step_ends),
        ]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for handle in self._handles:
            handle.remove()

    def take(self) -> list[Step]:
        """The steps recorded since the last `take`."""
        steps, self.steps, self._samples = self.steps, [], 0
        return steps

    def _forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        first = (isinstance(module, torch.nn.Linear) and module.in_features == FEATURES) or (
            isinstance(module, torch.nn.Embedding) and module.num_embeddings == VOCABULARY
        )
        if first and module.training and torch.is_grad_enabled() and args:
            self._samples += int(args[0].shape[0])
            self._device = args[0].device.type

    @staticmethod
    def _plain_sgd(optimizer: torch.optim.Optimizer) -> bool:
        if type(optimizer) is not torch.optim.SGD:  # not a wrapper's step around it
            return False
        return all(
            not g.get("momentum") and not g.get("weight_decay") for g in optimizer.param_groups
        )

    def _step_begins(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if not self._plain_sgd(optimizer):
            return
        group = optimizer.param_groups[0]
        # The weights before the step; the gradients are read after it (a closure, as
        # Lightning passes, computes them inside the step).
        self._before[id(optimizer)] = (
            float(group["lr"]),
            [(p, p.detach().clone()) for p in group["params"]],
        )

    def _step_ends(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        before = self._before.pop(id(optimizer), None)
        if before is None:
            return
        schedule, params = before
        ratios: list[float] = []
        for param, then in params:
            if param.grad is None:
                continue
            moved = (then - param.detach()).flatten()
            grad = param.grad.detach().flatten()
            large = grad.abs() > 1e-3
            ratios.extend((moved[large] / grad[large]).tolist())
        taken = statistics.median(ratios) if ratios else 0.0
        self.steps.append(Step(self._samples, schedule, taken, self._device))
        self._samples = 0
