"""Throughput model and the goodput-maximising choice of batch size, within bounds."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Choice:
    """A batch size configuration: ``local_bsz`` samples per micro-batch, ``accumulation``
    micro-batches per step, on ``replicas`` replicas."""

    local_bsz: int
    accumulation: int
    replicas: int

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step."""
        return self.local_bsz * self.accumulation * self.replicas


class ThroughputModel:
    """Micro-batch time as ``alpha + beta * local_bsz``, fitted by least squares."""

    def __init__(self) -> None:
        self._samples: dict[int, list[float]] = {}

    def observe(self, local_bsz: int, seconds: float) -> None:
        """Record how long one micro-batch of ``local_bsz`` samples took."""
        if local_bsz > 0 and seconds > 0 and math.isfinite(seconds):
            self._samples.setdefault(local_bsz, []).append(seconds)

    def fit(self) -> tuple[float, float] | None:
        """``(alpha, beta)``, or ``None`` before two batch sizes were measured."""
        if len(self._samples) < 2:
            return None
        points = [(b, sum(t) / len(t)) for b, t in self._samples.items()]
        n = len(points)
        mean_b = sum(b for b, _ in points) / n
        mean_t = sum(t for _, t in points) / n
        cov = sum((b - mean_b) * (t - mean_t) for b, t in points)
        var = sum((b - mean_b) ** 2 for b, _ in points)
        beta = max(cov / var, 0.0) if var > 0 else 0.0
        alpha = max(mean_t - beta * mean_b, 0.0)
        return alpha, beta

    def samples_per_second(self, choice: Choice) -> float | None:
        """Predicted training throughput of a configuration."""
        fitted = self.fit()
        if fitted is None:
            return None
        alpha, beta = fitted
        step = (alpha + beta * choice.local_bsz) * choice.accumulation
        return choice.global_batch / step if step > 0 else None


def candidates(
    initial_batch: int,
    max_batch: int | None,
    local_bounds: tuple[int, int] | None,
    replicas: int,
    min_accumulation: int,
    max_accumulation: int = 16,
) -> list[Choice]:
    """Every configuration within the bounds whose global batch is at least the initial one."""
    low, high = local_bounds or (1, max(initial_batch, max_batch or initial_batch))
    limit = max_batch or initial_batch * 16
    out = []
    local = low
    while local <= high:
        for accumulation in range(min_accumulation, max_accumulation + 1):
            choice = Choice(local, accumulation, replicas)
            if initial_batch <= choice.global_batch <= limit:
                out.append(choice)
        local = local * 2 if local < high and local * 2 <= high else high + 1
    return out


def best_choice(
    options: list[Choice],
    throughput: ThroughputModel,
    gain: Callable[[float], float],
    initial_batch: int,
) -> tuple[Choice, float] | None:
    """The configuration with the highest goodput (throughput x gain / scale), and its goodput."""
    scored = []
    for choice in options:
        rate = throughput.samples_per_second(choice)
        if rate is None:
            return None
        scale = choice.global_batch / initial_batch
        scored.append((rate * gain(scale) / scale, -choice.accumulation, choice))
    if not scored:
        return None
    goodput, _, choice = max(scored, key=lambda item: (item[0], item[1]))
    return choice, goodput
