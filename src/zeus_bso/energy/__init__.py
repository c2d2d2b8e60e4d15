"""Energy meters: NVML (NVIDIA GPUs), upstream Zeus's devices (AMD, Jetson, Apple Silicon, Grace
Hopper; the ``zeus`` extra), RAPL (CPU package energy), and a labelled estimate.

All share `EnergyMeter`; `auto_meter` picks the first that works here.
"""

from zeus_bso.energy.auto import auto_meter
from zeus_bso.energy.base import EnergyMeter
from zeus_bso.energy.devices import Device, run_energy, run_gpus
from zeus_bso.energy.estimate import EstimateMeter
from zeus_bso.energy.nvml import NVMLMeter
from zeus_bso.energy.rapl import RAPLMeter
from zeus_bso.energy.upstream_zeus import ZeusMeter
from zeus_bso.errors import EnergyMeterError, MixedGpuModelsError, UnmeasurableDeviceError

__all__ = [
    "Device",
    "EnergyMeter",
    "EnergyMeterError",
    "EstimateMeter",
    "MixedGpuModelsError",
    "NVMLMeter",
    "RAPLMeter",
    "UnmeasurableDeviceError",
    "ZeusMeter",
    "auto_meter",
    "run_energy",
    "run_gpus",
]
