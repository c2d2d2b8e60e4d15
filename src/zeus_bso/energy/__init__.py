"""Energy meters, one module each, all sharing `EnergyMeter`; `auto_meter` picks the first of
`zeus_bso.energy.auto.METERS` that works here, else a labelled estimate (`EstimateMeter`);
`device_meter` measures the one GPU a process trains on, `process_meter` a launched process's.
"""

from zeus_bso.energy.auto import auto_meter, device_meter, process_meter, say_every_gpu
from zeus_bso.energy.base import Device, EnergyMeter, ProcessMeter
from zeus_bso.energy.devices import run_energy, run_gpus
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
    "ProcessMeter",
    "RAPLMeter",
    "UnmeasurableDeviceError",
    "ZeusMeter",
    "auto_meter",
    "device_meter",
    "process_meter",
    "run_energy",
    "run_gpus",
    "say_every_gpu",
]
