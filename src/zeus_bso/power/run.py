"""One run's GPU power limits on one process (opt-in: ``power_limit="optimize"``).

The main process asks the server (`zeus_bso.training.server_run.ServerRun` with ``power_limits``)
and every process gets its answer: train at a limit, or profile the limits in the first steps.
Every process sets the GPUs it trains on (`GpuPowerLimits`, each GPU of a node once) at the same
steps, so the profile's steps run at one limit on every GPU of the run; the main process
measures its GPUs, scales their energy to the run's, sends the profile, and every process
trains on at the limit the server chose. Without the permission to set limits, nothing is set
and the recommended limit is logged. Limits are restored on every exit path (`restore`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from zeus_bso.energy.device_sync import device_sync
from zeus_bso.errors import ConfigurationError, PowerLimitError
from zeus_bso.policy import zeus_cost
from zeus_bso.policy.power import best_power_limit, profile_goes_on
from zeus_bso.power.limits import GpuPowerLimits, gpus_here
from zeus_bso.power.profiler import (
    COUNTER_PERIODS,
    PowerProfiler,
    measured_steps_for,
    profile_room,
    spread,
)
from zeus_bso.spec import GpuConfig, PowerMeasurement

Send = Callable[[list[PowerMeasurement], tuple[float, float]], float | None]
"""Sends a profile, with the range of limits the GPUs take (W); returns the limit to train at
(None: the server could not take it)."""

logger = logging.getLogger(__name__)

PowerLimitMode = Literal["off", "optimize"]
"""``off``: the GPUs' limits are left alone (the default); ``optimize``: profile and train at
the limit the server chooses."""


def check_power_limit(mode: str) -> PowerLimitMode:
    """``mode``, checked, and with ``optimize`` that this machine has GPUs whose limits it
    could set: a constructor refuses at once, before a job is registered or a trial dispatched
    (it was refused at the start of training, its trial released).

    Raises:
        ConfigurationError: an unknown mode.
        PowerLimitError: ``optimize`` where NVML is missing, cannot start, or sees no GPU.
    """
    if mode not in ("off", "optimize"):
        raise ConfigurationError(f"power_limit is 'off' or 'optimize', not {mode!r}")
    if mode == "off":
        return "off"
    if gpus_here() == 0:
        raise PowerLimitError(
            "power_limit='optimize' needs NVIDIA GPUs, and NVML sees none here (is "
            "CUDA_VISIBLE_DEVICES empty?): train without it on this machine (zeus-bso check "
            "says what a machine allows)"
        )
    return "optimize"


class PowerLimitRun:
    """One run's power limits on this process (see the module).

    Args:
        is_main: whether this process talks to the server.
        limits: this process's GPUs.
        broadcast: sends the main process's object to every process.
        run_gpus: the whole run's GPUs: the main process's energy is scaled to theirs, and
            their maximum power prices time in the cost.
        eta_knob: the job's weight of energy in the cost.
        max_slowdown: the job's ``power_max_slowdown``: a profile ends at the first limit
            slower than that (the server would not choose it, nor any below it).
    """

    def __init__(
        self,
        is_main: bool,
        limits: GpuPowerLimits,
        broadcast: Callable[[Any], Any],
        run_gpus: GpuConfig,
        eta_knob: float,
        max_slowdown: float | None = None,
    ) -> None:
        self._is_main = is_main
        self._eta = eta_knob
        self._max_slowdown = max_slowdown
        self._max_power = run_gpus.max_power
        self._limits = limits
        self._broadcast = broadcast
        self._gpus_factor = run_gpus.number_of_gpus / max(1, len(limits.uuids))
        self._profiler: PowerProfiler | None = None
        self._send: Send | None = None
        self._steps_per_epoch = 1
        self._counter_period: float | None = None  # s, the main process's GPUs'
        self.limit: float | None = None
        """The limit the run trains at once chosen (None: the GPUs' own)."""

    def begin(
        self,
        limit: float | None,
        profiling: bool,
        send: Send,
        steps_per_epoch: int | None = None,
    ) -> None:
        """Training starts: at ``limit`` (the server's), or profiling the limits in the first
        steps (``profiling``); ``send`` sends the profile with the GPUs' range and returns the
        limit (main).

        Raises:
            PowerLimitError: the server's limit lies outside these GPUs' range (the run is not
                the batch size's to charge).
        """
        self._send = send
        self._steps_per_epoch = steps_per_epoch or 1
        if profiling:
            profiler = PowerProfiler(
                self._limits.limits(),
                self._set,
                self._limits.joules,
                device_sync,
                goes_on=self._goes_on,
                cost=lambda s, j: zeus_cost(j * self._gpus_factor, s, self._eta, self._max_power),
                max_slowdown=self._max_slowdown,
            )
            profiler.measured_steps = measured_steps_for(steps_per_epoch, len(profiler.limits))
            per_limit = profiler.settle_steps + profiler.measured_steps
            if steps_per_epoch is not None and steps_per_epoch < profiler.steps_needed:
                # The first epoch has room for fewer: evenly spread, the highest kept.
                profiler.limits = spread(profiler.limits, steps_per_epoch // per_limit)
            profiler.room = profile_room(steps_per_epoch)
            profiler.agree = self._agree
            if self._is_main:  # the main process's window is every process's (`_agree`)
                self._counter_period = self._limits.counter_period_s() if profiler.limits else None
                profiler.min_window_s = COUNTER_PERIODS * (self._counter_period or 0.0)
            if not profiler.limits:
                if self._is_main:
                    logger.warning(
                        "zeus-bso: an epoch of %d steps is too short to profile power limits "
                        "(%d steps a limit): the GPUs keep their own",
                        steps_per_epoch,
                        per_limit,
                    )
                return
            self._profiler = profiler
            if self._is_main:
                logger.info(
                    "zeus-bso: profiling power limits %s W in the first %d steps",
                    ", ".join(f"{w:g}" for w in self._profiler.limits),
                    self._profiler.steps_needed,
                )
        elif limit is not None:
            self._apply(self._within_range(limit))

    def _agree(self, steps: int) -> int:
        """The main process's steps to measure each limit, on every process (a collective at
        the same step)."""
        return int(self._broadcast(steps if self._is_main else None))

    def _say_lengthened(self, profiler: PowerProfiler, before: tuple[int, int]) -> None:
        """Log where the profiler lengthened its measurements (main process)."""
        if not self._is_main or (profiler.measured_steps, len(profiler.limits)) == before:
            return
        logger.info(
            "zeus-bso: measuring each power limit over %d steps instead of %d (%s W), so that a "
            "limit's measurement spans %d updates of the GPUs' energy counter (every %.0f ms)",
            profiler.measured_steps,
            before[0],
            ", ".join(f"{w:g}" for w in profiler.limits),
            COUNTER_PERIODS,
            1000 * (self._counter_period or 0.0),
        )

    def _goes_on(self, costs: list[float]) -> bool:
        """The main process's answer, on every process (a collective at the same step)."""
        return bool(self._broadcast(profile_goes_on(costs) if self._is_main else None))

    def _set(self, limit: float) -> None:
        self._limits.set(limit)

    def _within_range(self, limit: float) -> float:
        """``limit``, the server's, if these GPUs take it.

        Raises:
            PowerLimitError: they do not.
        """
        low, high = self._limits.range_w()
        if low - 0.5 <= limit <= high + 0.5:
            return limit
        raise PowerLimitError(
            f"the server's power limit for this batch size, {limit:g} W, lies outside these "
            f"GPUs' range ({low:g}-{high:g} W): its profile was measured on other GPUs, or sent "
            "wrong; `zeus-bso jobs reprofile JOB` has the next run measure it again. This run "
            "is not counted against its batch size"
        )

    def _apply(self, limit: float) -> None:
        self.limit = limit
        if self._limits.set(limit):
            if self._is_main:
                logger.info("zeus-bso: the GPUs train at %g W", limit)
        elif self._is_main:
            logger.warning(
                "zeus-bso: the recommended GPU power limit is %g W, but this process may not set "
                "it (it needs CAP_SYS_ADMIN: run as root, or the container with --cap-add "
                "SYS_ADMIN); nothing was set (advisory mode)",
                limit,
            )

    def step_begin(self) -> None:
        """Before each training step (every process)."""
        if self._profiler is not None:
            self._profiler.step_begin()

    @property
    def profiling(self) -> bool:
        """Whether the run is profiling its limits (the step that ends the profile sends it)."""
        return self._profiler is not None

    def step_end(self) -> float:
        """After each training step (every process): the step that ends the profile sends it
        (main) and every process trains on at the chosen limit. Returns the seconds the main
        process waited on the server for its choice (0 at every other step): no training."""
        profiler = self._profiler
        if profiler is None:
            return 0.0
        before = (profiler.measured_steps, len(profiler.limits))
        profiler.step_end()
        self._say_lengthened(profiler, before)
        if not profiler.done:
            return 0.0
        self._profiler = None
        window = profiler.window_s
        if self._is_main and window is not None and window < 0.9 * profiler.min_window_s:
            logger.warning(
                "zeus-bso: each power limit was measured over %.2f s, less than the %.1f s "
                "(%d updates of the GPUs' energy counter) that read its energy within about 5%%: "
                "the first epoch had no room for more steps, even for %d limits, and the profile "
                "is coarse (`zeus-bso jobs reprofile` measures it again, in a run whose first "
                "epoch has more steps)",
                window,
                profiler.min_window_s,
                COUNTER_PERIODS,
                len(profiler.limits),
            )

        def chosen() -> tuple[float | None, float]:
            if self._limits.advisory:
                logger.warning(
                    "zeus-bso: power limits were not profiled: this process may not set them "
                    "(it needs CAP_SYS_ADMIN); the GPUs keep their own"
                )
                return None, 0.0
            assert self._send is not None
            measured = profiler.measurements(self._steps_per_epoch, self._gpus_factor)
            if not measured:
                logger.warning(
                    "zeus-bso: power limits were not profiled: the GPUs' energy counters could "
                    "not be read; the GPUs keep their own, and the next run profiles again"
                )
                return None, 0.0
            asked = time.monotonic()
            limit = self._send(measured, self._limits.range_w())
            waited = time.monotonic() - asked
            if limit is None:
                limit = self._chosen_here(measured)
            return limit, waited

        limit, waited = self._broadcast(chosen() if self._is_main else None)
        if limit is not None:
            self._apply(self._within_range(float(limit)))
        else:
            self._limits.restore()
        return float(waited)

    def _chosen_here(self, measured: list[PowerMeasurement]) -> float | None:
        """The limit to train at when the server could not take the profile (away, hung past
        the client's patience): the one the server would choose from it, by the same rule
        (`best_power_limit`, at the job's ``eta_knob`` and ``power_max_slowdown``, priced with
        the run's GPUs' power, as the server prices the profile's), rather than the GPUs' own
        for the rest of the run. Nothing is stored: the next run of the batch size profiles
        again. None: nothing was measured."""
        if not measured:
            return None
        limit = best_power_limit(measured, self._eta, self._max_power, self._max_slowdown)
        logger.warning(
            "zeus-bso: the server did not choose a power limit: the GPUs train at %g W, the "
            "limit this profile measured cheapest, chosen here as the server chooses (it keeps "
            "no profile: the next run of this batch size profiles again)",
            limit,
        )
        return limit

    def restore(self) -> None:
        """Put the GPUs back to their own limits (every exit path; again: nothing)."""
        self._profiler = None
        self._limits.restore()
