"""NVIDIA GPU energy through NVML (the ``nvidia-ml-py`` package).

The total-energy counter is used where the GPU has one (Volta and newer); otherwise a thread
samples power and integrates it. The GPUs measured are those ``CUDA_VISIBLE_DEVICES`` leaves
visible (indices or UUIDs, as CUDA reads it), or the NVML indices given.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from zeus_bso.energy.base import Device
from zeus_bso.energy.device_meter import DeviceMeter, PowerSampler
from zeus_bso.errors import EnergyMeterError, MixedGpuModelsError, UnmeasurableDeviceError

INSTALL_HINT = "pip install 'zeus-bso[nvml]'"


def pynvml_module() -> Any:
    try:
        import pynvml
    except ImportError as err:
        raise EnergyMeterError(f"NVML needs nvidia-ml-py: {INSTALL_HINT}") from err
    return pynvml


def nvml_text(value: Any) -> str:
    """NVML strings: ``str`` from nvidia-ml-py 11.5 on, ``bytes`` before."""
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_handles(nvml: Any) -> list[Any]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible, as CUDA reads it: indices, or UUIDs
    (``GPU-...``, a unique prefix is enough), up to the first entry that names no GPU; all GPUs
    when it is not set. A MIG slice (``MIG-...``) is an `UnmeasurableDeviceError`."""
    count = nvml.nvmlDeviceGetCount()
    every = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return every
    uuids = [nvml_text(nvml.nvmlDeviceGetUUID(h)) for h in every]
    chosen: list[Any] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.startswith("MIG-"):
            raise UnmeasurableDeviceError(
                f"CUDA_VISIBLE_DEVICES names a MIG slice ({entry}); NVML has no energy reading "
                "of a slice, only of the whole GPU, which other jobs share. Measure the whole "
                "GPU knowingly (energy_meter=NVMLMeter(gpu_indices=[<its index>])) or pass "
                "energy_meter=EstimateMeter(<watts>)"
            )
        if entry.lstrip("-").isdigit():
            index = int(entry)
            if not 0 <= index < count:
                break
            chosen.append(every[index])
            continue
        matches = [i for i, uuid in enumerate(uuids) if entry and uuid.startswith(entry)]
        if len(matches) != 1:
            break  # CUDA ignores this entry and every one after it
        chosen.append(every[matches[0]])
    return chosen


@contextmanager
def nvml_started() -> Iterator[Any]:
    """NVML, initialised for the block and shut down after it.

    Raises:
        EnergyMeterError: NVML is not installed, or cannot start here.
    """
    nvml = pynvml_module()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise EnergyMeterError(f"NVML is not available here: {err}") from err
    try:
        yield nvml
    finally:
        nvml.nvmlShutdown()


def visible_uuid(position: int) -> str | None:
    """The UUID of the ``position``-th GPU ``CUDA_VISIBLE_DEVICES`` leaves visible (CUDA's
    device ``position`` of this process); None: fewer are visible.

    Raises:
        EnergyMeterError: NVML cannot say (not installed, not available, a MIG slice).
    """
    with nvml_started() as nvml:
        try:
            handles = visible_handles(nvml)
            if not 0 <= position < len(handles):
                return None
            return nvml_text(nvml.nvmlDeviceGetUUID(handles[position]))
        except (nvml.NVMLError, UnmeasurableDeviceError) as err:
            raise EnergyMeterError(f"NVML query failed: {err}") from err


def handles_of_uuids(nvml: Any, uuids: list[str]) -> list[Any]:
    """The GPUs of ``uuids``, NVML's (``GPU-...``) or as torch says them
    (``torch.cuda.get_device_properties(i).uuid``: without the prefix).

    Raises:
        EnergyMeterError: NVML has no GPU of one of them (a MIG slice's, another machine's).
    """
    every = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    by_uuid = {nvml_text(nvml.nvmlDeviceGetUUID(h)).removeprefix("GPU-"): h for h in every}
    wanted = [str(uuid).removeprefix("GPU-") for uuid in uuids]
    missing = [uuid for uuid in wanted if uuid not in by_uuid]
    if missing:
        raise EnergyMeterError(f"NVML has no GPU of UUID {', '.join(missing)}")
    return [by_uuid[uuid] for uuid in wanted]


class NVMLMeter(DeviceMeter):
    """Energy of the given GPUs (NVML indices, or ``gpu_uuids``; default: those
    ``CUDA_VISIBLE_DEVICES`` leaves visible, by index or UUID). Its devices are named by GPU
    UUID (`devices`, `readings`), so a run whose ranks see the same GPUs counts each once."""

    name = "nvml"
    is_estimate = False

    def __init__(
        self,
        gpu_indices: list[int] | None = None,
        sample_interval: float = 0.1,
        *,
        gpu_uuids: list[str] | None = None,
    ) -> None:
        nvml = pynvml_module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise EnergyMeterError(f"NVML is not available here: {err}") from err
        self._nvml = nvml
        try:
            if gpu_uuids:
                self._handles = handles_of_uuids(nvml, gpu_uuids)
            elif gpu_indices:
                self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in gpu_indices]
            else:
                self._handles = visible_handles(nvml)
            if not self._handles:
                raise EnergyMeterError("NVML sees no GPU (or CUDA_VISIBLE_DEVICES names none)")
            names = [nvml_text(nvml.nvmlDeviceGetName(h)) for h in self._handles]
            if len(set(names)) > 1:
                raise MixedGpuModelsError(sorted(set(names)), "the GPUs this process sees")
            limits = [
                nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)[1] / 1000.0
                for h in self._handles
            ]
            self.devices = [
                Device(nvml_text(nvml.nvmlDeviceGetUUID(h)), name, limit)
                for h, name, limit in zip(self._handles, names, limits, strict=True)
            ]
            self.device_model = names[0]
            self.device_count = len(self._handles)
            self.max_power = sum(limits)
            counter = all(self._has_counter(h) for h in self._handles)
            self._start_mj = [self._counter_mj(h) for h in self._handles] if counter else []
            self._counting()
        except nvml.NVMLError as err:
            raise EnergyMeterError(f"NVML query failed: {err}") from err
        if not counter:
            self._sampler = PowerSampler(
                lambda: [nvml.nvmlDeviceGetPowerUsage(h) / 1000 for h in self._handles],
                len(self._handles),
                sample_interval,
                (nvml.NVMLError,),
                "zeus-bso-nvml",
            )

    @property
    def handles(self) -> list[Any]:
        """NVML's handles of the meter's GPUs, in the order of `devices`."""
        return list(self._handles)

    def _has_counter(self, handle: Any) -> bool:
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except self._nvml.NVMLError:
            return False
        return True

    def _counter_mj(self, handle: Any) -> int:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))

    def _counter_joules(self) -> list[float]:
        try:
            now = [self._counter_mj(h) for h in self._handles]
        except self._nvml.NVMLError as err:
            raise EnergyMeterError(f"NVML's energy counter could not be read: {err}") from err
        return [(n - s) / 1000.0 for n, s in zip(now, self._start_mj, strict=True)]
