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
    kept: Mapping[int, Sequence[Curve]],
    batch_size: int,
    curve: Curve,
    higher_is_better: bool,
    epoch: int | None = None,
    scales: Mapping[int, float] | None = None,
) -> int | None:
    """An optimistic prediction of the epochs a run of ``batch_size`` still needs to reach the
    target, from its learning curve so far (``curve``, not empty; ``epoch``, the epochs it has
    run, default: its last point's) and the batch sizes' ``kept`` converged curves; None with
    nothing to go by.

    With curves of its own batch size: the fewest epochs one of them took from first reaching
    the run's best metric to the target. Without (a batch size's first runs): the fewest over
    every other batch size's curves, each scaled by the bound on epochs across batch sizes
    (`epoch_bound`) or by the run's pace where it is slower (`_pace`), or, where ``scales``
    (by batch size) says how many times as many epochs a run of ``batch_size`` takes as one of
    that size to converge (what a related job measured: `zeus_bso.policy.priors.epoch_scales`),
    by that alone: a run's pace over its first epochs is noisy, and a larger batch size's early
    lag made the stop end runs that would have been the cheapest.
    """
    reached_at, metric = curve[-1]
    own = kept.get(batch_size, ())
    if own:
        return _fewest(own, metric, higher_is_better, None, 1.0)
    run = (reached_at, max(epoch or reached_at, reached_at))
    left = None
    for size, curves in kept.items():
        scale = (scales or {}).get(size)
        if scale is None:
            needs = _fewest(curves, metric, higher_is_better, run, epoch_bound(batch_size, size))
        else:
            fewest = _fewest(curves, metric, higher_is_better, None, 1.0)
            needs = None if fewest is None else math.floor(fewest * scale)
        if needs is not None:
            left = needs if left is None else min(left, needs)
    return left


def outlasting_its_stall(left: int, curve: Curve, epoch: int) -> int:
    """The epochs an exploration still needs: ``left`` (`epochs_left`), or, where it is more,
    as many as the run has trained without improving on its best metric (``curve``'s last
    point; ``epoch``, the epochs it has run). A kept curve that reached the run's best metric
    only where it met the target (a jump at a learning-rate step, say) predicts no epochs
    left, and that prediction held an exploration of a size that never converges until its
    cost bounds stopped it (on the trace, P100 ImageNet's 64 ran on to twice the default's
    cost); a run whose stall has lasted that long is expected to stall as long again. Only for
    explorations: a longer stall assumed (twice) or a run of the default judged so stopped
    converging runs at their plateaus."""
    return max(left, epoch - curve[-1][0])


def epoch_bound(batch_size: int, other: int) -> float:
    """The least a run of ``batch_size`` needs, in epochs, for each epoch a run of ``other``
    needs to get as far: a larger batch size needs at least as many epochs as a smaller one (1),
    and a smaller one at least as many optimizer steps as a larger one (``batch_size / other``
    as many epochs)."""
    return 1.0 if batch_size > other else batch_size / other


def _fewest(
    curves: Iterable[Curve],
    metric: float,
    higher_is_better: bool,
    run: tuple[int, int] | None,
    bound: float,
) -> int | None:
    """The fewest epochs one of ``curves`` took from first reaching ``metric`` to the target,
    scaled for a run of another batch size (``run``: the epoch it reached ``metric`` at and the
    epochs it has run) by ``bound`` or its pace."""
    left = None
    for curve in curves:
        target_epoch = curve[-1][0]
        reached = next((e for e, m in curve if not better(metric, m, higher_is_better)), None)
        if reached is None:
            continue
        needs = target_epoch - reached
        if run is not None:
            pace = _pace(curve, reached, metric, higher_is_better, run)
            needs = math.floor(needs * max(bound, pace))
        left = needs if left is None else min(left, needs)
    return left


def _pace(
    curve: Curve, reached: int, metric: float, higher_is_better: bool, run: tuple[int, int]
) -> float:
    """How many times as many epochs as ``curve`` a run needs to get as far, at least: it
    reached ``metric`` at ``run[0]`` where the curve first did at its epoch ``reached``, and it
    has not got past ``metric`` in ``run[1]`` epochs where the curve had by its epoch ``past``
    (a run that stalls is slower the longer it stalls)."""
    reached_at, epochs = run
    past = next((e for e, m in curve if better(m, metric, higher_is_better)), None)
    pace = reached_at / max(reached, 1)
    if past is not None:
        pace = max(pace, epochs / past)
    return pace


def as_curve(points: Iterable[Iterable[float]] | None) -> Curve:
    """A curve from stored points (JSON lists; None: a trial stored before curves were)."""
    return tuple((int(e), float(m)) for e, m in points or ())
