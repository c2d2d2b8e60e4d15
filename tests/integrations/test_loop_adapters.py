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

from tests.helpers import ServerProcess, sqlite_url, unique_id
from tests.integrations.test_topology import A100, LIMIT_W, WATTS, environment, gpu
from tests.ports import free_port
from zeus_bso import JobSpec
from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter
from zeus_bso.errors import ConfigurationError

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
def test_misconfigured_loops_leave_the_default_untouched(
    sqlite_server: ServerProcess, kind: str
) -> None:
    """A loop that raises a ConfigurationError releases its trial, three times over: the
    default batch size is still what the next run gets."""
    adapter, framework = adapter_of(kind)
    spec = loop_spec(unique_id(f"mis{kind}").replace("-", ""))
    made: list[Any] = []

    def misconfigured() -> None:
        with adapter(framework, sqlite_server.url, spec, energy_meter=EstimateMeter(100)) as bso:
            made.append(bso)
            bso.train_begin()
            raise ConfigurationError("a wrong setting of the script's")

    for _ in range(3):
        with pytest.raises(ConfigurationError, match="wrong setting"):
            misconfigured()
        bso = made[-1]
        assert bso.outcome is not None
        assert bso.outcome.reason == "not_trained"
    with ServerClient(sqlite_server.url) as client:
        (job,) = client.list_jobs(prefix=spec.job_id_prefix)
        state = client.job_state(job["job_id"])
    assert [t["status"] for t in state["trials"]] == ["released"] * 3
    assert state["next_run"]["batch_size"] == spec.default_batch_size


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_loop_without_a_server_trains_at_the_default(
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
        assert optimizer.param_groups[0]["lr"] == 0.2
        bso.train_begin()
        assert not bso.report(0.5)
        assert bso.report(0.95)  # its target, judged here
    assert bso.outcome is not None
    assert (bso.outcome.converged, bso.outcome.offline) == (True, True)


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_out_of_memory_in_a_loop_is_infeasible_and_the_loop_goes_on_at_a_size_that_fits(
    sqlite_server: ServerProcess, kind: str
) -> None:
    """Batches above 16 run out of memory: ``fit_in_memory`` marks the dispatched 32 infeasible
    and the loop trains at the server's next size; a later run that runs out of memory while
    training (64 never fits either) ends as infeasible when it leaves the ``with``."""
    adapter, framework = adapter_of(kind)
    spec = loop_spec(unique_id(f"oom{kind}").replace("-", ""))
    tried: list[int] = []

    def try_steps(size: int) -> None:
        tried.append(size)
        if size > 16:
            raise RuntimeError(f"CUDA out of memory. Tried to allocate {size} MiB")

    with adapter(framework, sqlite_server.url, spec, energy_meter=EstimateMeter(100)) as bso:
        assert bso.memory_unknown
        size = bso.fit_in_memory(try_steps)
        assert (size, bso.batch_size, tried) == (16, 16, [32, 16])
        bso.train_begin()
        while not bso.report(0.95):
            pass
    assert bso.outcome is not None
    assert bso.outcome.converged
    with ServerClient(sqlite_server.url) as client:
        (job,) = client.list_jobs(prefix=spec.job_id_prefix)
        state = client.job_state(job["job_id"])
    assert sorted((t["batch_size"], t["status"]) for t in state["trials"]) == [
        (16, "reported"),
        (32, "infeasible"),
    ]
    assert list(state["memory_caps"].values()) == [32]

    # Out of memory while training, at a size the server still dispatches (none above 32 is:
    # every later run gets 16 here), ends the run as infeasible and re-raises.
    def runs_out_of_memory() -> Any:
        with adapter(framework, sqlite_server.url, spec, energy_meter=EstimateMeter(100)) as bso:
            assert bso.batch_size == 16
            assert not bso.memory_unknown  # 16 ran on these GPUs: nothing to try
            bso.train_begin()
            made.append(bso)
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    made: list[Any] = []
    with pytest.raises(RuntimeError, match="out of memory"):
        runs_out_of_memory()
    bso = made[-1]
    assert bso.outcome is not None
    assert bso.outcome.reason == "out_of_memory"
    with ServerClient(sqlite_server.url) as client:
        state = client.job_state(job["job_id"])
    assert [t["status"] for t in state["trials"]].count("infeasible") == 2
    assert list(state["memory_caps"].values()) == [16]


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_loop_that_accumulates_trains_its_batch_size_in_micro_batches(
    sqlite_server: ServerProcess, kind: str
) -> None:
    """``max_micro_batch_size=16``: batch size 32 is two micro-batches of 16 (Accelerate's
    accumulation steps set to match), and the server keeps that the run accumulated."""
    adapter, framework = adapter_of(kind)
    spec = loop_spec(unique_id(f"acc{kind}").replace("-", ""))
    options = {"energy_meter": EstimateMeter(100), "max_micro_batch_size": 16}
    with adapter(framework, sqlite_server.url, spec, **options) as bso:
        assert (bso.batch_size, bso.micro_batch_size, bso.accumulation_steps) == (32, 16, 2)
        if kind == "accelerate":
            assert framework.gradient_accumulation_steps == 2
        assert bso.fit_in_memory(lambda size: None) == 16
        bso.train_begin()
        while not bso.report(0.95):
            pass
    with ServerClient(sqlite_server.url) as client:
        (job,) = client.list_jobs(prefix=spec.job_id_prefix)
        (trial,) = client.job_state(job["job_id"])["trials"]
    summary = (trial["batch_size"], trial["accumulation_steps"], trial["status"])
    assert summary == (32, 2, "reported")
