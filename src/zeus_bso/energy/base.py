"""What every energy meter offers."""

from __future__ import annotations

from typing import Protocol

from zeus_bso.errors import ZeusBSOError


class EnergyMeterError(ZeusBSOError):
    """Raised when a meter cannot measure here (no device, no permission, mixed GPU models)."""


class EnergyMeter(Protocol):
    """Measures the energy of the devices a process trains on.

    ``energy()`` is cumulative joules since the meter was created, over all its devices.
    """

    name: str
    """What it measures, for logs (e.g. ``nvml``, ``rapl``, ``estimate``)."""
    is_estimate: bool
    device_model: str
    device_count: int
    max_power: float
    """Sum of the devices' maximum power limits (W): the ``max_power`` of the cost."""

    def energy(self) -> float: ...

    def close(self) -> None: ...
