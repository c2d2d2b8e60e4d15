"""GPUs here that no meter measures (their vendor's bindings not installed, most often): a run
would measure its CPU packages (RAPL) or estimate its energy from its time, and the server would
learn the batch size that saves that, not the GPUs' energy. The GPUs are what the kernel's
drivers show the process (NVIDIA's ``/dev/nvidiaN`` files, AMD's KFD topology nodes), less those
the visible-devices variables hide, read without CUDA or ROCm: a process forked after either
started could not use it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from zeus_bso.energy.base import EnergyMeter
from zeus_bso.energy.estimate import DEFAULT_WATTS
from zeus_bso.energy.nvml import INSTALL_HINT as NVML_INSTALL_HINT
from zeus_bso.energy.upstream_zeus import INSTALL_HINT as ZEUS_INSTALL_HINT

DEVICE_FILES = Path("/dev")
"""Where NVIDIA's kernel driver puts a file for each GPU (``nvidia0``, ``nvidia1``...)."""

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
"""AMD's kernel driver's topology: a node each CPU and GPU, a GPU's with a nonzero ``gpu_id``."""

NOT_GPU_METERS = ("rapl", "estimate")

NVML_LIBRARY_MISSING = "Shared Library Not Found"
"""NVML's error where its bindings are installed but the driver's library is not: a container
the NVIDIA Container Toolkit gave GPUs without the driver's utilities."""


@dataclass(frozen=True, slots=True)
class GpusHere:
    """GPUs of one vendor that a process here may train on, and what would measure them."""

    vendor: str
    count: int
    meter: str
    """The meter's name in its error (`zeus_bso.energy.auto.choose_meter`'s reasons)."""
    fix: str


def _visible(found: int, variables: tuple[str, ...]) -> int:
    """Of ``found`` GPUs, those the first of ``variables`` that is set names (none where it is
    empty or starts with -1); all where none is set."""
    for variable in variables:
        value = os.environ.get(variable)
        if value is not None:
            named = [part.strip() for part in value.split(",")]
            if not named[0] or named[0].startswith("-1"):
                return 0
            return min(found, len(named))
    return found


def nvidia_gpus_here(devices: Path | None = None) -> int:
    """The NVIDIA GPUs the kernel shows this process (a ``/dev/nvidiaN`` file each, as in a
    container given GPUs) that ``CUDA_VISIBLE_DEVICES`` leaves."""
    found = len(list((devices or DEVICE_FILES).glob("nvidia[0-9]*")))
    return _visible(found, ("CUDA_VISIBLE_DEVICES",))


def amd_gpus_here(nodes: Path | None = None) -> int:
    """The AMD GPUs the kernel shows this process (KFD topology nodes with a ``gpu_id``) that
    ``HIP_VISIBLE_DEVICES`` (else ``ROCR_VISIBLE_DEVICES``, else ``CUDA_VISIBLE_DEVICES``)
    leaves."""
    found = 0
    for node in (nodes or KFD_NODES).glob("*"):
        try:
            found += int((node / "gpu_id").read_text().strip() or 0) != 0
        except (OSError, ValueError):
            continue
    return _visible(found, ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"))


def nvidia(count: int) -> GpusHere:
    """``count`` NVIDIA GPUs, measured by NVML."""
    return GpusHere("NVIDIA", count, "NVML", f"install NVML's bindings ({NVML_INSTALL_HINT})")


def amd(count: int) -> GpusHere:
    """``count`` AMD GPUs, measured by upstream Zeus's meter."""
    return GpusHere("AMD", count, "Zeus", f"install upstream Zeus ({ZEUS_INSTALL_HINT}) and amdsmi")


def gpus_here() -> GpusHere | None:
    """The GPUs a process here may train on (NVIDIA's, else AMD's); None: none."""
    if (count := nvidia_gpus_here()) > 0:
        return nvidia(count)
    if (count := amd_gpus_here()) > 0:
        return amd(count)
    return None


def unmeasured_gpus(
    meter: EnergyMeter | None,
    gpus: GpusHere | None,
    reasons: list[str],
    watts: float = DEFAULT_WATTS,
) -> str | None:
    """What a run here would measure instead of ``gpus`` with ``meter`` (None: an estimate of
    ``watts``), where that is not a GPU's meter, and why the GPUs' meter cannot (the reason of
    ``reasons`` that names it). None: no GPUs, or a meter that measures them."""
    if gpus is None or gpus.count <= 0:
        return None
    if meter is not None and meter.name not in NOT_GPU_METERS:
        return None
    instead = (
        "the CPU packages' (RAPL)" if meter is not None else f"ESTIMATED as time x {watts:g} W"
    )
    why = next((reason for reason in reasons if gpus.meter in reason), "no GPU meter works here")
    fix = gpus.fix
    if gpus.vendor == "NVIDIA" and NVML_LIBRARY_MISSING in why:
        fix = (
            "give the process the driver's NVML library (a container: "
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility, or all)"
        )
    several = gpus.count > 1
    return (
        f"{gpus.count} {gpus.vendor} GPU{'s' if several else ''} here, but no meter measures "
        f"{'them' if several else 'it'} ({why}): a run's energy would be {instead}, not the "
        f"GPUs', and the server would learn the batch size that saves that. To measure them, "
        f"{fix}, or pass energy_meter=... to measure what you mean to"
    )
