"""What the meters of named devices share (NVML's GPUs, upstream Zeus's devices): readings from
each device's cumulative energy counter, or, where a device has none (NVIDIA GPUs older than
Volta, some AMD GPUs), from its power, sampled by a thread and integrated.

A counter that cannot be read for a moment (NVML answering ``Unknown Error`` or a timeout under a
loaded driver) does not end the training it measures: the read is tried again, and where it still
fails, that reading is estimated at the devices' recent mean power. The counters are cumulative,
so the next reading that succeeds is exact again."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from zeus_bso.energy.base import Device
from zeus_bso.errors import EnergyMeterError

logger = logging.getLogger(__name__)

T = TypeVar("T")

READ_TRIES = 3
"""Reads of the counters before a reading is estimated (`DeviceMeter.readings`)."""
RETRY_S = 0.05
"""Seconds before the second read, twice that before the third."""
RATE_WINDOW_S = 60.0
"""How far back an estimate's power is read: the devices' mean power over the readings of up
to this many seconds before the last (every reading since the meter's start, before that)."""
OUTAGE_READINGS = 10
"""Power readings of a sampler that fail in a row before it says so (a second at its default
interval)."""
MARK_SPACING_S = 5.0
"""The least time between two readings kept for it (a run reads its meter a few times at each
report, milliseconds apart)."""


def tried(
    read: Callable[[], T], errors: tuple[type[BaseException], ...], tries: int = READ_TRIES
) -> T:
    """``read()``, read again after `RETRY_S`, then twice that, ..., where it raises one of
    ``errors``, ``tries`` times in all; the last read's error where every one raised."""
    for attempt in range(tries - 1):
        try:
            return read()
        except errors:
            time.sleep(RETRY_S * (attempt + 1))
    return read()


class PowerSampler:
    """Integrates ``watts()`` (one reading per device) every ``interval`` seconds from its
    creation until `close`; a reading that raises one of ``errors`` is skipped, so its interval
    is counted at the next reading's power. While readings fail, `joules` counts the time since
    the last one at its power (said once `OUTAGE_READINGS` have failed in a row)."""

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
        self._last: tuple[float, list[float]] | None = None  # the last reading: when, its watts
        self._failed = 0  # readings failed since it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True, name=name)
        self._thread.start()

    def _run(self, interval: float) -> None:
        last = time.monotonic()
        while not self._stop.wait(interval):
            now = time.monotonic()
            try:
                watts = self._watts()
            except self._errors as err:
                with self._lock:
                    self._failed += 1
                if self._failed == OUTAGE_READINGS:
                    logger.warning(
                        "zeus-bso: the devices' power could not be read %d times in a row (%s): "
                        "the time since the last reading is counted at its power until one "
                        "succeeds",
                        OUTAGE_READINGS,
                        err,
                    )
                continue
            with self._lock:
                for i, w in enumerate(watts):
                    self._joules[i] += w * (now - last)
                if self._failed >= OUTAGE_READINGS:
                    logger.warning("zeus-bso: the devices' power reads again")
                self._last, self._failed = (now, watts), 0
            last = now

    def joules(self) -> list[float]:
        """Each device's joules since the sampler started (while readings fail, with the time
        since the last one at its power)."""
        with self._lock:
            joules = list(self._joules)
            if self._failed and self._last is not None:
                at, watts = self._last
                gap = time.monotonic() - at
                joules = [j + w * gap for j, w in zip(joules, watts, strict=True)]
        return joules

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
    _read: deque[tuple[float, list[float]]]
    """Readings the counters gave (a time, the joules per device), `RATE_WINDOW_S` of them at
    most, `MARK_SPACING_S` apart, and the last: what an estimate's power is read from."""
    _given: list[float] | None = None
    """The joules per device the last reading gave: a later one never gives less."""
    _estimating = False

    def _counting(self) -> None:
        """The counters' start is read: readings count from now."""
        self._read = deque([(time.monotonic(), [0.0] * len(self.devices))])

    def _counter_joules(self) -> list[float]:
        """Each device's joules since the meter was created, from its counter.

        Raises:
            EnergyMeterError: a counter could not be read.
        """
        raise NotImplementedError

    def readings(self) -> dict[str, float]:
        """Joules since the meter was created, per device key; never less than the last
        reading gave (an estimate may run ahead of the counters or the samples).

        Raises:
            EnergyMeterError: the counters could not be read `READ_TRIES` times, and there is
                no reading yet to estimate this one from.
        """
        joules = self._sampler.joules() if self._sampler is not None else self._counted()
        if self._given is not None:
            joules = [max(j, g) for j, g in zip(joules, self._given, strict=True)]
        self._given = joules
        return {d.key: j for d, j in zip(self.devices, joules, strict=True)}

    def _counted(self) -> list[float]:
        """The counters' joules, tried `READ_TRIES` times (once while readings are estimated:
        no waits at every reading of an outage), or estimated (`_estimated`)."""
        tries = 1 if self._estimating else READ_TRIES
        try:
            joules = tried(self._counter_joules, (EnergyMeterError,), tries)
        except EnergyMeterError as err:
            return self._estimated(err)
        self._note(joules)
        return joules

    def _note(self, joules: list[float]) -> None:
        """Keep a reading the counters gave, for the power of later estimates."""
        if self._estimating:
            logger.warning("zeus-bso: the energy counters read again")
            self._estimating = False
        now, read = time.monotonic(), self._read
        if len(read) > 1 and read[-1][0] - read[-2][0] < MARK_SPACING_S:
            read.pop()  # the last but one stays MARK_SPACING_S from the one before it
        read.append((now, joules))
        while now - read[0][0] > RATE_WINDOW_S and len(read) > 2:
            read.popleft()

    def _estimated(self, err: EnergyMeterError) -> list[float]:
        """Each device's joules now: its last reading, and for the time since, its mean power
        over the readings of up to `RATE_WINDOW_S` before that one (the counters failed ``err``
        `READ_TRIES` times)."""
        (start, first), (end, last) = self._read[0], self._read[-1]
        if end <= start:
            raise EnergyMeterError(
                f"{err} ({READ_TRIES} reads; no reading yet to estimate this one from)"
            ) from err
        if not self._estimating:
            logger.warning(
                "zeus-bso: %s (%d reads): readings are estimated at the devices' recent power "
                "until a read succeeds (the counters are cumulative: that one is exact)",
                err,
                READ_TRIES,
            )
            self._estimating = True
        share = (time.monotonic() - end) / (end - start)
        return [b + (b - a) * share for a, b in zip(first, last, strict=True)]

    def energy(self) -> float:
        """Joules since the meter was created, over its devices."""
        return sum(self.readings().values())

    def close(self) -> None:
        """Stop sampling."""
        if self._sampler is not None:
            self._sampler.close()
