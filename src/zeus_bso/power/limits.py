"""The power limits of a process's GPUs, through NVML: read, set, and always restored.

Before a GPU's limit is first changed, a record of it is written in the node's folder
(`zeus_bso.power.records`: one file per GPU, written whole and exclusively): the process that
creates it owns that GPU's limit for the run, and another process of the node that trains on the
same GPU leaves it alone (a node's GPU is set once). A GPU goes back to the operator's limit, else
its default, never to a cap found on it. `GpuPowerLimits.restore` puts every owned GPU back and
deletes its record; it runs at the end of a run, on an exception, when the trial's lease is lost,
on SIGTERM (unless it is ignored: then it ends nothing), on every other signal whose default
would end the process (SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM), and at interpreter exit
(hooks of `zeus_bso.exits`). What kills the process outright (SIGKILL,
the out-of-memory killer, an abort in C) is the run's watchdog's (`zeus_bso.power.watchdog`),
which restores as soon as the process is gone; what takes the watchdog down too (a container's
end) is for ``zeus-bso power restore`` on the node, and for `restore_orphaned` at the start of
the node's next run.

Without the permission to set limits (NVML's ``NO_PERMISSION``: the process lacks
``CAP_SYS_ADMIN``) nothing is set and `GpuPowerLimits.advisory` is True: the caller logs the
recommended limit instead. A GPU in MIG mode, or one that other processes compute on, is
refused with `PowerLimitError`: its limit is not this run's alone.
"""

from __future__ import annotations

import logging
import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeus_bso import exits
from zeus_bso.energy.device_meter import tried
from zeus_bso.energy.nvml import nvml_text, pynvml_module, visible_handles
from zeus_bso.energy.sharing import mig_enabled, strangers
from zeus_bso.errors import EnergyMeterError, PowerLimitError, UnmeasurableDeviceError
from zeus_bso.power import records as node
from zeus_bso.power.profiler import counter_period_s

logger = logging.getLogger(__name__)

LIMIT_STEP_W = 25.0
"""Watts between the limits profiled, from the maximum down (upstream Zeus's default)."""
WATCHDOG_START_S = 10.0
"""How long a run waits for its watchdog to say it watches (it goes on regardless)."""
ENDING_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
    if hasattr(signal, name)
)
"""Signals besides SIGTERM whose default ends the process: where nothing else handles them,
the limits are restored first (SIGINT raises ``KeyboardInterrupt``, which every exit path
restores on). SIGABRT is left to the watchdog: an abort in C never returns to Python, and a
handler here would take it from ``faulthandler``."""


@dataclass(frozen=True, slots=True)
class _Gpu:
    handle: Any
    uuid: str
    min_w: float
    max_w: float


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the process's name (None where that cannot be
    read: no such process, or no ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()  # the name, in parentheses, may hold spaces


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot, from ``/proc``), or None where that
    cannot be read: it tells a process from a later one that was given the same PID."""
    fields = _stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _alive(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` runs (a zombie, ended and not yet reaped, does not), and is the
    one that started at ``started`` (if given and readable): a PID reused by another process is
    not the owner."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    fields = _stat(pid)
    if fields and fields[0] in ("Z", "X"):  # ended: its parent has not reaped it yet
        return False
    now = fields[19] if started is not None and fields is not None and len(fields) > 19 else None
    return now is None or now == started


def _nvml(*, restoring: bool = False) -> Any:
    """NVML, initialised; a `PowerLimitError` (a usage error, raised alike on every process)
    where it is missing or cannot start, saying what a run (or ``restoring``, an operator's
    `restore_gpus`) can do instead."""
    instead = "" if restoring else " or train without power_limit='optimize'"
    try:
        nvml = pynvml_module()
    except EnergyMeterError as err:
        said = f"power limits need NVML: {err}" + (f";{instead}" if instead else "")
        raise PowerLimitError(said) from err
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise PowerLimitError(
            f"power limits need NVML, which cannot start here ({err}): on a machine with "
            f"NVIDIA GPUs and their driver" + (f",{instead}" if instead else "")
        ) from err
    return nvml


def gpus_here() -> int:
    """How many GPUs NVML sees in this process (those ``CUDA_VISIBLE_DEVICES`` leaves
    visible). NVML stays initialised (a run's meter and limits use it next).

    Raises:
        PowerLimitError: NVML is missing or cannot start here, or the process trains on a MIG
            slice (whose limit is the whole GPU's, which other jobs share).
    """
    try:
        return len(visible_handles(_nvml()))
    except UnmeasurableDeviceError as err:
        raise PowerLimitError(f"power_limit='optimize' sets whole GPUs' limits: {err}") from err


def _own_handles(nvml: Any, gpu_indices: list[int] | None) -> list[Any]:
    """The GPUs this process trains on: those given (NVML indices); else, with CUDA up, its
    current device; else, in a multi-process launch, the visible GPU of its local rank (a
    launcher that does not say how many processes a node runs, Lightning's, is taken as one
    process a GPU where the world has several); else every visible GPU."""
    if gpu_indices:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in gpu_indices]
    visible = visible_handles(nvml)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        index = torch.cuda.current_device()
        if 0 <= index < len(visible):
            return [visible[index]]
    local = os.environ.get("LOCAL_RANK")
    several = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 1) > 1
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
                if mig_enabled(nvml, handle):
                    raise PowerLimitError(
                        f"GPU {uuid} is in MIG mode: its power limit is every slice's; train "
                        "without power_limit='optimize' there"
                    )
                if others := strangers(nvml, handle, ours):
                    raise PowerLimitError(
                        f"GPU {uuid} is shared with {' and '.join(others)}: its power limit "
                        "would be theirs as well; train without "
                        "power_limit='optimize' there, or on a GPU of its own"
                    )
                low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
                gpus.append(_Gpu(handle, uuid, low / 1000.0, high / 1000.0))
        except nvml.NVMLError as err:
            raise PowerLimitError(f"NVML could not read the GPUs' power limits: {err}") from err
        if not gpus:
            raise PowerLimitError("this process sees no GPU whose power limit it could set")
        self._gpus = gpus
        self._guarded = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        # Now, before training: its start (a Python process) would slow a profiled step.
        self._start_watchdog()

    @property
    def uuids(self) -> list[str]:
        """The GPUs, by UUID."""
        return [gpu.uuid for gpu in self._gpus]

    def range_w(self) -> tuple[float, float]:
        """The lowest and highest limit every GPU takes (W)."""
        return max(gpu.min_w for gpu in self._gpus), min(gpu.max_w for gpu in self._gpus)

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
        """The GPUs' energy counters together (J; GPUs older than Volta have none: 0; NaN: a
        counter failed every read, `zeus_bso.energy.device_meter.tried`'s, as a loaded
        driver's may for a moment)."""

        def read() -> float:
            total = 0.0
            for gpu in self._gpus:
                try:
                    total += self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle) / 1000.0
                except self._nvml.NVMLError as err:
                    if getattr(err, "value", None) == self._nvml.NVML_ERROR_NOT_SUPPORTED:
                        return 0.0  # no counter: nothing to read again
                    raise
            return total

        try:
            return tried(read, (self._nvml.NVMLError,))
        except self._nvml.NVMLError:
            return math.nan

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
        the node owns (a record of each one first, and the run's watchdog). Returns False in
        advisory mode (no permission: nothing set)."""
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
        """Write the record of ``gpu``, exclusively; whether this process owns it. A record
        whose owner is gone, or that cannot be read, is reported and taken over."""
        found = self._nvml.nvmlDeviceGetPowerManagementLimit(gpu.handle) / 1000.0
        operator = node.operator_limits(self._records)
        target, why = node.target_of(self._nvml, gpu.handle, gpu.uuid, operator)
        if found < target - 0.5:
            logger.warning(
                "zeus-bso: GPU %s is at %g W, below the %g W it goes back to (%s), with no run "
                "of this node owning it: something left it capped; it goes back to %g W at the "
                "end of this run",
                gpu.uuid,
                found,
                target,
                why,
                target,
            )
        me = os.getpid()
        record = node.Record(
            gpu.uuid, target, found, me, _started(me), socket.gethostname(), node.pid_namespace()
        )
        self._start_watchdog()  # (again, after a restore) before the record
        for _attempt in range(2):
            if node.create(self._records, record):
                self._owned[gpu.uuid] = target
                return True
            if not self._take_over(gpu):
                return False
        return False

    def _take_over(self, gpu: _Gpu) -> bool:
        """A record of ``gpu`` exists: whether it was left (its owner is gone, or it cannot be
        read) and is now removed, for this process to own the GPU."""
        path = node.path_of(self._records, gpu.uuid)
        try:
            record = node.read(path)
        except FileNotFoundError:
            return True  # its owner restored in between
        except node.UnreadableRecordError as err:
            logger.warning(
                "zeus-bso: %s: this run sets GPU %s and profiles it, and puts it back at the end",
                err,
                gpu.uuid,
            )
            node.remove(self._records, gpu.uuid)
            return True
        if record.mine() and _alive(record.pid, record.started):
            return False
        node.remove(self._records, gpu.uuid)  # left by a run that ended: this one's now
        return True

    def _start_watchdog(self) -> None:
        """Start the run's watchdog (once), which restores the GPUs this process owns when it
        ends by any means (`zeus_bso.power.watchdog`)."""
        if self._watchdog is not None:
            return
        command = [sys.executable, "-m", "zeus_bso.power.watchdog", "--pid", str(os.getpid())]
        try:
            self._watchdog = subprocess.Popen(
                [*command, "--records", str(self._records)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,  # a signal to the job's process group is not its
                close_fds=True,
            )
            # Its start (a Python process) is over before this one goes on to measure steps.
            assert self._watchdog.stdout is not None
            ready, _, _ = select.select([self._watchdog.stdout], [], [], WATCHDOG_START_S)
            if ready:
                self._watchdog.stdout.readline()
        except OSError as err:
            logger.warning(
                "zeus-bso: the power-limit watchdog did not start (%s): if this process is "
                "killed, its GPUs are restored by the node's next run or `zeus-bso power "
                "restore`",
                err,
            )

    def _stop_watchdog(self) -> None:
        """Everything is restored: the watchdog is told, and ends."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is None or watchdog.stdin is None:
            return
        try:
            watchdog.stdin.write(b"done\n")
            watchdog.stdin.close()
            watchdog.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            watchdog.kill()
        if watchdog.stdout is not None:
            watchdog.stdout.close()

    def restore(self) -> None:
        """Put every owned GPU back to its target (the operator's limit, else its default) and
        delete its record (again: nothing to do)."""
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
                        "could not restore GPU %s to %g W (%s): its record stays, for the "
                        "watchdog, the next run or `zeus-bso power restore`",
                        gpu.uuid,
                        original,
                        err,
                    )
                    continue
            node.remove(self._records, gpu.uuid)
            logger.info("GPU %s is back at %g W", gpu.uuid, original)
        if not self._owned:
            self._unguard()

    def _guard(self) -> None:
        """While this process owns a GPU's limit: restore at interpreter exit, on SIGTERM, and
        on the other signals that would end the process by default and that nothing else
        handles (`ENDING_SIGNALS`), before the signal does what it does (`zeus_bso.exits`: a
        forked child, such as a DataLoader worker, which inherits the handlers, owns nothing
        and only hands the signal on)."""
        if self._guarded:
            return
        exits.at_exit(self.restore)
        exits.on_signal(signal.SIGTERM, self._restore_on_signal)
        for signum in ENDING_SIGNALS:
            exits.on_signal(signum, self._restore_on_signal, unhandled_only=True)
        self._guarded = True

    def _restore_on_signal(self) -> None:
        self.restore()

    def _unguard(self) -> None:
        """Nothing owned any more: take back what `_guard` added, so that a process that goes on
        (a notebook, the next recurrence) keeps none of it, and stop the watchdog."""
        self._stop_watchdog()
        if not self._guarded:
            return
        exits.forget_at_exit(self.restore)
        for signum in (signal.SIGTERM, *ENDING_SIGNALS):
            exits.forget_signal(signum, self._restore_on_signal)
        self._guarded = False


def restore_orphaned(records: Path, owner: int | None = None) -> list[str]:
    """Restore the GPUs of this node whose records' owners are gone (killed before they could
    restore; ``owner``: only that process's), and delete those records; a record that cannot be
    read is reported, and its GPU restored too. Returns their UUIDs."""
    if not records.is_dir():
        return []
    found = sorted(p for p in records.glob("*.json") if p.name != node.OPERATOR_FILE)
    if not found:
        return []
    restored = []
    nvml: Any = None
    for path in found:
        try:
            record: node.Record | None = node.read(path)
        except FileNotFoundError:
            continue  # its owner restored in between
        except node.UnreadableRecordError as err:
            if owner is not None:
                continue  # a watchdog restores its own run's
            logger.warning("zeus-bso: %s: its GPU goes back to its target", err)
            record = None
        if record is not None:
            if owner is not None and record.pid != owner:
                continue
            if not record.mine() or _alive(record.pid, record.started):
                continue
        if nvml is None:
            nvml = _nvml()
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(path.stem)
            target = (
                record.target_w
                if record is not None
                else node.target_of(nvml, handle, path.stem, node.operator_limits(records))[0]
            )
            nvml.nvmlDeviceSetPowerManagementLimit(handle, round(target * 1000))
        except nvml.NVMLError as err:
            logger.error("could not restore GPU %s: %s", path.stem, err)
            continue
        path.unlink(missing_ok=True)
        logger.warning(
            "zeus-bso: GPU %s is back at %g W: %s changed its power limit and ended without "
            "restoring it",
            path.stem,
            target,
            f"process {record.pid}" if record is not None else "a run",
        )
        restored.append(path.stem)
    return restored


@dataclass(frozen=True, slots=True)
class Restored:
    """What `restore_gpus` did to one GPU."""

    uuid: str
    before_w: float
    after_w: float
    why: str
    """Where the limit it went back to came from (its record, the operator's, its default)."""
    error: str | None = None


def restore_gpus(records: Path, uuids: Collection[str] | None = None) -> list[Restored]:
    """Put GPUs of this node back at their targets (their record's, else the operator's limit,
    else their default) and delete their records, whoever set them: for a scheduler's epilog
    or a container's preStop hook, after the runs. ``uuids``: those GPUs (default: every GPU of
    the node, whatever ``CUDA_VISIBLE_DEVICES`` says).

    Raises:
        PowerLimitError: no NVML, or ``uuids`` names a GPU the node does not have.
    """
    nvml = _nvml(restoring=True)
    handles = {}
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            handles[nvml_text(nvml.nvmlDeviceGetUUID(handle))] = handle
    except nvml.NVMLError as err:
        raise PowerLimitError(f"NVML could not list the GPUs: {err}") from err
    chosen = list(handles) if uuids is None else list(uuids)
    unknown = [uuid for uuid in chosen if uuid not in handles]
    if unknown:
        raise PowerLimitError(
            f"no GPU {', '.join(unknown)} on this node; it has {', '.join(handles) or 'none'}"
        )
    operator = node.operator_limits(records)
    done = []
    for uuid in chosen:
        handle = handles[uuid]
        target, why = node.target_of(nvml, handle, uuid, operator)
        try:
            record = node.read(node.path_of(records, uuid))
            target, why = record.target_w, f"the record of process {record.pid}"
        except FileNotFoundError:
            pass
        except node.UnreadableRecordError as err:
            logger.warning("zeus-bso: %s: GPU %s goes back to %s", err, uuid, why)
        try:
            before = nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
            if round(before * 1000) != round(target * 1000):
                nvml.nvmlDeviceSetPowerManagementLimit(handle, round(target * 1000))
        except nvml.NVMLError as err:
            hint = ""
            if getattr(err, "value", None) == nvml.NVML_ERROR_NO_PERMISSION:
                hint = " (setting a power limit needs root: CAP_SYS_ADMIN)"
            done.append(Restored(uuid, float("nan"), target, why, f"{err}{hint}"))
            continue
        node.remove(records, uuid)
        done.append(Restored(uuid, before, target, why))
    return done
