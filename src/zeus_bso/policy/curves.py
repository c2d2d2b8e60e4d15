"""Learning curves: where a run's metric stands, and what earlier runs of its batch size say
about the epochs it still needs (the learning-curve stop, ``learning_curve_stop``).

A curve holds the points at which a run's best metric so far improved, ``(epoch, metric)`` in
epoch order; a converged run's last point is where it met the target. Epochs to the target
depend on the model, the data and the batch size, not on the GPUs, so curves are shared by
every hardware profile.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias

Curve: TypeAlias = tuple[tuple[int, float], ...]

CURVES_KEPT = 5
"""Converged curves a batch size keeps, the latest: the predictions take the most optimistic."""


def better(metric: float, than: float, higher_is_better: bool) -> bool:
    """Whether ``metric`` is strictly better than ``than``."""
    return metric > than if higher_is_better else metric < than


def extended(curve: Curve, epoch: int, metric: float, higher_is_better: bool) -> Curve:
    """``curve`` after a report of ``metric`` at ``epoch``: one more point if it improves on the
    run's best so far."""
    if curve and not better(metric, curve[-1][1], higher_is_better):
        return curve
    return (*curve, (epoch, metric))


def epochs_left(curves: Iterable[Curve], metric: float, higher_is_better: bool) -> int | None:
    """The fewest epochs one of the converged ``curves`` took from first reaching ``metric`` (or
    better) to its target: an optimistic prediction of what a run at ``metric`` still needs.
    None without curves."""
    left = None
    for curve in curves:
        target_epoch = curve[-1][0]
        reached = next((e for e, m in curve if not better(metric, m, higher_is_better)), None)
        if reached is not None and (left is None or target_epoch - reached < left):
            left = target_epoch - reached
    return left


def as_curve(points: Iterable[Iterable[float]] | None) -> Curve:
    """A curve from stored points (JSON lists; None: a trial stored before curves were)."""
    return tuple((int(e), float(m)) for e, m in points or ())
