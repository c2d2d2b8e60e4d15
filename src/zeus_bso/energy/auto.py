"""Choose an energy meter: the first of `METERS` that measures here, else a labelled estimate."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from zeus_bso.energy.base import EnergyMeter
from zeus_bso.energy.estimate import DEFAULT_WATTS, EstimateMeter
from zeus_bso.energy.nvml import NVMLMeter, visible_uuid
from zeus_bso.energy.rapl import RAPLMeter
from zeus_bso.energy.unmeasured import gpus_here, nvidia, unmeasured_gpus
from zeus_bso.energy.upstream_zeus import ZeusMeter
from zeus_bso.errors import EnergyMeterError, MixedGpuModelsError, UnmeasurableDeviceError

logger = logging.getLogger(__name__)

METERS: tuple[Callable[[list[int] | None], EnergyMeter], ...] = (
    lambda gpu_indices: NVMLMeter(gpu_indices),  # NVIDIA GPUs
    lambda gpu_indices: ZeusMeter(gpu_indices),  # AMD, Jetson, Apple Silicon: the zeus extra
    lambda gpu_indices: RAPLMeter(),  # CPU packages
)
"""The meters `auto_meter` tries, in order: each is built from the GPU indices to measure, and
raises `EnergyMeterError` where it cannot measure."""


_UNMEASURED_SAID = False


def auto_meter(
    gpu_indices: list[int] | None = None,
    estimate_watts: float = DEFAULT_WATTS,
    *,
    on_gpus: bool | None = None,
) -> EnergyMeter:
    """The first meter of `METERS` that works here, else an estimate of ``estimate_watts``.
    Where the process may train on GPUs that none of them measures (``on_gpus``: it does, on
    one, or not; None: where the kernel shows any, `zeus_bso.energy.unmeasured.gpus_here`), it
    warns, once a process and only on a node's first (``LOCAL_RANK`` unset or 0: the others'
    would say the same) (`zeus_bso.energy.unmeasured.unmeasured_gpus`).

    Mixed GPU models and a MIG slice are errors, not reasons to fall back.
    """
    global _UNMEASURED_SAID
    meter, reasons = choose_meter(gpu_indices)
    gpus = None if on_gpus is False else gpus_here()
    if on_gpus:  # the one GPU it trains on (NVIDIA's, where the kernel shows no AMD one)
        gpus = nvidia(1) if gpus is None else replace(gpus, count=1)
    unmeasured = unmeasured_gpus(meter, gpus, reasons, estimate_watts)
    first_here = os.environ.get("LOCAL_RANK", "0") == "0"
    if unmeasured is not None and not _UNMEASURED_SAID and first_here:
        _UNMEASURED_SAID = True
        logger.warning("zeus-bso: %s", unmeasured)
    if meter is None:
        logger.info("no energy counter: %s", "; ".join(reasons))
        return EstimateMeter(estimate_watts, announce=unmeasured is None)
    logger.info("measuring energy with %s (%s)", meter.name, meter.device_model)
    return meter


def choose_meter(gpu_indices: list[int] | None = None) -> tuple[EnergyMeter | None, list[str]]:
    """The first meter of `METERS` that works here (None: none does), and why each one before
    it cannot measure here.

    Raises:
        MixedGpuModelsError, UnmeasurableDeviceError: as `auto_meter`.
    """
    reasons: list[str] = []
    for make in METERS:
        try:
            return make(gpu_indices), reasons
        except (MixedGpuModelsError, UnmeasurableDeviceError):
            raise
        except EnergyMeterError as err:
            reasons.append(str(err))
    return None, reasons


def device_meter(device: Any, estimate_watts: float = DEFAULT_WATTS) -> EnergyMeter:
    """The meter of a process that trains on the one torch ``device``: on a CUDA device, NVML's
    of that GPU alone (found by the UUID torch and NVML both give it), so that a process
    training on one GPU of several it sees (``Trainer(devices=1)`` on an eight-GPU machine,
    ``CUDA_VISIBLE_DEVICES`` unset) counts that one; elsewhere, or where torch or NVML cannot
    say which GPU it is, `auto_meter` (every visible GPU)."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(device, "type", None) == "cuda":

        def uuid() -> str:
            index = device.index if device.index is not None else torch.cuda.current_device()
            return str(torch.cuda.get_device_properties(index).uuid)

        meter = _one_gpu(uuid, str(device))
        if meter is not None:
            return meter
    on_gpus = getattr(device, "type", None) == "cuda"
    return auto_meter(estimate_watts=estimate_watts, on_gpus=on_gpus)


def process_meter(estimate_watts: float = DEFAULT_WATTS) -> EnergyMeter:
    """The meter of a run's process where none is given: in a launch of several processes on
    this node (``LOCAL_WORLD_SIZE`` above 1: ``torchrun``, ``accelerate launch``), NVML's of the
    visible GPU of its local rank, the one such a process trains on (a node of eight GPUs
    running two processes counts two); otherwise, or where that GPU cannot be found,
    `auto_meter` (every visible GPU: one process may train on several, through the HF
    Trainer's ``DataParallel`` or a ``device_map``)."""
    local = os.environ.get("LOCAL_RANK", "")
    processes = os.environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and processes.isdigit() and int(processes) > 1:
        meter = _one_gpu(lambda: visible_uuid(int(local)), f"local rank {local}")
        if meter is not None:
            return meter
    return auto_meter(estimate_watts=estimate_watts)


def _one_gpu(uuid: Callable[[], str | None], of: str) -> EnergyMeter | None:
    """NVML's meter of the one GPU whose UUID ``uuid`` finds (``of``: whose GPU it is, for the
    log); None where it finds none, or torch or NVML cannot say (the caller measures every
    visible GPU)."""
    try:
        found = uuid()
        if found is None:
            return None
        meter = NVMLMeter(gpu_uuids=[found])
    except (EnergyMeterError, AttributeError, RuntimeError, AssertionError) as err:
        logger.info("measuring every visible GPU (not %s's alone: %s)", of, err)
        return None
    logger.info("measuring energy with nvml (%s, %s's GPU)", meter.device_model, of)
    return meter


def counts_every_gpu(meter: EnergyMeter) -> bool:
    """Whether ``meter`` measures several GPUs because nothing chose among them (NVML's, with
    ``CUDA_VISIBLE_DEVICES`` unset): a process that trains on fewer is charged them all."""
    return (
        meter.name == "nvml" and meter.device_count > 1 and "CUDA_VISIBLE_DEVICES" not in os.environ
    )


_EVERY_GPU_SAID = False


def say_every_gpu(meter: EnergyMeter) -> None:
    """Warn, once a process, where a meter chosen for it (`process_meter`) measures several
    GPUs because nothing chose among them (``CUDA_VISIBLE_DEVICES`` unset): a process that
    trains on one of them is charged them all, and registers them all as its GPUs."""
    global _EVERY_GPU_SAID
    if _EVERY_GPU_SAID or not counts_every_gpu(meter):
        return
    _EVERY_GPU_SAID = True
    logger.warning(
        "zeus-bso: this run measures every GPU this process sees, all %d (CUDA_VISIBLE_DEVICES "
        "is not set), and registers %d x %s. If it trains on fewer, set CUDA_VISIBLE_DEVICES to "
        "them (or pass energy_meter=NVMLMeter(gpu_indices=[...])); if it trains on all of them "
        "(DataParallel, a device_map), set CUDA_VISIBLE_DEVICES to all of them to say so",
        meter.device_count,
        meter.device_count,
        meter.device_model,
    )
