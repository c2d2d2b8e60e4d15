"""GPU power limits: which limit a batch size trains at, from its power profile (the Zeus
paper's first-epoch profiling). Pure functions, like the rest of the policy.

A job's runs that opt into power limits profile each (hardware profile, batch size) once, in the
first epoch of its first run there, and train at the limit whose epoch costs least at the job's
``eta_knob``; the cost is the job's, priced in its profile's units (``max_power``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

from zeus_bso.policy.cost import zeus_cost
from zeus_bso.policy.types import JobState
from zeus_bso.spec import CreatedJob, PowerMeasurement


def profiles_power(eta_knob: float, power_profiling: bool) -> bool:
    """Whether a job's runs that opt in profile power limits: not with ``eta_knob`` 0 (time
    alone: the maximum limit is the fastest, so profiling would only cost), nor when the job
    turned it off."""
    return power_profiling and eta_knob > 0


def epoch_cost(measurement: PowerMeasurement, eta_knob: float, max_power: float) -> float:
    """The cost of an epoch at ``measurement``'s limit."""
    return zeus_cost(measurement.energy_per_epoch, measurement.time_per_epoch, eta_knob, max_power)


class Timed(Protocol):
    """An epoch at a power limit: a run's measurement, or the trace's."""

    @property
    def power_limit(self) -> float: ...
    @property
    def time_per_epoch(self) -> float: ...


TimedT = TypeVar("TimedT", bound=Timed)


def too_slow(seconds: float, at_highest: float, max_slowdown: float | None) -> bool:
    """Whether an epoch (or a step) of ``seconds`` at a limit is past the job's bound: more than
    ``max_slowdown`` times ``at_highest``, the same at the highest limit (never with None)."""
    return max_slowdown is not None and seconds > max_slowdown * at_highest


def within_slowdown(epochs: Sequence[TimedT], max_slowdown: float | None) -> list[TimedT]:
    """The ``epochs`` that are not `too_slow` against the epoch at the highest limit among them
    (all of them with None; the highest limit's always)."""
    if max_slowdown is None or not epochs:
        return list(epochs)
    at_highest = max(epochs, key=lambda e: e.power_limit).time_per_epoch
    return [e for e in epochs if not too_slow(e.time_per_epoch, at_highest, max_slowdown)]


def best_power_limit(
    measurements: Sequence[PowerMeasurement],
    eta_knob: float,
    max_power: float,
    max_slowdown: float | None = None,
) -> float:
    """The limit whose epoch costs least (the highest on a tie: the faster one), among those at
    most ``max_slowdown`` times slower than the highest limit measured (`within_slowdown`).

    Raises:
        ValueError: no measurement.
    """
    if not measurements:
        raise ValueError("a power profile has at least one measurement")
    best = min(
        within_slowdown(measurements, max_slowdown),
        key=lambda m: (epoch_cost(m, eta_knob, max_power), -m.power_limit),
    )
    return best.power_limit


def trained_limit(
    job: CreatedJob, state: JobState, profile: str, measurements: Sequence[PowerMeasurement]
) -> float:
    """The limit a batch size's runs on hardware ``profile`` train at, from its power profile's
    ``measurements``: `best_power_limit` at the job's ``eta_knob`` and ``power_max_slowdown``,
    with time priced at the profile's maximum power (its GPUs' limits together; the job's own
    for a profile it does not know)."""
    gpus = state.profiles.get(profile)
    max_power = gpus.max_power if gpus is not None else job.max_power
    return best_power_limit(measurements, job.eta_knob, max_power, job.power_max_slowdown)


PATIENCE = 3
"""Limits in a row, from the highest down, that cost no less than the cheapest so far, after
which a profile stops: a GPU's cost over its limits falls to one lowest and rises after it, so
the limits below cost more still, and profiling them would only spend."""


def profile_goes_on(costs: Sequence[float], patience: int = PATIENCE) -> bool:
    """Whether a profile that measured ``costs`` (an epoch's, at its limits from the highest
    down) goes on to the next limit: not once the last ``patience`` cost no less than the
    cheapest before them, nor once the last is infinite (too slow to be chosen: the job's
    ``power_max_slowdown``; the limits below are slower still)."""
    if costs and math.isinf(costs[-1]):
        return False
    if len(costs) <= patience:
        return True
    cheapest = min(costs[:-patience])
    return any(cost < cheapest for cost in costs[-patience:])
