"""Energy from sampled power, for devices without a cumulative energy counter (NVIDIA GPUs older
than Volta, some AMD GPUs): a thread reads every device's power at an interval and integrates."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


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
