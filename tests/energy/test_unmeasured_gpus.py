"""GPUs that no meter measures (their vendor's bindings not installed, the commonest cause): a run
there would learn the batch size that saves its CPU packages' energy (RAPL) or its time (the
estimate), not the GPUs'. Said once a process, with the fix, and by ``zeus-bso check`` as a
failure; never for a process that trains on the CPU. The GPUs are files in folders standing in
for ``/dev`` (NVIDIA's driver's ``nvidiaN``) and AMD's KFD topology, NVML's bindings and
upstream Zeus are made unimportable, and RAPL reads a powercap tree of the test's."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from typer.testing import CliRunner

import zeus_bso.energy.auto as auto
import zeus_bso.energy.estimate as estimate
import zeus_bso.energy.unmeasured as unmeasured
from tests.energy.test_meters import fake_powercap
from zeus_bso.cli.main import app
from zeus_bso.energy import RAPLMeter
from zeus_bso.energy.auto import auto_meter, device_meter
from zeus_bso.energy.unmeasured import amd_gpus_here, nvidia_gpus_here

UNMEASURED = "NVIDIA GPUs here, but no meter measures them (NVML needs nvidia-ml-py"


def gpu_files(root: Path, names: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).touch()
    return root


def test_the_gpus_are_the_kernels_files_that_cuda_visible_devices_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = gpu_files(tmp_path, ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvidia_gpus_here(dev) == 2
    for visible, count in [("0", 1), ("1,0", 2), ("GPU-a,GPU-b,GPU-c", 2), ("", 0), ("-1", 0)]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert nvidia_gpus_here(dev) == count, visible
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvidia_gpus_here(tmp_path / "no-such-folder") == 0


def kfd_nodes(root: Path, gpu_ids: list[int]) -> Path:
    """AMD's KFD topology: a node each, a CPU's with gpu_id 0."""
    for index, gpu_id in enumerate(gpu_ids):
        (root / str(index)).mkdir(parents=True)
        (root / str(index) / "gpu_id").write_text(f"{gpu_id}\n")
    return root


def test_amd_gpus_are_the_kfd_nodes_with_a_gpu_id_that_hip_visible_devices_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = kfd_nodes(tmp_path, [0, 0, 51234, 61234, 7134])
    for variable in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(variable, raising=False)
    assert amd_gpus_here(nodes) == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert amd_gpus_here(nodes) == 1
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0,2")  # HIP's own, first
    assert amd_gpus_here(nodes) == 2
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "-1")
    assert amd_gpus_here(nodes) == 0


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two NVIDIA GPUs, no NVML bindings (nor upstream Zeus's, which need them), and RAPL that
    reads the powercap tree under the returned folder once the test writes one."""
    dev = gpu_files(tmp_path / "dev", ["nvidia0", "nvidia1"])
    monkeypatch.setattr(unmeasured, "DEVICE_FILES", dev)
    monkeypatch.setattr(unmeasured, "KFD_NODES", tmp_path / "kfd")  # AMD's: none until written
    for variable in (
        "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "LOCAL_RANK"
    ):  # fmt: skip
        monkeypatch.delenv(variable, raising=False)
    no_module: ModuleType | None = None
    monkeypatch.setitem(sys.modules, "pynvml", no_module)
    monkeypatch.setitem(sys.modules, "zeus", no_module)
    powercap = tmp_path / "powercap"
    monkeypatch.setattr(auto, "METERS", (*auto.METERS[:-1], lambda _: RAPLMeter(powercap)))
    monkeypatch.setattr(auto, "_UNMEASURED_SAID", False)
    monkeypatch.setattr(estimate, "_announced", False)
    return powercap


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_run_measuring_the_cpu_packages_beside_gpus_says_so_once_with_the_fix(
    machine: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_powercap(machine, {0: (1_000_000, 10_000_000, 95_000_000)})
    with caplog.at_level(logging.WARNING):
        meters = [auto_meter(), auto_meter()]
    try:
        assert [meter.name for meter in meters] == ["rapl", "rapl"]  # the choice is unchanged
        (warning,) = said(caplog)  # once a process
        assert "2 " + UNMEASURED in warning
        assert "a run's energy would be the CPU packages' (RAPL), not the GPUs'" in warning
        assert "pip install 'zeus-bso[nvml]'" in warning
    finally:
        for meter in meters:
            meter.close()


def test_a_container_without_the_drivers_nvml_library_is_told_how_to_get_it(
    machine: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML's bindings installed, the driver's library not (a container given GPUs without the
    driver's utilities): this machine's own NVML, where its library is missing."""
    monkeypatch.delitem(sys.modules, "pynvml")  # the machine's bindings, not none
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        if "Shared Library Not Found" not in str(err):
            pytest.skip(f"NVML fails otherwise here: {err}")
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML's library is here")
    with caplog.at_level(logging.WARNING):
        auto_meter()
    (warning,) = said(caplog)
    assert "2 NVIDIA GPUs here, but no meter measures them (NVML is not available here: NVML " in (
        warning
    )
    assert "give the process the driver's NVML library (a container: " in warning
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility, or all)" in warning
    assert "pip install" not in warning


def test_of_a_nodes_processes_the_first_says_it(
    machine: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every process of a launch on the node would say the same: its first alone does."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    with caplog.at_level(logging.WARNING):
        auto_meter()
    assert said(caplog) == []
    monkeypatch.setenv("LOCAL_RANK", "0")
    with caplog.at_level(logging.WARNING):
        auto_meter()
    assert len(said(caplog)) == 1


def test_an_estimate_beside_gpus_is_said_in_one_line(
    machine: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        meter = auto_meter(estimate_watts=250.0)
    assert meter.is_estimate
    (warning,) = said(caplog)  # not the estimate's own line besides
    assert "2 " + UNMEASURED in warning
    assert "ESTIMATED as time x 250 W, not the GPUs'" in warning


def test_a_process_on_the_cpu_or_shown_no_gpu_is_not_warned(
    machine: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_powercap(machine, {0: (1_000_000, 10_000_000, 95_000_000)})
    with caplog.at_level(logging.WARNING):
        on_cpu = device_meter(SimpleNamespace(type="cpu"))  # a Lightning fit on the CPU
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        hidden = auto_meter()
    on_cpu.close()
    hidden.close()
    assert said(caplog) == []


def test_a_fit_on_a_cuda_device_nvml_cannot_find_is_warned_of_its_gpu(
    machine: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch = pytest.importorskip("torch")
    with caplog.at_level(logging.WARNING):
        meter = device_meter(torch.device("cuda", 0))
    meter.close()
    (warning,) = said(caplog)
    assert "1 NVIDIA GPU here, but no meter measures it (NVML needs nvidia-ml-py" in warning


def test_amd_gpus_without_upstream_zeus_are_said_with_its_fix(
    machine: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unmeasured, "DEVICE_FILES", machine / "no-nvidia")
    kfd_nodes(unmeasured.KFD_NODES, [0, 1234, 5678])
    fake_powercap(machine, {0: (1_000_000, 10_000_000, 95_000_000)})
    with caplog.at_level(logging.WARNING):
        meter = auto_meter()
    meter.close()
    (warning,) = said(caplog)
    assert "2 AMD GPUs here, but no meter measures them (upstream Zeus's meter needs zeus" in (
        warning
    )
    assert "install upstream Zeus (pip install 'zeus-bso[zeus]') and amdsmi" in warning


def test_check_fails_the_energy_of_gpus_no_meter_measures(machine: Path) -> None:
    fake_powercap(machine, {0: (1_000_000, 10_000_000, 95_000_000)})
    checked = CliRunner().invoke(app, ["check", "--server", "http://127.0.0.1:9"])
    out = " ".join(checked.stdout.split())
    assert checked.exit_code == 1
    assert "FAIL energy: 2 " + UNMEASURED in out, out
    assert "note power limits: not checked: see energy" in out
