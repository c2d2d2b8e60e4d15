"""What every energy meter offers."""

from __future__ import annotations

from typing import Protocol

from zeus_bso.errors import ZeusBSOError


class EnergyMeterError(ZeusBSOError):
    """Raised when a meter cannot measure here (no device, no permission, mixed GPU models)."""


class MixedGpuModelsError(EnergyMeterError):
    """Raised when a run would train on GPUs of more than one model: no one batch size fits."""

    def __init__(self, models: list[str], where: str = "the run's GPUs") -> None:
        self.models = models
        super().__init__(
            f"{where} are of different models {models}; train on one model (set "
            "CUDA_VISIBLE_DEVICES on every node) so that one batch size fits them all"
        )


class UnmeasurableDeviceError(EnergyMeterError):
    """Raised when the device a process trains on has no energy reading of its own (a MIG
    slice). Not a reason to fall back to another meter: the choice is the user's."""


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
