"""The NVML test double ships with the contracts (`zeus_bso.testing.gpus`): a process started
with `described_gpus`' environment reads the GPUs a test describes through ``import pynvml``,
and the package's NVML meter measures them, as a meter or adapter of one's own would be tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from zeus_bso.testing.gpus import GPU_DOUBLE, described_gpus

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
