"""A stand-in for ``pynvml`` (nvidia-ml-py) with GPUs that a test describes: put this directory
first on ``PYTHONPATH`` and describe the GPUs in ``ZEUS_BSO_TEST_GPUS`` (JSON)::

    [{"uuid": "GPU-1111...", "name": "NVIDIA A100-SXM4-40GB", "watts": 100, "limit_w": 400,
      "counter": true}, ...]

It stands in for the hardware only. Its functions have nvidia-ml-py's names, arguments, units
(mW, mJ) and errors. Each GPU draws ``watts`` all the time: its total-energy counter is one
function of the wall clock, so that every process reading one GPU reads the same counter, as
with real GPUs. ``counter: false`` is a GPU older than Volta, without the counter.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6

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
