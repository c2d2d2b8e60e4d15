"""A run's GPU power limits on every process of a distributed run (`PowerLimitRun` on each,
built at once: `power_limit_run`), as the session holds them (`RunPower`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from zeus_bso.client.power import records_folder
from zeus_bso.errors import PowerLimitError
from zeus_bso.power import GpuPowerLimits
from zeus_bso.power.run import PowerLimitRun, Send
from zeus_bso.spec import GpuConfig, JobSpec
from zeus_bso.training.collectives import Collectives
from zeus_bso.training.shared_trial import PowerAnswer


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


@dataclass
class RunPower:
    """A run's GPU power limits on this process: the server's word (`answer`), taken when the
    run gets its trial, and this process's limits (`limits`, once the run started with
    ``power_limit="optimize"`` and a server that chooses them)."""

    optimize: bool
    """Whether the run opted in (``power_limit="optimize"``)."""
    answer: PowerAnswer | None = None
    """The server's limit and whether to profile (None: it chooses no power limits: it was not
    reached, or it is upstream's)."""
    limits: PowerLimitRun | None = None

    def start(
        self, collectives: Collectives, is_main: bool, run_gpus: GpuConfig, job: JobSpec
    ) -> None:
        """Take this process's limits, where the run opted in and the server chooses them
        (every process at once)."""
        if self.optimize and self.answer is not None:  # not offline, nor upstream's
            self.limits = power_limit_run(
                collectives, is_main, run_gpus, job.eta_knob, job.power_max_slowdown
            )

    def begin(self, send_profile: Send, steps_per_epoch: int | None) -> None:
        """Training starts: set the server's limit, or start profiling (once per run: the
        session calls it at its first ``train_begin``)."""
        if self.limits is not None and self.answer is not None:
            self.limits.begin(
                self.answer.limit, self.answer.profiling, send_profile, steps_per_epoch
            )

    def step_begin(self) -> None:
        if self.limits is not None:
            self.limits.step_begin()

    @property
    def profiling(self) -> bool:
        """Whether this process is profiling the limits (`PowerLimitRun.profiling`)."""
        return self.limits is not None and self.limits.profiling

    def step_end(self) -> float:
        """After a training step: the seconds the run waited on the server for its limit
        (`PowerLimitRun.step_end`)."""
        return 0.0 if self.limits is None else self.limits.step_end()

    def restore(self) -> None:
        """The GPUs' own power limits back (every exit path; again: nothing)."""
        if self.limits is not None:
            self.limits.restore()
