"""CPU package energy from Linux RAPL (``/sys/class/powercap``), where it is readable.

A package's counter wraps around at ``max_energy_range_uj`` (about 262 kJ: 20 to 30 minutes at
150 to 200 W). A wrap between two readings is noticed, two are not, so a thread reads the
counters often enough that no two wraps fall between readings: every quarter of the shortest
time to a wrap at the package's maximum power, and at least every minute.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from zeus_bso.energy.base import Device
from zeus_bso.errors import EnergyMeterError

POWERCAP = Path("/sys/class/powercap")
MAX_POLL_SECONDS = 60.0


class _Domain:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.range_uj = int((path / "max_energy_range_uj").read_text())
        self.last = self._raw()
        self.total_uj = 0
        self._lock = threading.Lock()  # the poller and the meter's readers

    def _raw(self) -> int:
        return int((self.path / "energy_uj").read_text())

    def read_uj(self) -> int:
        with self._lock:
            now = self._raw()
            delta = now - self.last
            if delta < 0:  # the counter wrapped around
                delta += self.range_uj + 1
            self.last = now
            self.total_uj += delta
            return self.total_uj


class RAPLMeter:
    """Sums the energy counters of the CPU packages (``intel-rapl:N`` domains)."""

    name = "rapl"
    is_estimate = False

    def __init__(self, root: Path = POWERCAP, poll_seconds: float | None = None) -> None:
        try:
            paths = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
            self._domains = [_Domain(p) for p in paths]
        except (OSError, ValueError) as err:
            raise EnergyMeterError(f"RAPL counters under {root} are not readable: {err}") from err
        if not self._domains:
            raise EnergyMeterError(f"no RAPL package domains under {root}")
        self.device_model = "cpu-" + (self._domains[0].path / "name").read_text().strip()
        self.device_count = len(self._domains)
        limits = []
        for domain in self._domains:
            limit = domain.path / "constraint_0_max_power_uw"
            if not limit.exists():
                limit = domain.path / "constraint_0_power_limit_uw"
            limits.append(int(limit.read_text()) / 1e6 if limit.exists() else 0.0)
        self.max_power = sum(limits) or 100.0 * self.device_count
        # Every process of this host reads the same packages: named by host and domain.
        host = socket.gethostname()
        share = self.max_power / self.device_count
        self.devices = [
            Device(f"rapl@{host}:{d.path.name}", self.device_model, limit or share)
            for d, limit in zip(self._domains, limits, strict=True)
        ]
        if poll_seconds is None:
            to_wrap = min(
                d.range_uj / 1e6 / (limit or share)
                for d, limit in zip(self._domains, limits, strict=True)
            )
            poll_seconds = max(0.01, min(MAX_POLL_SECONDS, to_wrap / 4))
        self.poll_seconds = poll_seconds
        """How often the poller reads the counters (s)."""
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True, name="zeus-bso-rapl")
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                for domain in self._domains:
                    domain.read_uj()
            except (OSError, ValueError):
                continue  # read again at the next poll, or by energy()

    def readings(self) -> dict[str, float]:
        """Joules since the meter was created, per package."""
        return {
            device.key: domain.read_uj() / 1e6
            for device, domain in zip(self.devices, self._domains, strict=True)
        }

    def energy(self) -> float:
        """Joules since the meter was created, over all packages."""
        return sum(self.readings().values())

    def close(self) -> None:
        """Stop the poller."""
        self._stop.set()
        self._poller.join(timeout=1.0)
