"""`GpuPowerLimits` where NVML is missing: a usage error that says what to change."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from zeus_bso.errors import PowerLimitError
from zeus_bso.power import GpuPowerLimits


def test_without_nvidia_ml_py_power_limits_are_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: its import fails
    with pytest.raises(PowerLimitError, match=r"zeus-bso\[nvml\].*power_limit='optimize'"):
        GpuPowerLimits(tmp_path)
