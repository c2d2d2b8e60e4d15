"""`StepCount`: whether the run's process took an optimizer step since training began, so that a
report of the model as it was before training (a loop that evaluates at the start of each
epoch, or once before it trains), which counts as one of the job's epochs, is said; and how
many steps each optimizer took, so that a loop that steps at every micro-batch of a run that
accumulates is found; and, before each optimizer's first step, a look at its parameters (the
session refuses a model an earlier run of the job trained: `first_step`).

It counts every ``torch.optim.Optimizer``'s steps in the process through torch's global step
hook, where the script uses torch (it is imported already: nothing imports it here); elsewhere
it counts nothing and judges nothing.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any


class StepCount:
    """The optimizer steps this process took from `start` to `stop`."""

    def __init__(self) -> None:
        self.steps = 0
        self._each: dict[int, int] = {}
        self._handles: list[Any] = []
        self.first_step: Callable[[Any], None] | None = None
        """Called with each optimizer before its first step on the thread that started the
        count (it may raise: the step is not taken)."""
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        """The optimizers that stepped on that thread (kept weakly): another thread's train
        a run of their own."""
        self._thread = threading.get_ident()

    def start(self) -> None:
        """Count from now (once; again after `stop`)."""
        optim = sys.modules.get("torch.optim.optimizer")
        if self._handles or optim is None:
            return
        self._thread = threading.get_ident()
        self._handles = [
            optim.register_optimizer_step_pre_hook(self._stepping),
            optim.register_optimizer_step_post_hook(self._stepped),
        ]

    def _stepping(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self._thread or optimizer in self.optimizers:
            return
        if self.first_step is not None:
            self.first_step(optimizer)
        self.optimizers.add(optimizer)

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.steps += 1
        self._each[id(optimizer)] = self._each.get(id(optimizer), 0) + 1

    @property
    def most(self) -> int:
        """The steps of the optimizer that stepped most (a loop of two optimizers, a GAN's,
        steps each once a step of its own)."""
        return max(self._each.values(), default=0)

    @property
    def untrained(self) -> bool:
        """Whether the steps are counted and none was taken."""
        return bool(self._handles) and self.steps == 0

    def stop(self) -> None:
        """Stop counting (the hook is removed: a later run of the process counts its own)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
