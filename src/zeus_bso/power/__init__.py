"""GPU power limits (opt-in: ``power_limit="optimize"``): the Zeus paper's first-epoch
profiling. `GpuPowerLimits` reads and sets the limits of a process's GPUs through NVML and
restores them, recording each change on the node so that a run killed before it could restore
is put right by the next one; `PowerProfiler` steps through the limits in a batch size's first
epoch and measures each one's step. Which limit to train at is the server's choice
(`zeus_bso.policy.power`)."""

from zeus_bso.power.limits import GpuPowerLimits, restore_orphaned
from zeus_bso.power.profiler import PowerProfiler

__all__ = ["GpuPowerLimits", "PowerProfiler", "restore_orphaned"]
