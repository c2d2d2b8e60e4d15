"""What the meters of named devices share (NVML's GPUs, upstream Zeus's devices): readings from
each device's cumulative energy counter, or, where a device has none (NVIDIA GPUs older than
Volta, some AMD GPUs), from its power, sampled by a thread and integrated.

A counter that cannot be read for a moment (NVML answering ``Unknown Error`` or a timeout under a
loaded driver) does not end the training it measures: the read is tried again, and where it still
fails, that reading is estimated at the devices' mean power so far. The counters are cumulative,
so the next reading that succeeds is exact again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from zeus_bso.energy.base import Device
from zeus_bso.errors import EnergyMeterError

logger = logging.getLogger(__name__)

READ_TRIES = 3
"""Reads of the counters before a reading is estimated (`DeviceMeter.readings`)."""
RETRY_S = 0.05
"""Seconds before the second read, twice that before the third."""


class PowerSampler:
    """Integrates ``watts()`` (one reading per device) every ``interval`` seconds from its
    creation until `close`; a reading that raises one of ``errors`` is skipped, so its interval
    is counted at the next reading's power."""

    def __init__(
        self,
        watts: Callable[[], list[float]],
        devices: int,
        interval: float,
        errors: tuple[type[BaseException], ...],
        name: str,
    ) -> None:
        self._watts = watts
        self._errors = errors
        self._joules = [0.0] * devices
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True, name=name)
        self._thread.start()

    def _run(self, interval: float) -> None:
        last = time.monotonic()
        while not self._stop.wait(interval):
            now = time.monotonic()
            try:
                watts = self._watts()
            except self._errors:
                continue
            for i, w in enumerate(watts):
                self._joules[i] += w * (now - last)
            last = now

    def joules(self) -> list[float]:
        """Each device's joules since the sampler started."""
        return list(self._joules)

    def close(self) -> None:
        """Stop sampling (waits for the thread, at most a second)."""
        self._stop.set()
        self._thread.join(timeout=1.0)


class DeviceMeter:
    """A meter of `devices` read from their counters (`_counter_joules`), or from a
    `PowerSampler` where the meter started one (`_sampler`). A subclass that reads counters
    calls `_counting` once it has read their start."""

    devices: list[Device]
    _sampler: PowerSampler | None = None
    _opened_at = 0.0
    _given: list[float] | None = None
    """The joules per device the last reading gave: a later one never gives less."""
    _given_at = 0.0
    _estimating = False

    def _counting(self) -> None:
        """The counters' start is read: readings count from now."""
        self._opened_at = time.monotonic()

    def _counter_joules(self) -> list[float]:
        """Each device's joules since the meter was created, from its counter.

        Raises:
            EnergyMeterError: a counter could not be read.
        """
        raise NotImplementedError

    def readings(self) -> dict[str, float]:
        """Joules since the meter was created, per device key.

        Raises:
            EnergyMeterError: the counters could not be read `READ_TRIES` times, and there is
                no reading yet to estimate this one from.
        """
        joules = self._sampler.joules() if self._sampler is not None else self._counted()
        return {d.key: j for d, j in zip(self.devices, joules, strict=True)}

    def _counted(self) -> list[float]:
        """The counters' joules, tried `READ_TRIES` times (once while readings are estimated:
        no waits at every reading of an outage), or estimated (`_estimated`); never less than
        the last reading gave."""
        tries = 1 if self._estimating else READ_TRIES
        for attempt in range(tries):
            try:
                joules = self._counter_joules()
            except EnergyMeterError as err:
                if attempt + 1 < tries:
                    time.sleep(RETRY_S * (attempt + 1))
                    continue
                joules = self._estimated(err)
            else:
                if self._estimating:
                    logger.warning("zeus-bso: the energy counters read again")
                    self._estimating = False
            break
        now = time.monotonic()
        if self._given is not None:
            joules = [max(j, g) for j, g in zip(joules, self._given, strict=True)]
        self._given, self._given_at = joules, now
        return joules

    def _estimated(self, err: EnergyMeterError) -> list[float]:
        """Each device's joules now at its mean power from the meter's start to its last
        reading (the counters failed ``err`` `READ_TRIES` times)."""
        if self._given is None or self._given_at <= self._opened_at:
            raise EnergyMeterError(
                f"{err} ({READ_TRIES} reads; no reading yet to estimate this one from)"
            ) from err
        if not self._estimating:
            logger.warning(
                "zeus-bso: %s (%d reads): readings are estimated at the devices' mean power "
                "so far until a read succeeds (the counters are cumulative: that one is exact)",
                err,
                READ_TRIES,
            )
            self._estimating = True
        share = (time.monotonic() - self._opened_at) / (self._given_at - self._opened_at)
        return [joules * share for joules in self._given]

    def energy(self) -> float:
        """Joules since the meter was created, over its devices."""
        return sum(self.readings().values())

    def close(self) -> None:
        """Stop sampling."""
        if self._sampler is not None:
            self._sampler.close()
