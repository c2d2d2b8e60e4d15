"""NVIDIA GPU energy through NVML (the ``nvidia-ml-py`` package).

The total-energy counter is used where the GPU has one (Volta and newer); otherwise a thread
samples power and integrates it. Only the GPUs this process trains on are measured.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from zeus_bso.energy.base import EnergyMeterError

INSTALL_HINT = "pip install 'zeus-bso[nvml]'"


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError as err:
        raise EnergyMeterError(f"NVML needs nvidia-ml-py: {INSTALL_HINT}") from err
    return pynvml


def visible_gpu_indices() -> list[int] | None:
    """NVML indices of ``CUDA_VISIBLE_DEVICES`` when it lists indices (``None``: all GPUs)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or not value.strip():
        return None
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        return None  # UUIDs or MIG names: measure what NVML shows


class NVMLMeter:
    """Energy of the given GPUs (NVML indices; default: the visible ones)."""

    name = "nvml"
    is_estimate = False

    def __init__(self, gpu_indices: list[int] | None = None, sample_interval: float = 0.1) -> None:
        nvml = _pynvml()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise EnergyMeterError(f"NVML is not available here: {err}") from err
        self._nvml = nvml
        try:
            indices = gpu_indices or visible_gpu_indices()
            if indices is None:
                indices = list(range(nvml.nvmlDeviceGetCount()))
            if not indices:
                raise EnergyMeterError("NVML sees no GPU")
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
            models = {str(nvml.nvmlDeviceGetName(h)) for h in self._handles}
            if len(models) > 1:
                raise EnergyMeterError(
                    f"the GPUs {indices} are of different models {sorted(models)}; train on one "
                    "model (set CUDA_VISIBLE_DEVICES) so that one batch size fits them all"
                )
            self.device_model = models.pop()
            self.device_count = len(self._handles)
            limits = [
                nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)[1] for h in self._handles
            ]
            self.max_power = sum(limits) / 1000.0
            self._counter = all(self._has_counter(h) for h in self._handles)
            self._start_mj = [self._counter_mj(h) for h in self._handles] if self._counter else []
        except nvml.NVMLError as err:
            raise EnergyMeterError(f"NVML query failed: {err}") from err
        self._sampled_j = 0.0
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        if not self._counter:
            self._sampler = threading.Thread(
                target=self._sample, args=(sample_interval,), daemon=True, name="zeus-bso-nvml"
            )
            self._sampler.start()

    def _has_counter(self, handle: Any) -> bool:
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except self._nvml.NVMLError:
            return False
        return True

    def _counter_mj(self, handle: Any) -> int:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))

    def _sample(self, interval: float) -> None:
        last = time.monotonic()
        while not self._stop.wait(interval):
            now = time.monotonic()
            try:
                watts = sum(self._nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles) / 1000
            except self._nvml.NVMLError:
                continue
            self._sampled_j += watts * (now - last)
            last = now

    @property
    def uses_energy_counter(self) -> bool:
        """Whether the GPUs' total-energy counter is used (else sampled power)."""
        return self._counter

    def energy(self) -> float:
        """Joules since the meter was created, over its GPUs."""
        if not self._counter:
            return self._sampled_j
        now = [self._counter_mj(h) for h in self._handles]
        return sum(n - s for n, s in zip(now, self._start_mj, strict=True)) / 1000.0

    def close(self) -> None:
        """Stop sampling."""
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=1.0)
