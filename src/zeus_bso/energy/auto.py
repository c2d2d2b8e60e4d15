"""Choose an energy meter: NVML, else upstream Zeus's devices (AMD, Jetson, Apple Silicon; when
the ``zeus`` extra is installed), else RAPL, else a labelled estimate."""

from __future__ import annotations

import logging

from zeus_bso.energy.base import EnergyMeter
from zeus_bso.energy.estimate import DEFAULT_WATTS, EstimateMeter
from zeus_bso.energy.nvml import NVMLMeter
from zeus_bso.energy.rapl import RAPLMeter
from zeus_bso.energy.upstream_zeus import ZeusMeter
from zeus_bso.errors import EnergyMeterError, MixedGpuModelsError, UnmeasurableDeviceError

logger = logging.getLogger(__name__)


def auto_meter(
    gpu_indices: list[int] | None = None, estimate_watts: float = DEFAULT_WATTS
) -> EnergyMeter:
    """The first meter that works here: NVML on NVIDIA GPUs; upstream Zeus's devices (AMD GPUs,
    Jetson, Apple Silicon) where ``zeus`` is installed; RAPL on the CPU; else an estimate.

    Mixed GPU models and a MIG slice are errors, not reasons to fall back.
    """
    reasons = []
    for make in (lambda: NVMLMeter(gpu_indices), lambda: ZeusMeter(gpu_indices), RAPLMeter):
        try:
            meter: EnergyMeter = make()
        except (MixedGpuModelsError, UnmeasurableDeviceError):
            raise
        except EnergyMeterError as err:
            reasons.append(str(err))
            continue
        logger.info("measuring energy with %s (%s)", meter.name, meter.device_model)
        return meter
    logger.info("no energy counter: %s", "; ".join(reasons))
    return EstimateMeter(estimate_watts)
