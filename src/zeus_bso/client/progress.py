"""`TrialProgress`: a run's place in its trial, kept one way by the client and both callbacks.

It holds the trial, the epochs reported, and the window of time and energy since the run began.
A run restarted from a checkpoint goes on from what `checkpoint` saved. Every rank of a
distributed run keeps one (each rank measures the GPUs it trains on); rank 0's reports. What a
run spends waiting on the server (`leave_out`) is not training, and is not in the window.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from zeus_bso.energy import EnergyMeter
from zeus_bso.energy.base import check_meter
from zeus_bso.errors import ConfigurationError
from zeus_bso.spec import TrialId


@dataclass(frozen=True)
class Elapsed:
    """A run's seconds and joules since training began, read together so that both span one
    window. In a distributed run the joules are every rank's, each device once."""

    seconds: float
    joules: float


@dataclass(frozen=True)
class Mark:
    """A moment of a run's window and its process's meter readings then (`TrialProgress.mark`)."""

    time: float
    readings: Mapping[str, float]


class TrialProgress:
    """The trial of this run, its reported epochs and its time and energy so far."""

    def __init__(self, meter: EnergyMeter) -> None:
        self.meter = check_meter(meter)
        self.trial: TrialId | None = None
        self.epochs = 0
        """Epochs reported so far (across restarts)."""
        self.server_epochs = 0
        """Epochs the server had of the trial when this run resumed it from a checkpoint
        (`caught_up`): reports say no fewer (`epoch_to_report`)."""
        self.continued: int | None = None
        """The epoch after which this run took over an earlier run's trial (`go_on`; 0: it
        trains the trial again from its first epoch, `from_scratch`); None: it began the
        trial."""
        self._began = False
        self._start_time = 0.0
        self._start_energy = 0.0
        self._start_readings: dict[str, float] = {}
        self._time_before = 0.0
        self._energy_before = 0.0
        self._last_report: tuple[float, float] | None = None
        self._sampled = 0.0
        self._left_out_time = 0.0
        self._left_out: dict[str, float] = {}
        """Joules per device (`zeus_bso.energy.devices`) left out of the window (`leave_out`)."""

    @property
    def began(self) -> bool:
        """Whether training began (`begin`)."""
        return self._began

    def begin(self) -> None:
        """Open the measuring window: training starts now. Later calls change nothing."""
        if self._began:
            return
        self._start_readings = self.meter.readings()
        self._began = True
        self._start_time = time.monotonic()
        self._start_energy = sum(self._start_readings.values())

    def time(self) -> float:
        """Seconds of training since the run began (before a restart included)."""
        now = time.monotonic() - self._start_time if self._began else 0.0
        return self._time_before + now - self._left_out_time

    def energy(self) -> float:
        """Joules this process's meter measured since the run began (plus, on the rank that
        resumed from a checkpoint, the energy the checkpoint saved)."""
        now = self.meter.energy() - self._start_energy if self._began else 0.0
        return self._energy_before + now - sum(self._left_out.values())

    def sample(self) -> tuple[float, dict[str, float]]:
        """Seconds since the run began, and joules per device (`zeus_bso.energy.devices`) with,
        under ``"checkpoint"``, the energy a checkpoint this process resumed from saved: one
        reading of the meter, which `reported` remembers. A distributed run adds up every rank's
        readings, each device once (`zeus_bso.training.collectives.elapsed_of_the_run`)."""
        readings: dict[str, float] = {}
        if self._energy_before:
            readings["checkpoint"] = self._energy_before
        if self._began:
            for key, joules in self.meter.readings().items():
                readings[key] = (
                    joules - self._start_readings.get(key, 0.0) - self._left_out.get(key, 0.0)
                )
        self._sampled = sum(readings.values())
        return self.time(), readings  # after the readings, which may take retries

    def elapsed(self) -> Elapsed:
        """This process's seconds and joules since the run began, from one meter reading."""
        seconds, readings = self.sample()
        return Elapsed(seconds, sum(readings.values()))

    def mark(self) -> Mark | None:
        """The moment a wait on the server may begin, with this process's meter readings then
        (None: the window is not open), for `leave_out`."""
        if not self._began:
            return None
        readings = self.meter.readings()
        return Mark(time.monotonic(), readings)

    def leave_out(self, mark: Mark | None, seconds: float) -> None:
        """Leave ``seconds`` of what passed since ``mark`` out of the window: the run waited on
        the server then (a report's request, its retries while the server answers 503, a
        timeout while it hangs), and neither the time nor the devices' energy meanwhile are
        the batch size's. A process that waited longer than ``seconds`` (the main process also
        computed the metric; the others waited for its answer) leaves out the same share of
        its meter's joules since ``mark``, as spent at an even rate over its wait."""
        if mark is None or seconds <= 0.0:
            return
        readings = self.meter.readings()  # before the clock: it may take retries
        waited = time.monotonic() - mark.time
        if waited <= 0.0:
            return
        share = min(1.0, seconds / waited)
        self._left_out_time += share * waited
        for key, joules in readings.items():
            spent = joules - mark.readings.get(key, joules)
            if spent > 0.0:
                self._left_out[key] = self._left_out.get(key, 0.0) + share * spent

    def epoch_done(self, epoch: int | None = None) -> int:
        """Count one more epoch, or the run's epochs up to ``epoch`` (a loop that validates
        every few epochs); returns the run's epoch count."""
        if epoch is None:
            epoch = self.epochs + 1
        elif epoch <= self.epochs:
            raise ConfigurationError(
                f"epoch {epoch} is not after the {self.epochs} epochs already reported; "
                "report each epoch once, counting from 1"
            )
        self.epochs = epoch
        return self.epochs

    def reported(self, energy: float) -> None:
        """Remember the energy a report carried (all ranks' together, in a distributed run),
        beside this process's own joules in the `sample` the report was made of."""
        self._last_report = (energy, self._sampled)

    def checkpoint(self) -> dict[str, Any]:
        """What a checkpoint keeps to continue this trial ({} before the run has a trial).

        Its energy is the last report's (every rank's) plus this process's since then.
        """
        if self.trial is None:
            return {}
        energy = self.energy()
        if self._last_report is not None:
            reported, local_then = self._last_report
            energy = reported + (energy - local_then)
        return {
            "trial": self.trial.model_dump(),
            "current_epoch": self.epochs,
            "time": self.time(),
            "energy": energy,
        }

    def resume(self, saved: Mapping[str, Any]) -> TrialId:
        """Continue the trial a `checkpoint` saved (before `begin`). Returns the trial.

        Raises:
            ConfigurationError: ``saved`` is not a checkpoint of a trial.
        """
        if self._began:
            raise ConfigurationError("resume a trial before training begins")
        try:
            trial = TrialId.model_validate(saved["trial"])
            epochs, spent, energy = (
                int(saved["current_epoch"]),
                float(saved["time"]),
                float(saved["energy"]),
            )
        except (KeyError, TypeError, ValueError, ValidationError) as err:
            raise ConfigurationError(
                f"not a saved trial ({err!s}): expected the keys trial, current_epoch, time and "
                "energy that TrialProgress.checkpoint() writes"
            ) from err
        if epochs < 0 or spent < 0 or energy < 0:
            raise ConfigurationError(
                "a saved trial's current_epoch, time and energy are not negative"
            )
        self.go_on(trial, epochs, spent, energy)
        return trial

    def caught_up(self, epochs: int, time: float, energy: float) -> bool:
        """What the server had reported of the trial this run resumed from a checkpoint (before
        `begin`). A run killed after a report and before its next checkpoint left the server
        ahead of the checkpoint: the work after the checkpoint was spent, so time and energy go
        on from the server's, and the epochs trained again are reported as no fewer than the
        server's (`epoch_to_report`). Returns whether the checkpoint was behind."""
        behind = epochs > self.epochs
        self.server_epochs = max(self.server_epochs, epochs)
        self._time_before = max(self._time_before, time)
        self._energy_before = max(self._energy_before, energy)
        return behind

    def from_scratch(self) -> None:
        """The run trains its resumed trial again from the first epoch, without the checkpoint's
        weights (before `begin`): the time and energy reported before count, and its reports
        say no fewer epochs than were reported (`epoch_to_report`)."""
        self.server_epochs = max(self.server_epochs, self.epochs)
        self.epochs = self.continued = 0

    def epoch_to_report(self, epoch: int) -> int:
        """The epoch a report of ``epoch`` says: no fewer than the server had (`caught_up`),
        whose check that epochs never go back holds."""
        return max(epoch, self.server_epochs)

    def go_on(self, trial: TrialId, epochs: int, time: float, energy: float) -> None:
        """Continue ``trial`` after ``epochs`` epochs that took ``time`` seconds and ``energy``
        joules (before `begin`)."""
        if self._began:
            raise ConfigurationError("resume a trial before training begins")
        self.trial, self.epochs, self.continued = trial, epochs, epochs
        self._time_before, self._energy_before = time, energy
