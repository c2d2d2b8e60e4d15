"""GPU power limits (opt-in: ``power_limit="optimize"``): the Zeus paper's first-epoch
profiling. `GpuPowerLimits` reads and sets the limits of a process's GPUs through NVML and
restores them, recording each change on the node (`zeus_bso.power.records`) and leaving a
watchdog (`zeus_bso.power.watchdog`) to restore them if the process is killed; `PowerProfiler`
steps through the limits in a batch size's first epoch and measures each one's step. Which limit
to train at is the server's choice (`zeus_bso.policy.power`).

Names are imported when first asked for: the watchdog, a process of its own, starts with none of
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zeus_bso.lazy import lazy_names

if TYPE_CHECKING:
    from zeus_bso.power.limits import GpuPowerLimits, restore_orphaned
    from zeus_bso.power.profiler import PowerProfiler

_LAZY = {
    "GpuPowerLimits": "zeus_bso.power.limits",
    "restore_orphaned": "zeus_bso.power.limits",
    "PowerProfiler": "zeus_bso.power.profiler",
}


__getattr__ = lazy_names(__name__, _LAZY, globals())

__all__ = ["GpuPowerLimits", "PowerProfiler", "restore_orphaned"]
