"""The check both GPU meters' sampling must pass (NVML's and upstream Zeus's)."""

from __future__ import annotations

import time

import pytest

from zeus_bso.energy.device_meter import DeviceMeter


def assert_sampled_apart_at_100_and_50_watts(meter: DeviceMeter) -> None:
    """``meter`` reads two GPUs without an energy counter, drawing 100 W and 50 W: each is
    sampled on its own, at about its power. Closes the meter."""
    try:
        assert meter._sampler is not None  # no counter: power is sampled
        time.sleep(0.3)
        first, second = meter.readings().values()
    finally:
        meter.close()
    assert first == pytest.approx(2 * second, rel=0.1)
    assert first == pytest.approx(100 * 0.3, rel=0.35)
