"""Learning curves: where a run's metric stands, and what earlier runs of its batch size say
about the epochs it still needs (the learning-curve stop, ``learning_curve_stop``).

A curve holds the points at which a run's best metric so far improved, ``(epoch, metric)`` in
epoch order; a converged run's last point is where it met the target. Epochs to the target
depend on the model, the data and the batch size, not on the GPUs, so curves are shared by
every hardware profile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

Curve: TypeAlias = tuple[tuple[int, float], ...]

CURVES_KEPT = 5
"""Converged curves a batch size keeps, the latest: the predictions take the most optimistic."""


def better(metric: float, than: float, higher_is_better: bool) -> bool:
    """Whether ``metric`` is strictly better than ``than``."""
    return metric > than if higher_is_better else metric < than


MAX_CURVE_POINTS = 128
"""The most points a curve keeps: every request reads the job's kept curves, so a run of
thousands of epochs must not make them long. The trace's runs (at most 100 epochs) stay whole."""


def extended(curve: Curve, epoch: int, metric: float, higher_is_better: bool) -> Curve:
    """``curve`` after a report of ``metric`` at ``epoch``: one more point if it improves on the
    run's best so far, thinned (`thinned`) past `MAX_CURVE_POINTS`."""
    if curve and not better(metric, curve[-1][1], higher_is_better):
        return curve
    longer = (*curve, (epoch, metric))
    return thinned(longer) if len(longer) > MAX_CURVE_POINTS else longer


def thinned(curve: Curve) -> Curve:
    """Every other point between the first and the last dropped. The last (where the run
    stands, or met its target) is what a prediction starts from, and it is kept; a dropped point
    can only make a kept curve seem to reach a metric later, so predictions from it need no
    more epochs than before: the stop stays optimistic and never stops a run sooner."""
    if len(curve) <= 2:
        return curve
    return (curve[0], *curve[1:-1][1::2], curve[-1])


def epochs_left(
    kept: Mapping[int, Sequence[Curve]], batch_size: int, curve: Curve, higher_is_better: bool
) -> int | None:
    """An optimistic prediction of the epochs a run of ``batch_size`` still needs to reach the
    target, from its learning curve so far (``curve``, not empty) and the batch sizes' ``kept``
    converged curves; None with nothing to go by.

    With curves of its own batch size: the fewest epochs one of them took from first reaching
    the run's best metric to the target. Without (a batch size's first run): the same over the
    curves of every smaller batch size, each scaled by how many times as many epochs this run
    took to reach that metric (at least once as many): a larger batch size takes at least as
    many epochs as a smaller one to get as far, and a run that got there slower goes on slower.
    """
    reached_at, metric = curve[-1]
    own = kept.get(batch_size, ())
    if own:
        return _fewest(own, metric, higher_is_better, None)
    smaller = [c for size, curves in kept.items() if size < batch_size for c in curves]
    return _fewest(smaller, metric, higher_is_better, reached_at)


def _fewest(
    curves: Iterable[Curve], metric: float, higher_is_better: bool, reached_at: int | None
) -> int | None:
    left = None
    for curve in curves:
        target_epoch = curve[-1][0]
        reached = next((e for e, m in curve if not better(metric, m, higher_is_better)), None)
        if reached is None:
            continue
        needs = target_epoch - reached
        if reached_at is not None:
            needs = math.floor(needs * max(1.0, reached_at / max(reached, 1)))
        left = needs if left is None else min(left, needs)
    return left


def as_curve(points: Iterable[Iterable[float]] | None) -> Curve:
    """A curve from stored points (JSON lists; None: a trial stored before curves were)."""
    return tuple((int(e), float(m)) for e, m in points or ())
