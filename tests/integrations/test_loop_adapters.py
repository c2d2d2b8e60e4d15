"""The loop adapters on two CPU processes against a real server, with NVML's test double:
ZeusBSOAccelerate in examples/accelerate_loop.py under torchrun, and ZeusBSOFabric in
examples/fabric_loop.py started by Fabric's own launcher. One trial a recurrence for both
processes, each GPU's energy once, and the main process alone prints (and talks)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="pip install torch")

from tests.helpers import ServerProcess, load_module, sqlite_url
from tests.integrations.test_topology import A100, LIMIT_W, WATTS, environment, gpu
from tests.ports import free_port
from zeus_bso import JobSpec
from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter
from zeus_bso.scaling.lr import stepped_rate
from zeus_bso.testing import LoopAdapterContract, MakeAdapter, loop_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def loop_job_of_examples() -> JobSpec:
    """The loop examples' job (`examples/_common.py`)."""
    module = load_module("examples_common", EXAMPLES / "_common.py")
    job: JobSpec = module.loop_job("example")
    return job


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
        max_epochs = loop_job_of_examples().max_epochs
        pattern = rf"batch size \d+ \w+.* at epoch \d+ of {max_epochs}"
        assert all(re.search(pattern, p) for p in printed)
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


def adapter_of(kind: str) -> tuple[Any, Any]:
    """The adapter class and its framework object, in this one process on the CPU."""
    if kind == "accelerate":
        accelerate = pytest.importorskip("accelerate", reason="pip install 'zeus-bso[accelerate]'")
        from zeus_bso.integrations.accelerate import ZeusBSOAccelerate

        return ZeusBSOAccelerate, accelerate.Accelerator(cpu=True)
    fabric = pytest.importorskip("lightning.fabric", reason="pip install 'zeus-bso[lightning]'")
    from zeus_bso.integrations.fabric import ZeusBSOFabric

    return ZeusBSOFabric, fabric.Fabric(accelerator="cpu", devices=1)


def loop_spec(prefix: str) -> JobSpec:
    return JobSpec(
        job_id_prefix=prefix,
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.9,
        max_epochs=3,
        learning_curve_stop=False,
    )


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_loops_learning_rate_follows_the_batch_size_without_the_server_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    adapter, framework = adapter_of(kind)
    spec = loop_spec(f"noserver{kind}")
    url = f"http://127.0.0.1:{free_port()}"
    options = {"lr_rule": "linear", "reference_batch_size": 16}
    with adapter(framework, url, spec, energy_meter=EstimateMeter(100), **options) as bso:
        assert (bso.batch_size, bso.trial_number) == (spec.default_batch_size, None)
        # The loop builds its optimizer at the rate tuned at 16; at 32 it trains at twice it.
        import torch

        assert bso.learning_rate(0.1) == 0.2
        optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
        assert bso.scale(optimizer) == 2.0
        assert bso.scale(optimizer) == 2.0  # once: the second call changes nothing
        assert optimizer.param_groups[0]["lr"] == 0.1  # the schedule's; its steps take 0.2
        assert stepped_rate(optimizer) == 0.2
        bso.train_begin()
        assert not bso.report(0.5)
        assert bso.report(0.95)  # its target, judged here
    assert bso.outcome is not None
    assert (bso.outcome.converged, bso.outcome.offline) == (True, True)


class TestAccelerate(LoopAdapterContract):
    """`ZeusBSOAccelerate` on one CPU process passes the loop adapters' contract; Accelerate's
    own accumulation steps follow the session's."""

    @pytest.fixture
    def adapter(self) -> MakeAdapter:
        adapter, accelerator = adapter_of("accelerate")
        return lambda url, job, **options: adapter(accelerator, url, job, **options)

    @pytest.fixture
    def server_url(self, sqlite_server: ServerProcess) -> str:
        return sqlite_server.url

    def test_the_accelerator_accumulates_as_the_session_says(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        job = loop_job("accsteps")
        options = {"energy_meter": EstimateMeter(100), "max_micro_batch_size": 16}
        with adapter(server_url, job, **options) as bso:
            assert bso.accelerator.gradient_accumulation_steps == bso.accumulation_steps == 2
            bso.release("not trained in this test")
        assert bso.outcome is not None
        assert bso.outcome.accumulation_steps == 2  # the run's line says how it trained
        assert f"batch size {bso.batch_size} (2 accumulated micro-batches of 16)" in (
            bso.outcome.summary()
        )


class TestFabric(LoopAdapterContract):
    """`ZeusBSOFabric` on one CPU process passes the loop adapters' contract."""

    @pytest.fixture
    def adapter(self) -> MakeAdapter:
        adapter, fabric = adapter_of("fabric")
        return lambda url, job, **options: adapter(fabric, url, job, **options)

    @pytest.fixture
    def server_url(self, sqlite_server: ServerProcess) -> str:
        return sqlite_server.url
