"""What the dashboard draws and how it writes numbers: SVG geometry of a job's cost chart and of
a trial's learning-curve sparkline, and numbers, energy and time as people read them. Pure
functions."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from zeus_bso.units import duration_text, energy_text
from zeus_bso_server.read_models import TrialView


def number(value: float | None) -> str:
    """Four significant digits below 1,000, whole numbers with thousands separators up to a
    trillion, an exponent beyond; empty for nothing."""
    if value is None:
        return ""
    if not math.isfinite(value):
        return str(value)
    if abs(value) < 1000:
        return f"{value:.4g}"
    return f"{value:,.0f}" if abs(value) < 1e12 else f"{value:.3e}"


LONG_FIGURE = re.compile(r"-?\d+(?:\.\d{3,}(?:[eE][-+]?\d+)?|(?:\.\d+)?[eE][-+]?\d+)")
"""A figure of many decimals, or with an exponent, in a trial's message: upstream's words carry
costs as Python writes floats (``cost at convergence(233079.97188298634)``)."""


def message(text: str | None) -> str:
    """A trial's message as people read it: each long figure (`LONG_FIGURE`) written as
    `number` writes it (``233,080``, ``1.5``); empty for nothing. The dashboard keeps the whole
    message in the cell's tooltip."""
    if not text:
        return ""
    return LONG_FIGURE.sub(lambda figure: number(float(figure.group())), text)


def energy(joules: float | None) -> str:
    """Joules as people read them (`zeus_bso.units.energy_text`: ``52 J``, ``4.2 kJ``,
    ``0.31 kWh``); empty for nothing."""
    return "" if joules is None else energy_text(joules)


def duration(seconds: float | None) -> str:
    """Seconds as people read them (`zeus_bso.units.duration_text`: ``0.2 s``, ``61.7 min``,
    ``2.5 h``); empty for nothing."""
    return "" if seconds is None else duration_text(seconds)


SPARK_WIDTH, SPARK_HEIGHT = 64, 16
"""The box of a trial's learning-curve sparkline, in pixels."""


def sparkline(curve: Sequence[tuple[int, float]] | None, higher_is_better: bool = True) -> str:
    """SVG polyline points of a trial's learning curve (``[epoch, best metric]`` where it
    improved) as steps in a `SPARK_WIDTH` x `SPARK_HEIGHT` box: epochs from 0 at the left to the
    last at the right, the better metric up. Empty for fewer than two points (nothing to draw)."""
    if not curve or len(curve) < 2:
        return ""
    last = max(epoch for epoch, _ in curve) or 1
    metrics = [metric for _, metric in curve]
    # Halved, so that the span of metrics near the float range's ends stays finite.
    low, high = min(metrics) / 2, max(metrics) / 2
    span = (high - low) or 1.0

    def y(metric: float) -> float:
        half = metric / 2
        better = (half - low) / span if higher_is_better else (high - half) / span
        return round((1.0 - min(max(better, 0.0), 1.0)) * (SPARK_HEIGHT - 2) + 1, 2)

    points = [(0.0, y(curve[0][1]))]
    for epoch, metric in curve:
        x = round(epoch / last * SPARK_WIDTH, 2)
        for point in ((x, points[-1][1]), (x, y(metric))):
            if point != points[-1]:
                points.append(point)
    return " ".join(f"{x:g},{v:g}" for x, v in points)


@dataclass(frozen=True)
class Point:
    """One reported run in the cost chart, in SVG coordinates."""

    x: float
    y: float
    trial_number: int
    batch_size: int
    cost: float
    converged: bool


@dataclass(frozen=True)
class Tick:
    """A labelled value on an axis, at ``at`` (x for the trial axis, y for the cost axis)."""

    at: float
    label: str


@dataclass(frozen=True)
class Level:
    """A horizontal line across the chart: the default's or the recommended batch size's cost."""

    name: str
    batch_size: int
    cost: float
    y: float


@dataclass(frozen=True)
class CostChart:
    """The cost of each reported run against its trial number, in a ``width`` x ``height`` box
    whose plot area spans ``left``..``right`` and ``top``..``bottom``."""

    points: list[Point]
    levels: list[Level]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    low: float
    high: float
    width: int
    height: int
    left: int = 72
    right: int = 0
    top: int = 12
    bottom: int = 0


def _ticks(low: float, high: float, count: int) -> list[float]:
    if high <= low:
        return [low]
    return [low + (high - low) * i / (count - 1) for i in range(count)]


ROUND_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)
"""The steps between an axis's labels, times a power of ten."""


def round_ticks(low: float, high: float, about: int = 5) -> list[float]:
    """Round values from ``low`` to ``high`` (1, 2, 2.5 or 5 times a power of ten apart), as
    near ``about`` of them as such steps give, the wider step where two give as near: an axis's
    labels read ``30, 35, 40, 45``, not ``28.22, 33.39, ...``. ``[low]`` where the span is
    empty."""
    if not high > low:
        return [low]
    power = 10.0 ** math.floor(math.log10((high - low) / (about - 1)))
    best: list[float] = []
    for step in (factor * power for factor in ROUND_STEPS):
        first, last = math.ceil(low / step), math.floor(high / step)
        ticks = [round(k * step, 12) for k in range(first, last + 1)]
        if not best or abs(len(ticks) - about) <= abs(len(best) - about):
            best = ticks
    return best or [low, high]


def cost_chart(
    trials: list[TrialView],
    levels: dict[str, tuple[int, float]] | None = None,
    width: int = 720,
    height: int = 260,
) -> CostChart:
    """Place the reported trials' costs (y) by trial number (x), with ``levels`` (name: batch
    size and cost) as horizontal lines; the cost axis spans the points and the levels."""
    reported = sorted(
        ((t, t.cost) for t in trials if t.cost is not None and math.isfinite(t.cost)),
        key=lambda pair: pair[0].trial_number,
    )
    chart = CostChart([], [], [], [], 0.0, 0.0, width, height)
    left, right, top, bottom = chart.left, width - 16, chart.top, height - 44
    if not reported:
        return dataclasses.replace(chart, right=right, bottom=bottom)
    shown = {name: level for name, level in (levels or {}).items() if math.isfinite(level[1])}
    costs = [cost for _, cost in reported] + [cost for _, cost in shown.values()]
    low, high = min(costs), max(costs)
    first, last = reported[0][0].trial_number, reported[-1][0].trial_number

    def x_of(at: float) -> float:
        share = (at - first) / (last - first) if last > first else 0.5
        return round(left + 8 + share * (right - left - 16), 1)

    def y_of(cost: float) -> float:
        share = (cost - low) / (high - low) if high > low else 0.5
        return round(bottom - 8 - share * (bottom - top - 16), 1)

    numbers = sorted({round(n) for n in _ticks(first, last, min(last - first + 1, 8))})
    return CostChart(
        points=[
            Point(
                x=x_of(t.trial_number),
                y=y_of(cost),
                trial_number=t.trial_number,
                batch_size=t.batch_size,
                cost=cost,
                converged=bool(t.converged),
            )
            for t, cost in reported
        ],
        levels=[Level(name, size, cost, y_of(cost)) for name, (size, cost) in shown.items()],
        x_ticks=[Tick(x_of(n), str(n)) for n in numbers],
        y_ticks=[Tick(y_of(c), number(c)) for c in round_ticks(low, high)],
        low=low,
        high=high,
        width=width,
        height=height,
        right=right,
        bottom=bottom,
    )
