"""ZeusBSOAccelerate in a real Accelerate loop (examples/accelerate_loop.py) on two CPU processes
under torchrun, against a real server, with NVML's test double: one trial a recurrence for both
processes, each GPU's energy once, and the main process alone prints (and talks)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("accelerate", reason="pip install 'zeus-bso[accelerate]'")

from tests.helpers import ServerProcess, sqlite_url
from tests.integrations.test_topology import A100, LIMIT_W, WATTS, environment, gpu
from tests.ports import free_port
from zeus_bso.server_client import ServerClient

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "accelerate_loop.py"


def test_the_accelerate_example_on_two_processes(tmp_path: Path) -> None:
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path)
    try:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
            f"--master_port={free_port()}", str(EXAMPLE), "--server", server.url,
            "--recurrences", "2",
        ]  # fmt: skip
        done = subprocess.run(
            command, env=environment([gpu(0), gpu(1)]), capture_output=True, text=True,
            timeout=300, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        printed = [line for line in done.stdout.splitlines() if line.startswith("trial")]
        assert len(printed) == 2, done.stdout  # the main process's lines only
        assert all(re.search(r"batch size +\d+, \d+ epochs, cost [\d.]+ J", p) for p in printed)
        with ServerClient(server.url) as client:
            (job,) = [j for j in client.list_jobs() if j["job_id"].startswith("example-accel")]
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
