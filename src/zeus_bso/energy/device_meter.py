"""What the meters of named devices share (NVML's GPUs, upstream Zeus's devices): readings from
each device's cumulative energy counter, or, where a device has none (NVIDIA GPUs older than
Volta, some AMD GPUs), from its power, sampled by a thread and integrated."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from zeus_bso.energy.base import Device


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
    `PowerSampler` where the meter started one (`_sampler`)."""

    devices: list[Device]
    _sampler: PowerSampler | None = None

    def _counter_joules(self) -> list[float]:
        """Each device's joules since the meter was created, from its counter."""
        raise NotImplementedError

    def readings(self) -> dict[str, float]:
        """Joules since the meter was created, per device key."""
        joules = self._sampler.joules() if self._sampler is not None else self._counter_joules()
        return {d.key: j for d, j in zip(self.devices, joules, strict=True)}

    def energy(self) -> float:
        """Joules since the meter was created, over its devices."""
        return sum(self.readings().values())

    def close(self) -> None:
        """Stop sampling."""
        if self._sampler is not None:
            self._sampler.close()
