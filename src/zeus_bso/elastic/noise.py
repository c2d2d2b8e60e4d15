"""Gradient noise from several gradients of one step (AdaptDL's estimator, our implementation).

Given ``k`` gradients of the same step, each the mean over ``b`` samples (one per replica, or
one per micro-batch of gradient accumulation), and their mean over ``B = k * b`` samples:

    E|g_b|^2 = |G|^2 + tr(S) / b          E|g_B|^2 = |G|^2 + tr(S) / B

where ``G`` is the true gradient and ``S`` the covariance of one sample's gradient. Solving the
two equations gives unbiased estimates of ``|G|^2`` ("sqr") and ``tr(S)`` ("var", per sample).
Both are smoothed with an exponential moving average with bias correction (as Adam does), and
the gain of a larger batch follows from them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from zeus_bso.errors import ConfigurationError


@dataclass
class _Ema:
    decay: float
    value: float = 0.0
    weight: float = 0.0

    def update(self, x: float) -> None:
        self.value = self.decay * self.value + (1.0 - self.decay) * x
        self.weight = self.decay * self.weight + (1.0 - self.decay)

    def get(self) -> float | None:
        return self.value / self.weight if self.weight > 0 else None


def squared_norm(vector: Sequence[float]) -> float:
    """Sum of squares."""
    return math.fsum(v * v for v in vector)


class GradientNoiseEstimator:
    """Running estimates of the squared gradient norm and the per-sample gradient variance."""

    def __init__(self, smoothing: float = 0.9) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ConfigurationError(f"smoothing must be in [0, 1), got {smoothing}")
        self._sqr = _Ema(smoothing)
        self._var = _Ema(smoothing)

    def update(
        self, local_sqr_norms: Sequence[float], mean_sqr_norm: float, local_batch: int
    ) -> None:
        """One step's observation.

        Args:
            local_sqr_norms: ``|g_b|^2`` of each of the ``k >= 2`` gradients.
            mean_sqr_norm: ``|g_B|^2`` of their mean.
            local_batch: ``b``, the samples behind each of the ``k`` gradients.
        """
        k = len(local_sqr_norms)
        self.update_mean(math.fsum(local_sqr_norms) / max(k, 1), k, mean_sqr_norm, local_batch)

    def update_mean(
        self, local_mean: float, count: int, mean_sqr_norm: float, local_batch: int
    ) -> None:
        """One step's observation from the mean of the ``count`` local squared norms (what
        replicas know after one all-reduce of their own squared norms). An observation that is
        not a number (gradients that overflowed: AMP's first steps in float16) is left out: it
        would make the estimates, and the learning rate they scale, NaN for good."""
        if count < 2:
            raise ValueError("the noise needs at least two gradients of the step")
        if local_batch <= 0:
            raise ValueError("local_batch must be positive")
        b, big = float(local_batch), float(local_batch * count)
        sqr = (big * mean_sqr_norm - b * local_mean) / (big - b)
        var = (local_mean - mean_sqr_norm) / (1.0 / b - 1.0 / big)
        if not (math.isfinite(sqr) and math.isfinite(var)):
            return
        self._sqr.update(sqr)
        self._var.update(var)

    def update_from_gradients(self, gradients: Sequence[Sequence[float]], local_batch: int) -> None:
        """One step's observation from the ``k`` flattened gradients themselves."""
        k = len(gradients)
        mean = [math.fsum(values) / k for values in zip(*gradients, strict=True)]
        self.update([squared_norm(g) for g in gradients], squared_norm(mean), local_batch)

    @property
    def sqr(self) -> float | None:
        """Smoothed ``|G|^2`` (clipped at a tiny positive value), or ``None`` before any data."""
        value = self._sqr.get()
        return None if value is None else max(value, 1e-30)

    @property
    def var(self) -> float | None:
        """Smoothed per-sample gradient variance ``tr(S)`` (never negative)."""
        value = self._var.get()
        return None if value is None else max(value, 0.0)

    def noise_scale(self) -> float | None:
        """``tr(S) / |G|^2``: the batch size around which larger batches stop paying off;
        None before any data, or while ``|G|^2`` is not yet measured above zero (the noise
        drowns it: early in training its unbiased estimate may be negative, and the ratio to
        the clipped value would read as 1e30)."""
        sqr, var = self._sqr.get(), self.var
        if sqr is None or var is None or sqr <= 0.0:
            return None
        return var / sqr

    def gain(self, scale: float, initial_batch: int) -> float:
        """Statistical gain of a ``scale`` times larger batch than ``initial_batch``.

        ``(var0 + sqr) / (var0 / scale + sqr)`` with ``var0 = tr(S) / initial_batch``, the noise
        at the initial batch size; 1 without data, and always in ``[1, scale]`` for scale >= 1.
        """
        if scale <= 1.0:
            return max(scale, 0.0)
        sqr, var = self.sqr, self.var
        if sqr is None or var is None:
            return 1.0
        var0 = var / initial_batch
        gain = (var0 + sqr) / (var0 / scale + sqr)
        return min(max(gain, 1.0), scale)

    def state_dict(self) -> dict[str, float]:
        """What a checkpoint keeps."""
        return {
            "sqr": self._sqr.value,
            "sqr_weight": self._sqr.weight,
            "var": self._var.value,
            "var_weight": self._var.weight,
        }

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Continue from a checkpoint."""
        self._sqr.value, self._sqr.weight = state["sqr"], state["sqr_weight"]
        self._var.value, self._var.weight = state["var"], state["var_weight"]
