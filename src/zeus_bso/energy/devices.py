"""Devices by a name that is the same in every process, so that a run counts each one once.

Every rank of a distributed run measures with a meter of its own. Ranks on one node may see the
same GPUs (torchrun, Lightning and ``accelerate launch`` leave ``CUDA_VISIBLE_DEVICES`` alone), and
ranks on other nodes see other GPUs. Each meter names its devices (a GPU by its NVML UUID, a CPU
package by host and domain); a run gathers every rank's names and readings and counts each name
once: its GPU count, power and energy are those of the run, over all nodes.

Pure functions over what the ranks gathered; the collectives are the caller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from zeus_bso.energy.base import Device
from zeus_bso.errors import MixedGpuModelsError
from zeus_bso.spec import GpuConfig


def run_gpus(per_rank: Iterable[Sequence[Device]]) -> GpuConfig:
    """The run's GPUs from every rank's devices: each device once, their power limits added up.

    Raises:
        MixedGpuModelsError: the run trains on more than one model.
    """
    unique: dict[str, Device] = {}
    for devices in per_rank:
        for device in devices:
            unique.setdefault(device.key, device)
    if not unique:
        raise ValueError("no rank measures any device")
    models = sorted({device.model for device in unique.values()})
    if len(models) > 1:
        raise MixedGpuModelsError(models)
    return GpuConfig(
        gpu_model=models[0],
        number_of_gpus=len(unique),
        max_power=sum(device.max_power for device in unique.values()),
    )


def run_energy(per_rank: Iterable[Mapping[str, float]]) -> float:
    """The run's joules from every rank's readings: each device's once (the lowest rank's)."""
    unique: dict[str, float] = {}
    for readings in per_rank:
        for key, joules in readings.items():
            unique.setdefault(key, joules)
    return sum(unique.values())
