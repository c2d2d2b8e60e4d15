"""A stand-in for ``pynvml`` (nvidia-ml-py) with GPUs that a test describes: put this directory
first on ``PYTHONPATH`` and describe the GPUs in ``ZEUS_BSO_TEST_GPUS`` (JSON)::

    [{"uuid": "GPU-1111...", "name": "NVIDIA A100-SXM4-40GB", "watts": 100, "limit_w": 400,
      "counter": true}, ...]

It stands in for the hardware only. Its functions have nvidia-ml-py's names, arguments, units
(mW, mJ) and errors. Each GPU draws ``watts`` all the time: its total-energy counter is one
function of the machine's monotonic clock, so that every process reading one GPU reads the same
counter, as with real GPUs (updated every ``counter_period_s`` seconds where given: an H200's is
every 0.1 s); a step of the wall clock (NTP setting it) moves it no more than it moves a real
GPU's counter, or the seconds a run measures. ``counter: false`` is a GPU older than Volta,
without the counter; ``c2c: true`` is a Grace Hopper superchip (its chip-to-chip link enabled).

Upstream Zeus's device layer runs over it too: it has the constants and functions Zeus reads
(error codes with nvidia-ml-py's values, the architecture, the C2C mode).

Power limits: with ``ZEUS_BSO_TEST_GPU_STATE`` (a directory), a GPU's limit can be set, and the
setting is shared by every process, as a real GPU's is (a file per GPU holds the limit and the
history of every change; ``sets`` counts the calls that changed it, ``calls`` every call).
A GPU's energy counter fails the reads a test asks (``<uuid>.faults.json`` in that directory:
the error codes its next reads answer, one a read, 0 a read that succeeds:
`zeus_bso.testing.gpus.fail_counter_reads`).
``settable: false`` answers ``NVML_ERROR_NO_PERMISSION`` (no ``SYS_ADMIN``); ``mig: true`` is a
GPU in MIG mode; ``processes: [pid, ...]`` are the processes computing on it, by their IDs in
the host's PID namespace (the only one the driver knows: a container's processes have others),
and ``process_names: {"pid": "name"}`` what NVML names them (``nvidia-cuda-mps-server``: MPS);
``minor`` is its device file's number (``/dev/nvidia<minor>``; default: its index). ``paces``, by
limit in watts, give the GPU's draw and a training step's seconds at that limit, as a power
trace measured them (``{"250": {"watts": 240, "step_s": 0.01}, ...}``): the energy counter
integrates the draw of the limit in force, and `_step_seconds` says how long a test's step
takes at it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
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

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_POWER_SCOPE_GPU = 0
NVML_POWER_SCOPE_MODULE = 1

_EPOCH = 0.0
"""The counters' zero: the monotonic clock's (the machine's boot), the same in every process."""


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
            NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
            NVML_ERROR_TIMEOUT: "Timeout",
            NVML_ERROR_GPU_IS_LOST: "GPU is lost",
            NVML_ERROR_UNKNOWN: "Unknown Error",
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


def _max_mw(handle: _Handle) -> int:
    return int(handle.gpu.get("limit_w", 400) * 1000)


def _min_mw(handle: _Handle) -> int:
    paces = handle.gpu.get("paces")
    if paces:
        return int(min(float(w) for w in paces) * 1000)
    return _max_mw(handle) // 4


def nvmlDeviceGetPowerManagementLimitConstraints(handle: _Handle) -> list[int]:  # noqa: N802
    return [_min_mw(handle), _max_mw(handle)]


def nvmlDeviceGetPowerManagementDefaultLimit(handle: _Handle) -> int:  # noqa: N802
    return _max_mw(handle)


def _state_file(handle: _Handle) -> Path | None:
    folder = os.environ.get("ZEUS_BSO_TEST_GPU_STATE")
    return Path(folder) / f"{handle.gpu['uuid']}.json" if folder else None


def _state(handle: _Handle) -> dict[str, Any]:
    """The GPU's limit and its changes ``[[time, mW], ...]`` (shared by every process)."""
    path = _state_file(handle)
    if path is None or not path.exists():
        return {"limit_mw": _max_mw(handle), "changes": [], "sets": 0}
    return dict(json.loads(path.read_text()))


def nvmlDeviceGetPowerManagementLimit(handle: _Handle) -> int:  # noqa: N802
    return int(_state(handle)["limit_mw"])


def nvmlDeviceGetEnforcedPowerLimit(handle: _Handle) -> int:  # noqa: N802
    return int(_state(handle)["limit_mw"])


def nvmlDeviceSetPowerManagementLimit(handle: _Handle, limit_mw: int) -> None:  # noqa: N802
    path = _state_file(handle)
    if path is None or not handle.gpu.get("settable", True):
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    if not _min_mw(handle) <= int(limit_mw) <= _max_mw(handle):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = _state(handle)
        state["calls"] = state.get("calls", 0) + 1
        if int(limit_mw) != state["limit_mw"]:
            state["changes"].append([time.monotonic(), int(limit_mw)])
            state["sets"] += 1
        state["limit_mw"] = int(limit_mw)
        path.with_suffix(".tmp").write_text(json.dumps(state))
        path.with_suffix(".tmp").replace(path)


def _pace(handle: _Handle, limit_mw: int) -> dict[str, float] | None:
    paces = handle.gpu.get("paces")
    if not paces:
        return None
    return dict(paces[min(paces, key=lambda w: abs(float(w) * 1000 - limit_mw))])


def _watts(handle: _Handle, limit_mw: int) -> float:
    pace = _pace(handle, limit_mw)
    if pace is not None:
        return float(pace["watts"])
    return min(float(handle.gpu["watts"]), limit_mw / 1000)


def _step_seconds(handle: _Handle) -> float:
    """A test's training step at the limit in force: ``paces``' ``step_s`` (default 0.01)."""
    pace = _pace(handle, nvmlDeviceGetPowerManagementLimit(handle))
    return float(pace["step_s"]) if pace is not None else 0.01


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:  # noqa: N802
    return int(_watts(handle, nvmlDeviceGetPowerManagementLimit(handle)) * 1000)


def _fault(handle: _Handle) -> int | None:
    """The error code the GPU's next counter read answers, taken from its list of faults
    (``<uuid>.faults.json`` in the state directory: codes, one a read, 0 a read that
    succeeds), or None."""
    path = _state_file(handle)
    if path is None or not (faults := path.with_suffix(".faults.json")).exists():
        return None
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        codes = json.loads(faults.read_text())
        if not codes:
            return None
        faults.write_text(json.dumps(codes[1:]))
        return int(codes[0]) or None


def nvmlDeviceGetTotalEnergyConsumption(handle: _Handle) -> int:  # noqa: N802
    if not handle.gpu.get("counter", True):
        raise NVMLError_NotSupported()
    if (code := _fault(handle)) is not None:
        raise NVMLError(code)
    changes = _state(handle)["changes"]  # a file read: the clock is taken after it, as the
    # caller's next is (before it, a read that took milliseconds under load went uncounted)
    now = time.monotonic()
    period = handle.gpu.get("counter_period_s")
    if period:  # updated every ``period`` seconds, as a real GPU's counter is
        now = _EPOCH + (now - _EPOCH) // period * period
    limit, since, joules = _max_mw(handle), _EPOCH, 0.0
    for at, changed_to in changes:
        if at > now:
            break
        joules += _watts(handle, limit) * (at - since)
        limit, since = changed_to, at
    joules += _watts(handle, limit) * (now - since)
    return int(joules * 1000)


def nvmlDeviceGetMigMode(handle: _Handle) -> list[int]:  # noqa: N802
    mode = NVML_DEVICE_MIG_ENABLE if handle.gpu.get("mig", False) else NVML_DEVICE_MIG_DISABLE
    return [mode, mode]


class _Process:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.usedGpuMemory = 0


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[_Process]:  # noqa: N802
    return [_Process(int(pid)) for pid in handle.gpu.get("processes", [])]


def nvmlSystemGetProcessName(pid: int) -> str:  # noqa: N802
    for handle in _all():
        if (name := handle.gpu.get("process_names", {}).get(str(pid))) is not None:
            return str(name)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetMinorNumber(handle: _Handle) -> int:  # noqa: N802
    return int(handle.gpu.get("minor", handle.index))


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
