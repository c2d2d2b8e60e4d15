"""The contract every energy meter passes (`zeus_bso.energy.EnergyMeter`), as a class that a
meter's test module subclasses, defining the ``meter`` fixture."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest

from zeus_bso.energy import EnergyMeter


class MeterContract:
    """What every meter offers: its declared attributes, each device named once, readings per
    device that add up to its energy, and energy that never goes back.

    Subclass it and define the ``meter`` fixture, which yields a working meter (over a test
    double of the hardware API where the hardware is absent) and closes it afterwards::

        class TestHwmonMeter(MeterContract):
            @pytest.fixture
            def meter(self, tmp_path: Path) -> Iterator[EnergyMeter]:
                fake_hwmon(tmp_path, watts=[120.0])
                meter = HwmonMeter(tmp_path)
                yield meter
                meter.close()
    """

    @pytest.fixture
    def meter(self) -> Iterator[EnergyMeter]:
        raise NotImplementedError("a MeterContract subclass defines the `meter` fixture")

    def test_it_is_an_energy_meter(self, meter: EnergyMeter) -> None:
        assert isinstance(meter, EnergyMeter)
        assert isinstance(meter.name, str)
        assert meter.name
        assert isinstance(meter.is_estimate, bool)
        assert isinstance(meter.device_model, str)
        assert meter.device_model
        assert isinstance(meter.device_count, int)
        assert meter.device_count >= 1
        assert math.isfinite(meter.max_power)
        assert meter.max_power > 0

    def test_it_names_each_device_once(self, meter: EnergyMeter) -> None:
        devices = list(meter.devices)
        assert len(devices) == meter.device_count
        assert len({device.key for device in devices}) == len(devices)
        assert {device.model for device in devices} == {meter.device_model}
        assert sum(device.max_power for device in devices) == pytest.approx(meter.max_power)

    def test_its_readings_are_per_device_and_add_up_to_its_energy(self, meter: EnergyMeter) -> None:
        first = meter.energy()
        readings = meter.readings()
        last = meter.energy()
        assert set(readings) == {device.key for device in meter.devices}
        assert all(math.isfinite(j) and j >= 0 for j in readings.values())
        assert first - 1e-6 <= sum(readings.values()) <= last + 1e-6

    def test_its_energy_never_goes_back(self, meter: EnergyMeter) -> None:
        seen = [meter.energy()]
        for _ in range(5):
            time.sleep(0.01)
            seen.append(meter.energy())
        assert seen == sorted(seen)
        assert all(math.isfinite(j) and j >= 0 for j in seen)
