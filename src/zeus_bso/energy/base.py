"""What every energy meter offers."""

from __future__ import annotations

from typing import Protocol

from zeus_bso.errors import EnergyMeterError, MixedGpuModelsError, UnmeasurableDeviceError

__all__ = ["EnergyMeter", "EnergyMeterError", "MixedGpuModelsError", "UnmeasurableDeviceError"]


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

    # Optional: ``devices`` (a list of `zeus_bso.energy.devices.Device`) and ``readings()``
    # (joules per device key) let a distributed run count devices that several ranks see once.

    def close(self) -> None: ...
