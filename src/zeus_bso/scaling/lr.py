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

`scale_optimizer` applies a factor to a built optimizer and its schedulers once: every param
group's rate (and the rates that schedulers keep in the groups: ``initial_lr``, OneCycleLR's
``max_lr`` and ``min_lr``) and every scheduler's ``base_lrs``. Warm-up stays constant in samples
(`warmup_steps`). `LinearScaler` and `SquareRootScaler` are upstream Zeus's names
(``zeus.utils.lr_scaler``), so that its scripts port unchanged.
"""

from __future__ import annotations

import logging
import math
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

SCALED_ATTRIBUTE = "_zeus_bso_lr_factor"
"""Set on an optimizer `scale_optimizer` scaled (its factor), so that it is scaled once."""
_GROUP_RATES = ("lr", "initial_lr", "max_lr", "min_lr")


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


def scale_optimizer(optimizer: Any, factor: float, schedulers: Iterable[Any] = ()) -> bool:
    """Multiply the rates of ``optimizer`` and of its ``schedulers`` by ``factor``, once.

    Every param group's ``lr``, and the rates schedulers keep in the groups (``initial_lr``,
    ``max_lr``, ``min_lr``); every scheduler's ``base_lrs``. Returns whether it scaled (False:
    the optimizer was scaled before, e.g. restored from a checkpoint of a scaled run).
    """
    target = _innermost(optimizer)
    if getattr(target, SCALED_ATTRIBUTE, None) is not None:
        return False
    for group in target.param_groups:
        for key in _GROUP_RATES:
            value = group.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                group[key] = value * factor
            elif isinstance(value, list | tuple):  # a rate per parameter
                group[key] = type(value)(v * factor for v in value)
    for scheduler in schedulers:
        if scheduler is not None and hasattr(scheduler, "base_lrs"):
            scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
    setattr(target, SCALED_ATTRIBUTE, factor)
    return True


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
        """Scale a built ``optimizer`` and its ``schedulers`` to ``batch_size``, once (see
        `scale_optimizer`); returns the factor."""
        rule = resolved(self.rule, optimizer)
        factor = lr_factor(rule, batch_size, self.reference)
        if scale_optimizer(optimizer, factor, schedulers):
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
        """Scale ``optimizer`` and ``schedulers`` to ``batch_size`` when the batch size
        changed under a built optimizer (the HF Trainer's ``auto_find_batch_size`` keeps it
        and builds a new schedule): the rates scaled for the earlier size (or never scaled) are
        brought to ``batch_size``'s. Returns the factor against the reference."""
        target = _innermost(optimizer)
        before = getattr(target, SCALED_ATTRIBUTE, None)
        if before is None:
            return self.scale(optimizer, batch_size, schedulers)
        factor = lr_factor(resolved(self.rule, optimizer), batch_size, self.reference)
        delattr(target, SCALED_ATTRIBUTE)
        scale_optimizer(optimizer, factor / float(before), schedulers)
        setattr(target, SCALED_ATTRIBUTE, factor)
        return factor
