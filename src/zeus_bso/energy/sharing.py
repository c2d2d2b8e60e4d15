"""Whether processes other than a run's compute on a GPU (`strangers`): its power limit would be
theirs too, and its energy counter counts their work in the run's (`shared_gpus`).

NVML lists the processes that hold a context on a GPU by their process IDs in the host's PID
namespace on many drivers (which knew no other; recent ones translate some calls' IDs). In a
container with a PID namespace of its own (Docker's and Kubernetes' default) those are not the
numbers the run's processes have there, and a run that had initialised CUDA found itself
"another process". Where NVML lists a process that is not one of the run's, the processes this
namespace can see with the GPU's device file open (`DEVICE_FILE`) are counted instead: NVML's
list is the run's where it holds no more processes than those, and they are all the run's.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from zeus_bso.energy.nvml import NVMLMeter, nvml_text, pynvml_module, visible_handles

MPS_SERVER = "nvidia-cuda-mps-server"
"""The name NVML gives the process through which MPS clients compute on a GPU."""
DEVICE_FILE = "/dev/nvidia{minor}"
"""The device file of the GPU of a minor number, which a process with a context on it holds open."""
PROC = Path("/proc")
SHARED = " is shared with "
"""What `unsettable_now` says between a GPU and the processes that share it."""


def strangers(nvml: Any, handle: Any, ours: Collection[int]) -> list[str]:
    """The processes that compute on the GPU of ``handle`` and are not among ``ours`` (this
    run's process IDs, as this process sees them), each as a phrase for a message ("process
    123", "2 processes this one cannot see (...)", "the MPS server (...)": NVML lists the
    server through which MPS clients compute, whichever client this run is); [] where the GPU
    is the run's alone."""
    listed = sorted(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    unknown = [pid for pid in listed if pid not in ours]
    if not unknown:
        return []
    if any(_named(nvml, pid).endswith(MPS_SERVER) for pid in unknown):
        return ["the MPS server (the GPU is shared through MPS: its limit is every client's)"]
    users = holding(DEVICE_FILE.format(minor=nvml.nvmlDeviceGetMinorNumber(handle)))
    here = sorted(pid for pid in users if not runs(pid, ours))
    if here:
        return [f"process {pid}" for pid in here]
    if len(listed) <= len(users):
        return []  # the run's processes, numbered in the host's PID namespace
    outside = len(listed) - len(users)
    many = "es" if outside > 1 else ""
    return [f"{outside} process{many} this one cannot see (another container's or user's)"]


def shared_gpus(meter: NVMLMeter, ours: Collection[int]) -> dict[str, list[str]]:
    """The GPUs of ``meter`` that processes other than ``ours`` compute on, by device key (UUID),
    each with the phrases of `strangers`; a GPU NVML (or ``/proc``) cannot say of is left out:
    a run asks at each report, and the answer never stops its training."""
    nvml = pynvml_module()
    found = {}
    for handle, device in zip(meter.handles, meter.devices, strict=True):
        try:
            others = strangers(nvml, handle, ours)
        except (nvml.NVMLError, OSError):
            continue
        if others:
            found[device.key] = others
    return found


def _named(nvml: Any, pid: int) -> str:
    """What NVML names process ``pid`` (in the host's PID namespace); "" where it cannot."""
    try:
        return nvml_text(nvml.nvmlSystemGetProcessName(pid))
    except nvml.NVMLError:
        return ""


def runs(pid: int, ours: Collection[int]) -> bool:
    """Whether process ``pid`` is one of ``ours`` or started by one (a DataLoader's worker,
    forked, holds the device files its parent opened)."""
    seen = set()
    while pid > 1 and pid not in seen:
        if pid in ours:
            return True
        seen.add(pid)
        try:
            stat = (PROC / str(pid) / "stat").read_text()
        except OSError:  # gone, or not ours to read
            return False
        pid = int(stat[stat.rindex(")") + 1 :].split()[1])  # after the name: state, parent
    return False


def holding(device: str) -> set[int]:
    """The processes this PID namespace can see whose open files include ``device`` (those
    whose files it may not read are not among them)."""
    found = set()
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == device:
                    found.add(int(entry.name))
                    break
            except OSError:  # closed meanwhile
                continue
    return found


def mig_enabled(nvml: Any, handle: Any) -> bool:
    """Whether the GPU of ``handle`` is in MIG mode (its limit is every slice's)."""
    try:
        current, _ = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:
        return False  # a GPU without MIG
    return bool(current)


def unsettable_now(nvml: Any) -> list[str]:
    """Why a run of this process could not set a visible GPU's limit now, one phrase a GPU that
    it could not ("GPU-... is in MIG mode", "GPU-... is shared with process 123"): what
    ``zeus-bso check`` says, reading only."""
    found = []
    for handle in visible_handles(nvml):
        uuid = nvml_text(nvml.nvmlDeviceGetUUID(handle))
        if mig_enabled(nvml, handle):
            found.append(f"{uuid} is in MIG mode")
        elif others := strangers(nvml, handle, {os.getpid()}):
            found.append(f"{uuid}{SHARED}{' and '.join(others)}")
    return found
