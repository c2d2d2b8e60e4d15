"""What every energy meter offers, and `ProcessMeter`, the base of a meter of this process's
devices alone."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from zeus_bso.errors import (
    ConfigurationError,
    EnergyMeterError,
    MixedGpuModelsError,
    UnmeasurableDeviceError,
)

__all__ = [
    "Device",
    "EnergyMeter",
    "EnergyMeterError",
    "MixedGpuModelsError",
    "ProcessMeter",
    "UnmeasurableDeviceError",
]


@dataclass(frozen=True)
class Device:
    """One measured device: its name in every process, its model and its power limit (W)."""

    key: str
    model: str
    max_power: float


@runtime_checkable
class EnergyMeter(Protocol):
    """Measures the energy of the devices a process trains on.

    ``energy()`` is cumulative joules since the meter was created, over all its devices;
    ``devices`` names them and ``readings()`` gives each one's joules, so that a distributed run
    counts a device that several ranks see once. A meter of this process's devices alone
    subclasses `ProcessMeter`, which supplies both.
    """

    name: str
    """What it measures, for logs (e.g. ``nvml``, ``rapl``, ``estimate``)."""
    is_estimate: bool
    device_model: str
    device_count: int
    max_power: float
    """Sum of the devices' maximum power limits (W): the ``max_power`` of the cost."""

    @property
    def devices(self) -> Sequence[Device]:
        """The devices it measures, each by a key that every process that sees it gives alike
        (a GPU's UUID, a CPU package's host and domain)."""
        ...

    def energy(self) -> float:
        """Joules since the meter was created, over its devices."""
        ...

    def readings(self) -> dict[str, float]:
        """Joules since the meter was created, per device key (adding up to `energy`)."""
        ...

    def close(self) -> None:
        """Release what the meter holds (a sampling thread, a library handle)."""
        ...


class ProcessMeter(EnergyMeter):
    """Base of a meter whose devices are this process's alone (an estimate, a meter of your
    own): one device, keyed by host and process, so a distributed run counts it once per rank.
    A subclass sets ``name``, ``is_estimate``, ``device_model``, ``device_count`` and
    ``max_power`` (the attributes `EnergyMeter` declares) and defines `energy` and `close`."""

    @property
    def devices(self) -> Sequence[Device]:
        """This process's device."""
        return [Device(self._key(), self.device_model, self.max_power)]

    def energy(self) -> float:
        raise NotImplementedError

    def readings(self) -> dict[str, float]:
        """This process's joules under its device's key."""
        return {self._key(): self.energy()}

    def close(self) -> None:
        """Nothing to release."""

    def _key(self) -> str:
        return f"{self.name}@{socket.gethostname()}:{os.getpid()}"


def check_meter(meter: object) -> EnergyMeter:
    """``meter``, if it offers everything `EnergyMeter` declares.

    Raises:
        ConfigurationError: it lacks a member; the message names them and the base class that
            supplies ``devices`` and ``readings()``.
    """
    if isinstance(meter, EnergyMeter):
        return meter
    missing = [
        member
        for member in ("name", "is_estimate", "device_model", "device_count", "max_power",
                       "devices", "energy", "readings", "close")
        if not hasattr(meter, member)
    ]  # fmt: skip
    raise ConfigurationError(
        f"{type(meter).__name__} is not an energy meter: it has no {', '.join(missing)} "
        "(subclass zeus_bso.energy.ProcessMeter for a meter of this process's devices, which "
        "supplies devices and readings())"
    )
