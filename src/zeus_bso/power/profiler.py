"""Profiling a batch size's power limits in its first epoch, step by step (the Zeus paper's
first-epoch profiling): each limit in turn, from the highest, gets a few steps to settle and a
few measured steps (more in a long epoch: `measured_steps_for`); an epoch at a limit is its
measured step times the steps of an epoch. Where those steps are too quick for the GPUs' energy
counter (NVML updates it every 100 ms on an H200), the first limit's measurement is lengthened
to span `COUNTER_PERIODS` of its updates, and so is every limit's after it (fewer limits where
the first epoch has no room for them all: `FEWEST_LIMITS` at least). The
profile may stop early, when ``goes_on`` says the limits below cannot be cheaper
(`zeus_bso.policy.power.profile_goes_on`).

The clock, the energy reading and the setting of a limit are given, so that the sequence is the
same on every process of a run (each sets its own GPUs at the same step) and testable alone."""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from zeus_bso.policy.power import too_slow
from zeus_bso.spec import PowerMeasurement

SETTLE_STEPS = 2
"""Steps at a new limit before its measurement starts (the GPU's clocks settle)."""
MEASURED_STEPS = 5
"""Steps measured at each limit, at least (and where the epoch's steps are not known)."""
MAX_MEASURED_STEPS = 40
"""Steps measured at each limit, at most (upstream Zeus's default): more steps average out the
jitter of a step's time and the update period of the GPUs' energy counters."""
PROFILE_SHARE = 0.5
"""The share of the first epoch's steps a profile may take to measure longer."""
COUNTER_PERIODS = 20
"""A limit's measurement spans at least this many updates of the GPUs' energy counter where the
epoch has room: the counter is read at the window's two ends, each reading up to one update
behind, so the window's energy is then off by at most about 5%."""
FEWEST_LIMITS = 3
"""Where the first epoch has no room to measure every limit long enough, the limits are thinned
to as many as it has room for, but no fewer than this (the highest, the lowest, and between)."""
UNKNOWN_EPOCH_STEPS = 10 * MAX_MEASURED_STEPS
"""The most steps a limit's measurement may be lengthened to where the epoch's steps are not
known."""


def spread(limits: Sequence[float], count: int) -> list[float]:
    """``count`` of ``limits``, evenly spread, the first and the last kept."""
    if count >= len(limits):
        return list(limits)
    if count <= 1:
        return list(limits[:count])
    return [limits[round(i * (len(limits) - 1) / (count - 1))] for i in range(count)]


def measured_steps_for(
    steps_per_epoch: int | None, limits: int, settle_steps: int = SETTLE_STEPS
) -> int:
    """Steps to measure at each of ``limits`` limits: as many as `PROFILE_SHARE` of the first
    epoch's steps leave after each limit's settling, from `MEASURED_STEPS` to
    `MAX_MEASURED_STEPS`. The same on every process of a run, which all have the epoch's
    steps."""
    room = profile_room(steps_per_epoch)
    if room is None or limits < 1:
        return MEASURED_STEPS
    return max(MEASURED_STEPS, min(MAX_MEASURED_STEPS, room // limits - settle_steps))


def profile_room(steps_per_epoch: int | None) -> int | None:
    """The most steps a profile may take: `PROFILE_SHARE` of the first epoch's (None: the
    epoch's steps are not known)."""
    return None if steps_per_epoch is None else int(steps_per_epoch * PROFILE_SHARE)


def counter_period_s(
    read: Callable[[], float], clock: Callable[[], float] = time.monotonic, seconds: float = 0.5
) -> float | None:
    """How often an energy counter changes (s), read in a tight loop for up to ``seconds``; None
    where it did not change twice (no counter). The time from the first change seen to the
    last, over the periods between them: a change seen late (the loop held up by a busy CPU)
    makes one gap longer and the next shorter by as much, so only the first and the last
    change's delays count, shared over the periods between them (the median gap of a loop held
    up at every other change was that delay off). A gap of 1.75 times the median or more, where
    the loop was held up over a change, counts as the periods it spans."""
    changes: list[float] = []
    last, end = read(), clock() + seconds
    while clock() < end and len(changes) < 6:
        value = read()
        if value != last:
            changes.append(clock())
            last = value
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    if not gaps:
        return None
    typical = statistics.median(gaps)
    periods = sum(round(gap / typical) if gap >= 1.75 * typical else 1 for gap in gaps)
    return (changes[-1] - changes[0]) / periods


@dataclass
class _Window:
    seconds: float
    joules: float


@dataclass
class PowerProfiler:
    """Steps through ``limits`` (W, highest first) as training steps: `step_begin` and
    `step_end` around every step. ``set_limit`` sets this process's GPUs; ``joules`` reads their
    energy counter; ``sync`` waits for the device's queued work (at measurement edges)."""

    limits: Sequence[float]
    set_limit: Callable[[float], None]
    joules: Callable[[], float]
    sync: Callable[[], None] = lambda: None
    clock: Callable[[], float] = time.monotonic
    goes_on: Callable[[list[float]], bool] | None = None
    """Given each measured limit's cost of a step (highest limit first), whether to measure
    the next; every process must get the same answer (the main process's). None: every limit."""
    cost: Callable[[float, float], float] = lambda seconds, joules: joules
    """A step's cost from its seconds and joules (what ``goes_on`` compares)."""
    max_slowdown: float | None = None
    """The job's ``power_max_slowdown``: a limit whose step takes longer than this many times
    the highest limit's costs infinitely much to ``goes_on`` (it cannot be chosen)."""
    settle_steps: int = SETTLE_STEPS
    measured_steps: int = MEASURED_STEPS
    min_window_s: float = 0.0
    """The shortest a limit's measurement may span (s): where the first limit's
    ``measured_steps`` span less, they are lengthened for it and every limit after it, as far
    as ``room`` allows; where it does not, the limits left are thinned (`FEWEST_LIMITS` at
    least) so that each gets the steps (0: never lengthened)."""
    room: int | None = None
    """The most steps the whole profile may take (None: not known; a limit's measurement is
    then lengthened to `UNKNOWN_EPOCH_STEPS` at most)."""
    agree: Callable[[int], int] = lambda steps: steps
    """The main process's steps to measure, on every process (a collective: every process calls
    it once, at the end of the first limit's measured steps)."""
    _index: int = field(default=0, init=False)
    _lengthened: bool = field(default=False, init=False)
    _steps: int = field(default=0, init=False)
    _start: _Window | None = field(default=None, init=False)
    _measured: dict[float, _Window] = field(default_factory=dict, init=False)

    @property
    def steps_needed(self) -> int:
        """Steps the whole profile takes."""
        return len(self.limits) * (self.settle_steps + self.measured_steps)

    @property
    def done(self) -> bool:
        """Whether every limit is measured."""
        return self._index >= len(self.limits)

    def step_begin(self) -> None:
        """Before a training step: the first step at a limit sets it; the first measured step
        opens its window."""
        if self.done:
            return
        if self._steps == 0:
            self.set_limit(self.limits[self._index])
        if self._steps == self.settle_steps:
            self.sync()
            self._start = _Window(self.clock(), self.joules())

    def step_end(self) -> None:
        """After a training step: the last measured step closes the limit's window."""
        if self.done:
            return
        self._steps += 1
        if self._steps == self.settle_steps + self.measured_steps:
            self.sync()
            start = self._start
            assert start is not None
            if not self._lengthened:  # the first limit: are its steps long enough to measure?
                self._lengthened = True
                if self._lengthen(self.agree(self._steps_spanning(self.clock() - start.seconds))):
                    return
            self._measured[self.limits[self._index]] = _Window(
                (self.clock() - start.seconds) / self.measured_steps,
                (self.joules() - start.joules) / self.measured_steps,
            )
            self._index += 1
            self._steps = 0
            self._start = None
            if self.goes_on is not None and not self.done:
                windows = [w for _, w in sorted(self._read().items(), reverse=True)]
                costs = [
                    math.inf
                    if too_slow(w.seconds, windows[0].seconds, self.max_slowdown)
                    else self.cost(w.seconds, w.joules)
                    for w in windows
                ]
                if not self.goes_on(costs):
                    self._index = len(self.limits)

    def _steps_spanning(self, seconds: float) -> int:
        """The steps whose measurement spans `min_window_s`, given that ``measured_steps``
        spanned ``seconds`` (``measured_steps`` at least)."""
        if self.min_window_s <= 0 or seconds >= self.min_window_s:
            return self.measured_steps
        per_step = max(seconds, 1e-9) / self.measured_steps
        return max(self.measured_steps, math.ceil(self.min_window_s / per_step))

    def _lengthen(self, steps: int) -> bool:
        """Measure ``steps`` a limit (the same on every process: ``steps`` is the main
        process's, and the rest follows from what every process has), thinning the limits left
        where ``room`` is short of them. Returns whether the first limit measures on."""
        if steps <= self.measured_steps:
            return False
        if self.room is None:
            self.measured_steps = min(steps, UNKNOWN_EPOCH_STEPS)
        else:
            room = max(self.room, self.steps_needed)  # never less than the profile had
            keep = len(self.limits)
            while keep > FEWEST_LIMITS and keep * (self.settle_steps + steps) > room:
                keep -= 1
            self.limits = spread(self.limits, keep)
            self.measured_steps = max(
                self.measured_steps, min(steps, room // len(self.limits) - self.settle_steps)
            )
        return self.measured_steps > self._steps - self.settle_steps

    @property
    def window_s(self) -> float | None:
        """How long the highest limit's measurement spanned (s; None before it was measured)."""
        if not self.limits or self.limits[0] not in self._measured:
            return None
        return self._measured[self.limits[0]].seconds * self.measured_steps

    def measurements(
        self, steps_per_epoch: int, gpus_factor: float = 1.0
    ) -> list[PowerMeasurement]:
        """Each measured limit's epoch: its step's time and energy times ``steps_per_epoch``
        (the energy of the whole run's GPUs: this process's times ``gpus_factor``); a limit
        whose energy could not be read is left out."""
        return [
            PowerMeasurement(
                power_limit=limit,
                time_per_epoch=max(window.seconds, 1e-9) * steps_per_epoch,
                energy_per_epoch=max(window.joules, 0.0) * gpus_factor * steps_per_epoch,
            )
            for limit, window in sorted(self._read().items())
        ]

    def _read(self) -> dict[float, _Window]:
        """The limits measured, but those whose energy could not be read (NaN joules)."""
        return {limit: w for limit, w in self._measured.items() if math.isfinite(w.joules)}
