"""The loop adapters on two CPU processes against a real server, with NVML's test double:
ZeusBSOAccelerate in examples/accelerate_loop.py under torchrun, and ZeusBSOFabric in
examples/fabric_loop.py started by Fabric's own launcher. One trial a recurrence for both
processes, each GPU's energy once, and the main process alone prints (and talks)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="pip install torch")

from tests.helpers import ServerProcess, sqlite_url
from tests.integrations.test_topology import A100, LIMIT_W, WATTS, environment, gpu
from tests.ports import free_port
from zeus_bso.client import ServerClient

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("adapter", ["accelerate", "fabric"])
def test_a_loop_example_on_two_processes(tmp_path: Path, adapter: str) -> None:
    module, extra = {"accelerate": ("accelerate", "accelerate"),
                     "fabric": ("lightning.fabric", "lightning")}[adapter]  # fmt: skip
    pytest.importorskip(module, reason=f"pip install 'zeus-bso[{extra}]'")
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path)
    env = environment([gpu(0), gpu(1)])
    common = ["--server", server.url, "--recurrences", "2"]
    if adapter == "accelerate":
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
            f"--master_port={free_port()}", str(EXAMPLES / "accelerate_loop.py"), *common,
        ]  # fmt: skip
    else:  # Fabric's launcher starts the second process
        command = [sys.executable, str(EXAMPLES / "fabric_loop.py"), *common, "--devices", "2"]
        env["MASTER_PORT"] = str(free_port())
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-4000:]
        printed = [line for line in done.stdout.splitlines() if line.startswith("zeus-bso: ")]
        assert len(printed) == 2, done.stdout  # the main process's lines only
        # Each run's line, through the framework's print (the main process's).
        assert all(re.search(r"batch size \d+ \w+.* at epoch \d+ of 15", p) for p in printed)
        with ServerClient(server.url) as client:
            (job,) = client.list_jobs(prefix=f"example-{adapter}")
            state = client.job_state(job["job_id"])
    finally:
        server.stop()
    assert (state["job"]["number_of_gpus"], state["job"]["gpu_model"]) == (2, A100)
    assert state["job"]["max_power"] == pytest.approx(2 * LIMIT_W)
    trials = state["trials"]
    assert len(trials) == 2  # one trial a recurrence, not one a process
    for trial in trials:
        assert trial["status"] == "reported"
        assert trial["energy"] / trial["time"] == pytest.approx(2 * WATTS, rel=0.1)
