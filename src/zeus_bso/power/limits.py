"""The power limits of a process's GPUs, through NVML: read, set, and always restored.

Before a GPU's limit is first changed, a record of its limit is written on the node (a file per
GPU, in ``records``, created exclusively): the process that creates it owns that GPU's limit
for the run, and another process of the node that trains on the same GPU leaves it alone (a
node's GPU is set once). `GpuPowerLimits.restore` puts every owned GPU back and deletes its
record; it runs at the end of a run, on an exception, when the trial's lease is lost, on
SIGTERM and at interpreter exit. A process killed outright (SIGKILL) cannot: its records stay,
and `restore_orphaned`, at the start of the next run on the node, restores the GPUs whose
owner is gone.

Without the permission to set limits (NVML's ``NO_PERMISSION``: the process lacks
``CAP_SYS_ADMIN``) nothing is set and `GpuPowerLimits.advisory` is True: the caller logs the
recommended limit instead. A GPU in MIG mode, or one that other processes compute on, is
refused with `PowerLimitError`: its limit is not this run's alone.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from zeus_bso.energy.nvml import nvml_text, pynvml_module, visible_handles
from zeus_bso.errors import EnergyMeterError, PowerLimitError
from zeus_bso.power.profiler import counter_period_s

logger = logging.getLogger(__name__)

LIMIT_STEP_W = 25.0
"""Watts between the limits profiled, from the maximum down (upstream Zeus's default)."""


@dataclass(frozen=True, slots=True)
class _Gpu:
    handle: Any
    uuid: str
    min_w: float
    max_w: float


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot, from ``/proc``), or None where that
    cannot be read (no such process, or no ``/proc``): it tells a process from a later one that
    was given the same PID."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the name, in parentheses, may hold spaces
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` runs, and is the one that started at ``started`` (if given and
    readable): a PID reused by another process is not the owner."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    now = _started(pid) if started is not None else None
    return now is None or now == started


def _nvml() -> Any:
    """NVML, initialised; a `PowerLimitError` (a usage error, raised alike on every process)
    where it is missing or cannot start."""
    try:
        nvml = pynvml_module()
    except EnergyMeterError as err:
        raise PowerLimitError(
            f"power limits need NVML: {err}; or train without power_limit='optimize'"
        ) from err
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise PowerLimitError(
            f"power limits need NVML, which cannot start here ({err}): on a machine with "
            "NVIDIA GPUs and their driver, or train without power_limit='optimize'"
        ) from err
    return nvml


def _own_handles(nvml: Any, gpu_indices: list[int] | None) -> list[Any]:
    """The GPUs this process trains on: those given (NVML indices); else, with CUDA up, its
    current device; else, in a multi-process launch, the visible GPU of its local rank; else
    every visible GPU."""
    if gpu_indices:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in gpu_indices]
    visible = visible_handles(nvml)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        index = torch.cuda.current_device()
        if 0 <= index < len(visible):
            return [visible[index]]
    local = os.environ.get("LOCAL_RANK")
    several = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > 1
    if local is not None and several and 0 <= int(local) < len(visible):
        return [visible[int(local)]]
    return visible


class GpuPowerLimits:
    """The power limits of the GPUs this process trains on (see the module).

    Args:
        records: the node's folder of records (one file per GPU whose limit a run changed).
        gpu_indices: NVML indices of the GPUs (default: those this process trains on).
        run_pids: the processes of this run (every rank's, where known): they may compute on
            the GPUs; any other process makes a GPU shared, and refused.

    Raises:
        PowerLimitError: no NVML, a GPU in MIG mode, or one other processes compute on.
    """

    def __init__(
        self,
        records: Path,
        gpu_indices: list[int] | None = None,
        run_pids: Collection[int] = (),
    ) -> None:
        nvml = self._nvml = _nvml()
        self._records = records
        self._owned: dict[str, float] = {}  # uuid: the limit to restore (W)
        # Reentrant: the SIGTERM handler restores on the main thread, which the signal may
        # have interrupted inside `set` or `restore`, holding the lock.
        self._lock = threading.RLock()
        self.advisory = False
        """True once setting a limit was refused for want of permission: nothing is set."""
        ours = {os.getpid(), *run_pids}
        gpus = []
        try:
            for handle in _own_handles(nvml, gpu_indices):
                uuid = nvml_text(nvml.nvmlDeviceGetUUID(handle))
                if _mig_enabled(nvml, handle):
                    raise PowerLimitError(
                        f"GPU {uuid} is in MIG mode: its power limit is every slice's; train "
                        "without power_limit='optimize' there"
                    )
                others = sorted(
                    p.pid
                    for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                    if p.pid not in ours
                )
                if others:
                    raise PowerLimitError(
                        f"GPU {uuid} is shared: processes {others} compute on it too, and its "
                        "power limit would be theirs as well; train without "
                        "power_limit='optimize' there, or on a GPU of its own"
                    )
                low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
                gpus.append(_Gpu(handle, uuid, low / 1000.0, high / 1000.0))
        except nvml.NVMLError as err:
            raise PowerLimitError(f"NVML could not read the GPUs' power limits: {err}") from err
        if not gpus:
            raise PowerLimitError("this process sees no GPU whose power limit it could set")
        self._gpus = gpus
        self._previous_sigterm: Any = None
        self._on_sigterm: Callable[[int, FrameType | None], None] | None = None
        self._at_exit = False

    @property
    def uuids(self) -> list[str]:
        """The GPUs, by UUID."""
        return [gpu.uuid for gpu in self._gpus]

    def limits(self) -> list[float]:
        """The limits a profile measures: from the GPUs' maximum down to their minimum, in
        steps of `LIMIT_STEP_W` (the range every GPU allows)."""
        high = min(gpu.max_w for gpu in self._gpus)
        low = max(gpu.min_w for gpu in self._gpus)
        found, limit = [], high
        while limit >= low:
            found.append(limit)
            limit -= LIMIT_STEP_W
        return found

    def current(self) -> list[float]:
        """Each GPU's limit now (W)."""
        return [
            self._nvml.nvmlDeviceGetPowerManagementLimit(gpu.handle) / 1000.0 for gpu in self._gpus
        ]

    def joules(self) -> float:
        """The GPUs' energy counters together (J; GPUs older than Volta have none: 0)."""
        total = 0.0
        for gpu in self._gpus:
            try:
                total += self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle) / 1000.0
            except self._nvml.NVMLError:
                return 0.0
        return total

    def counter_period_s(self) -> float | None:
        """How often the first GPU's energy counter changes (s; None: it has none). One GPU:
        several update at their own moments, and their sum changes more often than each."""
        gpu = self._gpus[0]
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)
        except self._nvml.NVMLError:
            return None  # none (older than Volta): nothing to wait for

        def read() -> float:
            try:
                return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle))
            except self._nvml.NVMLError:
                return 0.0

        return counter_period_s(read)

    def set(self, limit_w: float) -> bool:
        """Set every owned GPU's limit to ``limit_w``, taking ownership of those no process of
        the node owns (a record of each one's limit first). Returns False in advisory mode
        (no permission: nothing set)."""
        if self.advisory:
            return False
        with self._lock:
            for gpu in self._gpus:
                if gpu.uuid not in self._owned and not self._own(gpu):
                    continue  # another process of the node set it: set once
                try:
                    self._nvml.nvmlDeviceSetPowerManagementLimit(gpu.handle, round(limit_w * 1000))
                except self._nvml.NVMLError as err:
                    if getattr(err, "value", None) == self._nvml.NVML_ERROR_NO_PERMISSION:
                        self.advisory = True
                        self._restore_locked()
                        return False
                    raise PowerLimitError(
                        f"NVML could not set GPU {gpu.uuid} to {limit_w:g} W: {err}"
                    ) from err
        self._guard()
        return True

    def _own(self, gpu: _Gpu) -> bool:
        """Write the record of ``gpu``'s limit, exclusively; whether this process owns it."""
        self._records.mkdir(parents=True, exist_ok=True)
        path = self._records / f"{gpu.uuid}.json"
        original = self._nvml.nvmlDeviceGetPowerManagementLimit(gpu.handle) / 1000.0
        record = {
            "original_w": original,
            "pid": os.getpid(),
            "started": _started(os.getpid()),
            "host": socket.gethostname(),
        }
        try:
            with open(path, "x") as file:
                json.dump(record, file)
        except FileExistsError:
            return False
        self._owned[gpu.uuid] = original
        return True

    def restore(self) -> None:
        """Put every owned GPU back to its limit from before the run and delete its record
        (again: nothing to do)."""
        with self._lock:
            self._restore_locked()

    def _restore_locked(self) -> None:
        for gpu in self._gpus:
            original = self._owned.pop(gpu.uuid, None)
            if original is None:
                continue
            try:
                self._nvml.nvmlDeviceSetPowerManagementLimit(gpu.handle, round(original * 1000))
            except self._nvml.NVMLError as err:
                if getattr(err, "value", None) != self._nvml.NVML_ERROR_NO_PERMISSION:
                    logger.error(
                        "could not restore GPU %s to %g W (%s): its record stays, for the next "
                        "run to restore",
                        gpu.uuid,
                        original,
                        err,
                    )
                    continue
            with contextlib.suppress(FileNotFoundError):
                (self._records / f"{gpu.uuid}.json").unlink()
            logger.info("GPU %s is back at %g W", gpu.uuid, original)
        if not self._owned:
            self._unguard()

    def _guard(self) -> None:
        """While this process owns a GPU's limit: restore at interpreter exit, and on SIGTERM
        restore first, then do what was to be done (the handler before ours, or the default:
        end the process). A process forked from this one (a DataLoader worker, which inherits
        the handler, and gets SIGTERM too when a scheduler signals the whole job) owns nothing:
        it does only the latter. Only the main thread can install a signal handler."""
        if not self._at_exit:
            atexit.register(self.restore)
            self._at_exit = True
        if self._on_sigterm is not None:
            return
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        pid = os.getpid()

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            if os.getpid() == pid:  # not in a forked child (a DataLoader worker): no owner
                self.restore()
            signal.signal(signal.SIGTERM, previous)
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
        self._on_sigterm, self._previous_sigterm = on_sigterm, previous

    def _unguard(self) -> None:
        """Nothing owned any more: take back what `_guard` installed, so that a process that
        goes on (a notebook, the next recurrence) keeps neither; a SIGTERM handler installed
        after ours stays. From another thread the handler stays, harmless: restoring again
        does nothing, and it hands the signal on."""
        if self._at_exit:
            atexit.unregister(self.restore)
            self._at_exit = False
        if self._on_sigterm is None or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        self._on_sigterm = self._previous_sigterm = None


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    try:
        current, _ = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:
        return False  # a GPU without MIG
    return bool(current)


def restore_orphaned(records: Path) -> list[str]:
    """Restore the GPUs of this node whose records' owners are gone (killed before they could
    restore), and delete those records. Returns their UUIDs."""
    if not records.is_dir():
        return []
    found = sorted(records.glob("*.json"))
    if not found:
        return []
    restored = []
    nvml: Any = None
    for path in found:
        try:
            record = json.loads(path.read_text())
            pid, original = int(record["pid"]), float(record["original_w"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        started = record.get("started")
        owner_runs = _alive(pid, started if isinstance(started, str) else None)
        if record.get("host") not in (None, socket.gethostname()) or owner_runs:
            continue
        if nvml is None:
            nvml = _nvml()
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(path.stem)
            nvml.nvmlDeviceSetPowerManagementLimit(handle, round(original * 1000))
        except nvml.NVMLError as err:
            logger.error("could not restore GPU %s to %g W: %s", path.stem, original, err)
            continue
        path.unlink(missing_ok=True)
        logger.warning(
            "zeus-bso: GPU %s is back at %g W: process %d changed its power limit and ended "
            "without restoring it",
            path.stem,
            original,
            pid,
        )
        restored.append(path.stem)
    return restored
