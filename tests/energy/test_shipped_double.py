"""The NVML test double ships with the contracts (`zeus_bso.testing.gpus`): a process started
with `described_gpus`' environment reads the GPUs a test describes through ``import pynvml``,
and the package's NVML meter measures them, as a meter or adapter of one's own would be tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zeus_bso.testing.gpus import GPU_DOUBLE, described_gpus, double_in_this_process

ROOT = Path(__file__).resolve().parents[2]

READ = """
import json, time, pynvml
from zeus_bso.energy.nvml import NVMLMeter
pynvml.nvmlInit()
count = pynvml.nvmlDeviceGetCount()
names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
meter = NVMLMeter()
time.sleep(0.2)
joules = meter.energy()
meter.close()
print(json.dumps({"module": pynvml.__file__, "names": names, "joules": joules,
                  "max_power": meter.max_power}))
"""


def test_a_process_reads_the_gpus_a_test_describes(tmp_path: Path) -> None:
    gpus = [
        {"uuid": "GPU-11111111-1111-1111-1111-111111111111", "name": "NVIDIA H200", "watts": 100,
         "limit_w": 700, "counter": True},
        {"uuid": "GPU-22222222-2222-2222-2222-222222222222", "name": "NVIDIA H200", "watts": 300,
         "limit_w": 700, "counter": True},
    ]  # fmt: skip
    env = {**os.environ, **described_gpus(gpus, state=tmp_path, pythonpath=[ROOT / "src"])}
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(GPU_DOUBLE)
    done = subprocess.run(
        [sys.executable, "-c", READ], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    assert Path(read["module"]).parent == GPU_DOUBLE
    assert read["names"] == ["NVIDIA H200", "NVIDIA H200"]
    assert read["max_power"] == 1400
    # Both GPUs draw 400 W together for about 0.2 s (the process's sleep and its overhead).
    assert 0.2 * 400 * 0.9 < read["joules"] < 2.0 * 400


def test_a_step_of_the_wall_clock_does_not_move_the_energy_counter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A GPU's energy counter counts the energy drawn, whatever the wall clock says: NTP setting
    the clock on (as on a fresh machine's first minutes) moves neither a real counter nor the
    seconds a run measures (monotonic), so the double's must not move either; on the wall clock
    it read as if the GPUs drew more while the clock was set. Read over a limit change too,
    whose time the double keeps."""
    gpu = {"uuid": "GPU-33333333-3333-3333-3333-333333333333", "name": "NVIDIA H200",
           "watts": 300, "limit_w": 700}  # fmt: skip
    pynvml = double_in_this_process(monkeypatch, [gpu], tmp_path)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetPowerManagementLimit(handle, 200_000)  # 200 W from now

    def read() -> tuple[float, int, float]:
        """The counter, between the monotonic clock before and after it was read (a read
        reads the double's state file: under load it took milliseconds, 7% of a short wait)."""
        before = time.monotonic()
        return before, pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic()

    start = read()
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 3600.0)  # the wall clock set an hour on
    time.sleep(0.05)
    end = read()
    joules = (end[1] - start[1]) / 1000
    # 200 W over the time between the two reads, at least the time from the first's end to the
    # second's start, at most from the first's start to the second's end (an hour on the wall
    # clock would be 720 kJ).
    assert 200 * (end[0] - start[2]) - 0.1 <= joules <= 200 * (end[2] - start[0]) + 0.1
