"""A stand-in for ``pynvml`` (nvidia-ml-py) with GPUs that a test describes: put this directory
first on ``PYTHONPATH`` and describe the GPUs in ``ZEUS_BSO_TEST_GPUS`` (JSON)::

    [{"uuid": "GPU-1111...", "name": "NVIDIA A100-SXM4-40GB", "watts": 100, "limit_w": 400,
      "counter": true}, ...]

It stands in for the hardware only. Its functions have nvidia-ml-py's names, arguments, units
(mW, mJ) and errors. Each GPU draws ``watts`` all the time: its total-energy counter is one
function of the wall clock, so that every process reading one GPU reads the same counter, as
with real GPUs. ``counter: false`` is a GPU older than Volta, without the counter; ``c2c: true``
is a Grace Hopper superchip (its chip-to-chip link enabled).

Upstream Zeus's device layer runs over it too: it has the constants and functions Zeus reads
(error codes with nvidia-ml-py's values, the architecture, the C2C mode).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_MEMORY = 20
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_ARCH_PASCAL = 4
NVML_DEVICE_ARCH_VOLTA = 5
NVML_DEVICE_ARCH_HOPPER = 9

NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_POWER_SCOPE_GPU = 0
NVML_POWER_SCOPE_MODULE = 1

_EPOCH = 1.7e9  # the counters' zero, the same in every process


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(value)

    def __str__(self) -> str:
        return {
            NVML_ERROR_UNINITIALIZED: "Uninitialized",
            NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
            NVML_ERROR_NOT_SUPPORTED: "Not Supported",
            NVML_ERROR_NOT_FOUND: "Not Found",
        }.get(self.value, f"NVML error {self.value}")


class NVMLError_NotSupported(NVMLError):  # noqa: N801, N818 (nvidia-ml-py's name)
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class _Handle:
    def __init__(self, index: int, gpu: dict[str, Any]) -> None:
        self.index = index
        self.gpu = gpu


_gpus: list[_Handle] | None = None


def nvmlInit() -> None:  # noqa: N802
    global _gpus
    described = json.loads(os.environ.get("ZEUS_BSO_TEST_GPUS", "[]"))
    _gpus = [_Handle(i, gpu) for i, gpu in enumerate(described)]


def nvmlShutdown() -> None:  # noqa: N802
    global _gpus
    _gpus = None


def _all() -> list[_Handle]:
    if _gpus is None:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _gpus


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return len(_all())


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:  # noqa: N802
    gpus = _all()
    if not 0 <= index < len(gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpus[index]


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> _Handle:  # noqa: N802
    text = uuid.decode() if isinstance(uuid, bytes) else uuid
    for handle in _all():
        if handle.gpu["uuid"] == text:
            return handle
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetUUID(handle: _Handle) -> str:  # noqa: N802
    return str(handle.gpu["uuid"])


def nvmlDeviceGetName(handle: _Handle) -> str:  # noqa: N802
    return str(handle.gpu["name"])


def nvmlDeviceGetPowerManagementLimitConstraints(handle: _Handle) -> list[int]:  # noqa: N802
    limit_mw = int(handle.gpu.get("limit_w", 400) * 1000)
    return [limit_mw // 4, limit_mw]


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:  # noqa: N802
    return int(handle.gpu["watts"] * 1000)


def nvmlDeviceGetTotalEnergyConsumption(handle: _Handle) -> int:  # noqa: N802
    if not handle.gpu.get("counter", True):
        raise NVMLError_NotSupported()
    return int(handle.gpu["watts"] * (time.time() - _EPOCH) * 1000)


def _nvmlGetFunctionPointer(name: str) -> Any:  # noqa: N802 (nvidia-ml-py's name)
    """nvidia-ml-py's loader; Zeus checks that it exists (the official bindings)."""
    raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)


def nvmlDeviceGetArchitecture(handle: _Handle) -> int:  # noqa: N802
    """Hopper for a GPU with the energy counter, Pascal (older than Volta) for one without."""
    return NVML_DEVICE_ARCH_HOPPER if handle.gpu.get("counter", True) else NVML_DEVICE_ARCH_PASCAL


class _C2cModeInfo:
    def __init__(self, enabled: bool) -> None:
        self.isC2cEnabled = int(enabled)


def nvmlDeviceGetC2cModeInfoV(handle: _Handle) -> _C2cModeInfo:  # noqa: N802
    if not handle.gpu.get("c2c", False):
        raise NVMLError_NotSupported()
    return _C2cModeInfo(True)


class _Value:
    def __init__(self, milliwatts: int) -> None:
        self.uiVal = milliwatts


class _FieldValue:
    def __init__(self, field_id: int, scope_id: int, milliwatts: int) -> None:
        self.fieldId = field_id
        self.scopeId = scope_id
        self.nvmlReturn = NVML_SUCCESS
        self.value = _Value(milliwatts)


def nvmlDeviceGetFieldValues(  # noqa: N802
    handle: _Handle, field_ids: list[tuple[int, int]]
) -> list[_FieldValue]:
    """The power fields (average or instant, GPU or module scope): the GPU's ``watts``."""
    values = []
    for field_id, scope_id in field_ids:
        if field_id not in (NVML_FI_DEV_POWER_AVERAGE, NVML_FI_DEV_POWER_INSTANT):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        values.append(_FieldValue(field_id, scope_id, int(handle.gpu["watts"] * 1000)))
    return values
