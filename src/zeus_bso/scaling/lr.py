"""The learning rate a batch size trains with, when the rate was tuned at another batch size.

A rule gives the factor from the batch size a run trains with (per process, the batch of one
optimizer step) to the ``reference`` it was tuned at:

- ``linear``: ``batch_size / reference``, with warm-up, for SGD and its momentum variants
  (Goyal et al. 2017, "Accurate, Large Minibatch SGD");
- ``sqrt``: ``sqrt(batch_size / reference)``, for Adam and the other adaptive optimizers
  (Malladi et al. 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms"; the
  Zeus paper's trace was recorded so);
- ``none``: the rate as given (a script that scales it by hand, as upstream Zeus's examples do);
- ``auto``: ``linear`` for the SGD family, ``sqrt`` for the adaptive optimizers, ``none`` for
  Adadelta (whose step size does not follow the batch) and for optimizers it does not know.

`scale_optimizer` applies a factor to the steps of a built optimizer: each ``step`` takes
every param group's rate times the factor, and the groups keep the rate the script and its
schedulers set. So the whole schedule, whatever it is (a ``SequentialLR`` warm-up then cosine,
``ChainedScheduler``, ``LambdaLR``, ``OneCycleLR``, ``get_scheduler`` of transformers, a rate set
by hand), trains at its own rate times the factor at every step; a checkpoint holds the
schedule's rates, so a resumed run scales them once again, and never twice; the wrappers of
Lightning, Accelerate and Fabric step through the same hooks (a copy of the optimizer, as
``copy.deepcopy`` makes, has none: scale it again). Warm-up stays constant in samples
(`warmup_steps`). `LinearScaler` and `SquareRootScaler` are upstream Zeus's names
(``zeus.utils.lr_scaler``), so that its scripts port unchanged.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from zeus_bso.errors import ConfigurationError

logger = logging.getLogger(__name__)

LrRule = Literal["none", "linear", "sqrt", "auto"]
"""How the learning rate follows the batch size (see the module's docstring)."""
AppliedRule = Literal["none", "linear", "sqrt"]

SGD_FAMILY = frozenset({"SGD", "SGDW", "LARS", "ASGD"})
"""Optimizers whose rate ``auto`` scales linearly."""
ADAPTIVE = frozenset(
    {"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "Adagrad", "RMSprop", "Adafactor", "LAMB",
     "Lamb", "SparseAdam", "FusedAdam", "Adam8bit", "AdamW8bit", "PagedAdamW"}
)  # fmt: skip
"""Optimizers whose rate ``auto`` scales by the square root."""
UNSCALED = frozenset({"Adadelta"})
"""Optimizers ``auto`` leaves alone: their step size does not follow the batch."""


def check_rule(rule: str) -> LrRule:
    """``rule`` if it is one of `LrRule`'s.

    Raises:
        ConfigurationError: it is not.
    """
    if rule not in get_args(LrRule):
        raise ConfigurationError(f"lr_rule is one of {', '.join(get_args(LrRule))}, not {rule!r}")
    return rule  # type: ignore[return-value]


def _innermost(optimizer: Any) -> Any:
    """The optimizer inside the wrappers of Accelerate and Lightning."""
    inner = optimizer
    for _ in range(4):
        wrapped = getattr(inner, "optimizer", None)
        if wrapped is None or wrapped is inner:
            break
        inner = wrapped
    return inner


def optimizer_name(optimizer: Any) -> str:
    """The class name of ``optimizer``, through the wrappers of Accelerate and Lightning."""
    return type(_innermost(optimizer)).__name__


def resolved(rule: LrRule, optimizer: Any | None = None) -> AppliedRule:
    """The rule ``rule`` applies to ``optimizer`` (``auto`` by its class).

    Raises:
        ConfigurationError: ``auto`` without an optimizer to look at.
    """
    if rule != "auto":
        return rule
    if optimizer is None:
        raise ConfigurationError(
            "lr_rule='auto' chooses by the optimizer: pass the optimizer, or choose 'linear' "
            "(SGD) or 'sqrt' (Adam and other adaptive optimizers)"
        )
    name = optimizer if isinstance(optimizer, str) else optimizer_name(optimizer)
    if name in SGD_FAMILY:
        return "linear"
    if name in ADAPTIVE:
        return "sqrt"
    if name not in UNSCALED:
        logger.warning(
            "lr_rule='auto' does not know the optimizer %s: its learning rate is left as "
            "given (choose lr_rule='linear' or 'sqrt')",
            name,
        )
    return "none"


def lr_factor(rule: AppliedRule, batch_size: int, reference: int) -> float:
    """By how much a rate tuned at ``reference`` is multiplied at ``batch_size``.

    Raises:
        ConfigurationError: a batch size that is not positive.
    """
    if batch_size <= 0 or reference <= 0:
        raise ConfigurationError(
            f"batch sizes are positive: batch size {batch_size}, reference {reference}"
        )
    if rule == "linear":
        return batch_size / reference
    if rule == "sqrt":
        return math.sqrt(batch_size / reference)
    return 1.0


def warmup_steps(steps: int, batch_size: int, reference: int) -> int:
    """Warm-up steps at ``batch_size`` that see as many samples as ``steps`` at ``reference``
    (at least one step when ``steps`` is)."""
    if steps <= 0:
        return 0
    return max(1, round(steps * reference / batch_size))


def length_steps(steps: int, batch_size: int, reference: int) -> int:
    """A run's length at ``batch_size`` (its ``max_steps``) that holds at least the samples of
    ``steps`` at ``reference``: rounded up, at least one step."""
    return max(1, math.ceil(steps * reference / batch_size))


class _StepFactor:
    """The factor an optimizer's steps take (`scale_optimizer`), and the rates it set aside."""

    def __init__(self, optimizer: Any, factor: float) -> None:
        self.factor = factor
        self._set_aside: list[Any] | None = None
        optimizer.register_step_pre_hook(self._before)
        optimizer.register_step_post_hook(self._after)

    def _before(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._after(optimizer, args, kwargs)  # a step that raised left its rates scaled
        self._set_aside = [group.get("lr") for group in optimizer.param_groups]
        for group, rate in zip(optimizer.param_groups, self._set_aside, strict=True):
            if rate is not None and not isinstance(rate, bool):
                group["lr"] = rate * self.factor

    def _after(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._set_aside is None:
            return
        for group, rate in zip(optimizer.param_groups, self._set_aside, strict=False):
            if rate is not None:
                group["lr"] = rate
        self._set_aside = None


_FACTORS: weakref.WeakKeyDictionary[Any, _StepFactor] = weakref.WeakKeyDictionary()
"""Each optimizer `scale_optimizer` scaled, and its factor (kept beside it, not on it)."""


def scale_optimizer(optimizer: Any, factor: float, schedulers: Iterable[Any] = ()) -> bool:
    """Have every ``step`` of ``optimizer`` take its rates times ``factor``.

    The param groups keep the rates the script and its schedulers set (the schedule's), and a
    step takes them times ``factor``: the schedule trains at its own rates times the factor at
    every step, whatever sets them, and a checkpoint saves the schedule's. A later call with
    the same optimizer replaces the factor (the rates are never scaled twice). ``schedulers``
    are accepted for scripts written against earlier releases, which scaled them: nothing of
    theirs changes. Returns whether the optimizer had no factor before.

    Raises:
        ConfigurationError: the optimizer has no step hooks (not a ``torch.optim.Optimizer``).
    """
    del schedulers  # the schedule is left as it is: its rates are scaled as the steps take them
    target = _innermost(optimizer)
    attached = _FACTORS.get(target)
    if attached is not None:
        attached.factor = factor
        return False
    if not hasattr(target, "register_step_pre_hook"):
        raise ConfigurationError(
            f"{type(target).__name__} is not a torch.optim.Optimizer (it has no step hooks): "
            "scale its learning rate by hand with learning_rate(base_lr), or lr_rule='none'"
        )
    _FACTORS[target] = _StepFactor(target, factor)
    return True


def step_factor(optimizer: Any) -> float | None:
    """The factor `scale_optimizer` gave ``optimizer``'s steps (None: none)."""
    attached = _FACTORS.get(_innermost(optimizer))
    return attached.factor if attached is not None else None


def stepped_rate(optimizer: Any) -> float:
    """The rate of ``optimizer``'s first param group that its next step takes."""
    rate = float(_innermost(optimizer).param_groups[0]["lr"])
    return rate * (step_factor(optimizer) or 1.0)


@dataclass(frozen=True)
class LinearScaler:
    """Upstream Zeus's ``LinearScaler``: the rate grows with the batch size."""

    initial_lr: float
    initial_batch_size: int

    def compute_lr(self, new_bs: int) -> float:
        """The rate at ``new_bs``."""
        return self.initial_lr * lr_factor("linear", new_bs, self.initial_batch_size)


@dataclass(frozen=True)
class SquareRootScaler:
    """Upstream Zeus's ``SquareRootScaler``: the rate grows with the batch size's square root."""

    initial_lr: float
    initial_batch_size: int

    def compute_lr(self, new_bs: int) -> float:
        """The rate at ``new_bs``."""
        return self.initial_lr * lr_factor("sqrt", new_bs, self.initial_batch_size)


@dataclass(frozen=True)
class LrScaling:
    """A run's learning-rate rule and the batch size its rate was tuned at (``reference``)."""

    rule: LrRule = "none"
    reference: int = 1

    def factor(self, batch_size: int, optimizer: Any | None = None) -> float:
        """The factor at ``batch_size`` (``optimizer``: what ``auto`` looks at)."""
        return lr_factor(resolved(self.rule, optimizer), batch_size, self.reference)

    def learning_rate(self, base_lr: float, batch_size: int, optimizer: Any | None = None) -> float:
        """``base_lr``, tuned at the reference, at ``batch_size``."""
        return base_lr * self.factor(batch_size, optimizer)

    def scale(self, optimizer: Any, batch_size: int, schedulers: Iterable[Any] = ()) -> float:
        """Have the steps of a built ``optimizer`` take its schedule's rates at
        ``batch_size`` (see `scale_optimizer`); returns the factor. Called again (a resumed
        run, or a batch size that changed under the optimizer, as the HF Trainer's
        ``auto_find_batch_size`` does), it replaces the factor."""
        rule = resolved(self.rule, optimizer)
        factor = lr_factor(rule, batch_size, self.reference)
        before = step_factor(optimizer)
        scale_optimizer(optimizer, factor, schedulers)
        if before != factor:
            logger.info(
                "learning rate x%.4g: the %s rule for %s, batch size %d against %d",
                factor,
                rule,
                optimizer_name(optimizer),
                batch_size,
                self.reference,
            )
        return factor

    def rescale(self, optimizer: Any, batch_size: int, schedulers: Iterable[Any] = ()) -> float:
        """`scale` at a batch size that changed under a built optimizer."""
        return self.scale(optimizer, batch_size, schedulers)
