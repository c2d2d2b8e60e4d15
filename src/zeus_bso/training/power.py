"""A run's GPU power limits on every process of a distributed run (`PowerLimitRun` on each,
built at once: `power_limit_run`)."""

from __future__ import annotations

import os

from zeus_bso.client.power import records_folder
from zeus_bso.errors import PowerLimitError
from zeus_bso.power import GpuPowerLimits
from zeus_bso.power.run import PowerLimitRun
from zeus_bso.spec import GpuConfig
from zeus_bso.training.collectives import Collectives


def power_limit_run(
    collectives: Collectives,
    is_main: bool,
    run_gpus: GpuConfig,
    eta_knob: float,
    max_slowdown: float | None = None,
) -> PowerLimitRun:
    """This process's part of the run (every process calls it at once)."""
    pids = [int(p) for p in collectives.all_gather(os.getpid())]
    limits: GpuPowerLimits | None = None
    refused: str | None = None
    try:
        limits = GpuPowerLimits(records_folder(), run_pids=pids)
    except PowerLimitError as err:
        refused = str(err)
    said = [why for why in collectives.all_gather(refused) if why is not None]
    if said:  # on every process, so that none waits for the others in a collective
        raise PowerLimitError(said[0] if refused is None else refused)
    assert limits is not None
    return PowerLimitRun(is_main, limits, collectives.broadcast, run_gpus, eta_knob, max_slowdown)
