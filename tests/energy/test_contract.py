"""The meter contract (`zeus_bso.testing.MeterContract`) on the meters that ship: the estimate,
RAPL over a powercap tree the test writes, and NVML over the ``pynvml`` double, with and
without the GPUs' energy counters. (The real NVML path runs on a GPU: test_meters.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.energy.test_devices import gpus, nvml  # noqa: F401 (the double, as a fixture)
from tests.energy.test_meters import fake_powercap
from zeus_bso.energy import EnergyMeter, EstimateMeter, NVMLMeter, RAPLMeter
from zeus_bso.testing import MeterContract


class TestEstimateMeter(MeterContract):
    @pytest.fixture
    def meter(self) -> Iterator[EnergyMeter]:
        meter = EstimateMeter(150.0)
        yield meter
        meter.close()


class TestRAPLMeter(MeterContract):
    @pytest.fixture
    def meter(self, tmp_path: Path) -> Iterator[EnergyMeter]:
        fake_powercap(
            tmp_path,
            {0: (1_000_000, 10_000_000, 95_000_000), 1: (5_000_000, 10_000_000, 95_000_000)},
        )
        meter = RAPLMeter(tmp_path)
        yield meter
        meter.close()


class TestNVMLMeter(MeterContract):
    @pytest.fixture(params=[True, False], ids=["counter", "sampled"])
    def meter(self, request: pytest.FixtureRequest, nvml: Any) -> Iterator[EnergyMeter]:  # noqa: F811
        nvml.describe(gpus(100, 50, counter=request.param))
        meter = NVMLMeter()
        yield meter
        meter.close()
