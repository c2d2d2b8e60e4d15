"""Energy through upstream Zeus's device layer (PyPI ``zeus``, the ``zeus-bso[zeus]`` extra): AMD
GPUs (amdsmi), NVIDIA Jetson and Apple Silicon, and NVIDIA GPUs as Zeus sees them (a Grace Hopper
superchip's reading is the whole module's, and says so).

Zeus's ``ZeusMonitor`` is built on the same device objects (``zeus.device.get_gpus`` and
``get_soc``); the meter reads their cumulative counters directly, so that it measures from its
creation without measurement windows, keeps the devices apart (a run counts each once over its
ranks) and does not import the monitor's power-polling machinery (scikit-learn and pandas).

What the readings cover, by hardware (`ZeusMeter.scope`):

- ``gpu``: a discrete GPU's own energy (NVIDIA, AMD);
- ``module``: a Grace Hopper superchip, whose NVML readings cover the Grace CPU, the Hopper GPU and
  their memory together;
- ``soc``: a Jetson or Apple Silicon system on a chip: CPU, GPU and the rest of the chip together.

The model name the job is registered with carries the scope where it is not ``gpu``, so the
dashboard and the hardware profiles say what was measured.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

from zeus_bso.energy.base import Device
from zeus_bso.energy.device_meter import DeviceMeter, PowerSampler
from zeus_bso.errors import ConfigurationError, EnergyMeterError, MixedGpuModelsError

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'zeus-bso[zeus]'"
DEFAULT_SOC_WATTS = 60.0
"""The maximum power assumed for a system on a chip (Zeus reports none): pass ``soc_max_power``."""

SCOPE_LABELS = {"module": "module: Grace CPU + Hopper GPU", "soc": "SoC: CPU + GPU"}

_APPLE_FIELDS = ("cpu_total_mj", "gpu_mj", "gpu_sram_mj", "ane_mj", "dram_mj")


def _zeus_devices() -> tuple[Any, Any, type[Exception]]:
    """``zeus.device.gpu``, ``zeus.device.soc`` and Zeus's base error, imported on first use."""
    try:
        import zeus.device.gpu as gpu
        import zeus.device.soc as soc
        from zeus.exception import ZeusBaseError
    except ImportError as err:
        raise EnergyMeterError(f"upstream Zeus's meter needs zeus: {INSTALL_HINT}") from err
    return gpu, soc, ZeusBaseError


def visible_indices(vendor: str, environ: Mapping[str, str]) -> list[int] | None:
    """The physical indices of the GPUs a process sees, as Zeus reads the environment
    (``CUDA_VISIBLE_DEVICES`` on NVIDIA; ``HIP_VISIBLE_DEVICES``, else ``CUDA_VISIBLE_DEVICES``, on
    AMD), or None when every GPU is visible. Zeus takes integer indices only."""
    names = (
        ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
        if vendor == "amd"
        else ("CUDA_VISIBLE_DEVICES",)
    )
    for name in names:
        value = environ.get(name)
        if value is not None:
            return [int(entry) for entry in value.split(",") if entry.strip()]
    return None


def soc_joules(measurement: Any) -> float:
    """Joules of a Zeus SoC measurement (mJ fields): a Jetson's whole-board rail where it has
    one (else its CPU and GPU rails), an Apple chip's CPU, GPU, GPU SRAM, neural engine and
    DRAM."""
    fields = dataclasses.asdict(measurement)
    if "total_energy_mj" in fields:  # Jetson
        if fields["total_energy_mj"] is not None:
            return float(fields["total_energy_mj"]) / 1000.0
        parts = [fields.get("cpu_energy_mj"), fields.get("gpu_energy_mj")]
    elif "cpu_total_mj" in fields:  # Apple Silicon
        parts = [fields.get(name) for name in _APPLE_FIELDS]
    else:
        raise EnergyMeterError(
            f"upstream Zeus's SoC reading {type(measurement).__name__} is not one this meter "
            "knows (Jetson, Apple Silicon)"
        )
    return sum(float(part) for part in parts if part is not None) / 1000.0


class ZeusMeter(DeviceMeter):
    """Energy of the accelerators upstream Zeus sees here: the GPUs this process sees (or the
    visible indices given), else the system on a chip. Devices are named by host and physical
    GPU index (or the host's SoC), so ranks on one node that see the same GPUs count each once.

    Args:
        gpu_indices: visible GPU indices to measure (default: every visible GPU).
        soc_max_power: the SoC's maximum power in watts, for the cost's time term (Zeus reports
            none; default `DEFAULT_SOC_WATTS`, announced as assumed).
        sample_interval: seconds between power samples for a GPU without an energy counter.

    Raises:
        EnergyMeterError: zeus is not installed, or it sees no GPU or SoC here.
        MixedGpuModelsError: this process sees GPUs of more than one model.
    """

    name = "zeus"
    is_estimate = False

    def __init__(
        self,
        gpu_indices: list[int] | None = None,
        *,
        soc_max_power: float | None = None,
        sample_interval: float = 0.1,
    ) -> None:
        zeus_gpu, zeus_soc, zeus_error = _zeus_devices()
        host = socket.gethostname()
        self._gpus: Any = None
        self._soc: Any = None
        self._indices: list[int] = []
        try:
            try:
                self._gpus = zeus_gpu.get_gpus()
            except zeus_gpu.ZeusGPUInitError:
                self._gpus = None
            if self._gpus is not None and len(self._gpus) > 0:
                count = len(self._gpus)
                self._indices = list(gpu_indices) if gpu_indices else list(range(count))
                if not all(0 <= i < count for i in self._indices):
                    raise ConfigurationError(
                        f"gpu_indices {gpu_indices} name GPUs this process cannot see: it sees "
                        f"{count} (indices 0 to {count - 1}, after CUDA_VISIBLE_DEVICES)"
                    )
                vendor = "amd" if isinstance(self._gpus, zeus_gpu.AMDGPUs) else "nvidia"
                self.devices, self.scope = self._gpu_devices(host, vendor)
                counter = all(
                    self._gpus.supports_get_total_energy_consumption(i) for i in self._indices
                )
                self._start = self._read_raw() if counter else []
            else:
                try:
                    self._soc = zeus_soc.get_soc()
                except zeus_soc.ZeusSoCInitError as err:
                    raise EnergyMeterError(
                        f"upstream Zeus sees no GPU and no system on a chip here: {err}"
                    ) from err
                self.scope = "soc"
                watts = soc_max_power if soc_max_power is not None else DEFAULT_SOC_WATTS
                if soc_max_power is None:
                    logger.warning(
                        "Zeus reports no maximum power for %s: the cost's time term assumes "
                        "%.0f W (pass ZeusMeter(soc_max_power=...) to set it)",
                        type(self._soc).__name__,
                        watts,
                    )
                model = f"{type(self._soc).__name__} ({SCOPE_LABELS['soc']})"
                self.devices = [Device(f"zeus-soc@{host}", model, watts)]
                counter = True
                self._start = self._read_raw()
        except zeus_error as err:
            raise EnergyMeterError(f"upstream Zeus cannot measure here: {err}") from err
        self.device_model = self.devices[0].model
        self.device_count = len(self.devices)
        self.max_power = sum(device.max_power for device in self.devices)
        self._error = zeus_error
        if counter:
            self._counting()
        else:
            gpus, indices = self._gpus, self._indices
            self._sampler = PowerSampler(
                lambda: [gpus.get_instant_power_usage(i) / 1000.0 for i in indices],
                len(indices),
                sample_interval,
                (zeus_error,),
                "zeus-bso-zeus",
            )
        if self.scope != "gpu":
            logger.info("upstream Zeus measures %s", SCOPE_LABELS[self.scope])

    def _gpu_devices(self, host: str, vendor: str) -> tuple[list[Device], str]:
        gpus = self._gpus
        physical = visible_indices(vendor, os.environ) or list(range(len(gpus)))
        names = [gpus.get_name(i) for i in self._indices]
        if len(set(names)) > 1:
            raise MixedGpuModelsError(sorted(set(names)), "the GPUs this process sees")
        module = any(getattr(gpus.gpus[i], "_is_grace_hopper", False) for i in self._indices)
        scope = "module" if module else "gpu"
        model = f"{names[0]} ({SCOPE_LABELS[scope]})" if module else names[0]
        devices = [
            Device(
                f"zeus-{vendor}@{host}:{physical[i]}",
                model,
                gpus.get_power_management_limit_constraints(i)[1] / 1000.0,
            )
            for i in self._indices
        ]
        return devices, scope

    def _read_raw(self) -> list[float]:
        """Each device's counter now, in joules."""
        if self._soc is not None:
            return [soc_joules(self._soc.get_total_energy_consumption())]
        return [self._gpus.get_total_energy_consumption(i) / 1000.0 for i in self._indices]

    def _counter_joules(self) -> list[float]:
        try:
            now = self._read_raw()
        except self._error as err:
            raise EnergyMeterError(f"upstream Zeus's reading failed: {err}") from err
        return [n - s for n, s in zip(now, self._start, strict=True)]
