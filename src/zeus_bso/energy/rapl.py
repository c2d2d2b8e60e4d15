"""CPU package energy from Linux RAPL (``/sys/class/powercap``), where it is readable."""

from __future__ import annotations

import socket
from pathlib import Path

from zeus_bso.energy.base import EnergyMeterError
from zeus_bso.energy.devices import Device

POWERCAP = Path("/sys/class/powercap")


class _Domain:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.range_uj = int((path / "max_energy_range_uj").read_text())
        self.last = self._raw()
        self.total_uj = 0

    def _raw(self) -> int:
        return int((self.path / "energy_uj").read_text())

    def read_uj(self) -> int:
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

    def __init__(self, root: Path = POWERCAP) -> None:
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
        """Nothing to release."""
