"""The meter on upstream Zeus's device layer (``zeus-bso[zeus]``), run over the NVML test double
of ``zeus_bso.testing.gpus``: real Zeus code (``zeus.device``) reads GPUs that the test describes.
Zeus's AMD, Jetson and Apple paths need their hardware; what the meter does with their readings
is tested on Zeus's own measurement types.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.energy.sampled import assert_sampled_apart_at_100_and_50_watts
from zeus_bso.energy import EnergyMeterError, MixedGpuModelsError, auto_meter, run_gpus
from zeus_bso.energy.device_meter import READ_TRIES
from zeus_bso.energy.upstream_zeus import (
    INSTALL_HINT,
    ZeusMeter,
    soc_joules,
    visible_indices,
)
from zeus_bso.errors import ConfigurationError
from zeus_bso.testing.gpus import GPU_DOUBLE, fail_counter_reads

pytest.importorskip("zeus.device", reason=f"upstream Zeus is not installed here ({INSTALL_HINT})")

DOUBLE = GPU_DOUBLE / "pynvml.py"
A100 = "NVIDIA A100-SXM4-40GB"
GH200 = "NVIDIA GH200 480GB"


def gpus(*watts: float, name: str = A100, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"uuid": f"GPU-{i}{i}{i}{i}bbbb-0000-0000-0000-00000000000{i}", "name": name,
         "watts": w, "limit_w": 400, **extra}
        for i, w in enumerate(watts)
    ]  # fmt: skip


def _forget_zeus() -> None:
    """Zeus keeps its GPUs in a module-level singleton: a fresh import sees the GPUs anew."""
    for name in [n for n in sys.modules if n == "zeus" or n.startswith("zeus.")]:
        del sys.modules[name]


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The double as ``pynvml`` for Zeus; describe GPUs with ``nvml.describe(...)`` and call
    ``nvml.fresh()`` before a meter that should see another environment."""
    spec = importlib.util.spec_from_file_location("pynvml", DOUBLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in [n for n in sys.modules if n == "zeus" or n.startswith("zeus.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ZEUSD_SOCK_PATH", raising=False)

    def describe(described: list[dict[str, Any]]) -> None:
        monkeypatch.setenv("ZEUS_BSO_TEST_GPUS", json.dumps(described))

    module.describe = describe
    module.fresh = _forget_zeus
    yield module
    _forget_zeus()


def test_each_visible_gpu_is_read_from_its_counter_and_named_by_host_and_physical_index(
    nvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml.describe(gpus(100, 50))
    start = time.monotonic()
    meter = ZeusMeter()
    host = socket.gethostname()
    assert [d.key for d in meter.devices] == [f"zeus-nvidia@{host}:0", f"zeus-nvidia@{host}:1"]
    assert (meter.device_count, meter.max_power, meter.device_model) == (2, 800.0, A100)
    assert (meter.scope, meter._sampler, meter.is_estimate) == ("gpu", None, False)
    time.sleep(0.3)
    first, second = meter.readings().values()
    elapsed = time.monotonic() - start
    # Each GPU's counter at its own power over the meter's life: at least the sleep, at most
    # the test (bounds, not a ratio: the two are read one after the other).
    assert 100 * 0.3 <= first <= 100 * elapsed
    assert 50 * 0.3 <= second <= 50 * elapsed
    # A rank that sees only the second GPU names it as the first rank does: counted once.
    nvml.fresh()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    narrowed = ZeusMeter()
    assert [d.key for d in narrowed.devices] == [f"zeus-nvidia@{host}:1"]
    run = run_gpus([meter.devices, narrowed.devices])
    assert (run.number_of_gpus, run.max_power) == (2, 800.0)


def test_gpu_indices_pick_visible_gpus_and_a_gpu_it_cannot_see_is_a_usage_error(
    nvml: Any,
) -> None:
    nvml.describe(gpus(100, 50, 25))
    meter = ZeusMeter([2])
    assert [d.key.rsplit(":", 1)[1] for d in meter.devices] == ["2"]
    with pytest.raises(ConfigurationError, match="sees 3"):
        ZeusMeter([3])


def test_a_counter_read_that_fails_mid_run_is_estimated_not_raised(
    nvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Zeus's error for a read NVML failed (``Unknown Error``) is tried again, then estimated
    at the GPU's mean power so far, as `NVMLMeter`'s is (tests/energy/test_devices.py)."""
    described = gpus(100)
    nvml.describe(described)
    monkeypatch.setenv("ZEUS_BSO_TEST_GPU_STATE", str(tmp_path / "gpu"))
    meter = ZeusMeter()
    time.sleep(0.1)
    (before,) = meter.readings().values()
    read_at = time.monotonic()
    fail_counter_reads(tmp_path, described[0]["uuid"], [999] * READ_TRIES)
    (estimated,) = meter.readings().values()
    (after,) = meter.readings().values()
    assert before < estimated <= after
    assert (after - before) / (time.monotonic() - read_at) == pytest.approx(100, rel=0.2)


def test_a_gpu_without_a_counter_is_sampled(nvml: Any) -> None:
    nvml.describe(gpus(100, 50, counter=False))
    assert_sampled_apart_at_100_and_50_watts(ZeusMeter(sample_interval=0.01))


def test_a_grace_hopper_reading_is_labelled_as_the_whole_module(nvml: Any) -> None:
    nvml.describe(gpus(300, name=GH200, limit_w=900, c2c=True))
    meter = ZeusMeter()
    assert meter.scope == "module"
    assert meter.device_model == f"{GH200} (module: Grace CPU + Hopper GPU)"
    assert meter.max_power == 900.0


def test_mixed_models_in_one_process_are_refused_by_type(nvml: Any) -> None:
    nvml.describe([*gpus(100), *gpus(100, name="NVIDIA H100 80GB HBM3")])
    with pytest.raises(MixedGpuModelsError):
        ZeusMeter()


def test_no_gpu_and_no_soc_is_a_meter_error_and_auto_selection_goes_on(nvml: Any) -> None:
    nvml.describe([])
    with pytest.raises(EnergyMeterError, match="no GPU and no system on a chip"):
        ZeusMeter()
    nvml.fresh()
    assert auto_meter().name in ("rapl", "estimate")


def test_auto_selection_takes_zeus_where_nvml_cannot_measure(
    nvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML first; where it fails (here: its import), the first meter that measures is Zeus's."""
    nvml.describe(gpus(100))
    import zeus_bso.energy.auto as auto

    def no_nvml(gpu_indices: list[int] | None = None) -> Any:
        raise EnergyMeterError("NVML needs nvidia-ml-py")

    monkeypatch.setattr(auto, "NVMLMeter", no_nvml)
    meter = auto_meter()
    assert isinstance(meter, ZeusMeter)
    assert meter.device_model == A100


def test_without_zeus_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zeus.device.gpu", None)
    with pytest.raises(EnergyMeterError, match=r"zeus-bso\[zeus\]"):
        ZeusMeter()


def test_soc_readings_cover_the_chip() -> None:
    from zeus.device.soc.apple import AppleSiliconMeasurement
    from zeus.device.soc.jetson import JetsonMeasurement

    assert soc_joules(JetsonMeasurement(cpu_energy_mj=1000, gpu_energy_mj=2000)) == 3.0
    whole = JetsonMeasurement(cpu_energy_mj=1000, gpu_energy_mj=2000, total_energy_mj=4500)
    assert soc_joules(whole) == 4.5
    apple = AppleSiliconMeasurement(
        cpu_total_mj=1000, gpu_mj=2000, gpu_sram_mj=100, ane_mj=400, dram_mj=500,
        efficiency_cores_mj=[300, 200],  # parts of cpu_total_mj: not counted again
    )  # fmt: skip
    assert soc_joules(apple) == 4.0


@pytest.mark.parametrize(
    ("vendor", "environ", "expected"),
    [
        ("nvidia", {}, None),
        ("nvidia", {"CUDA_VISIBLE_DEVICES": "2,3"}, [2, 3]),
        ("nvidia", {"HIP_VISIBLE_DEVICES": "1"}, None),
        ("amd", {"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}, [1]),
        ("amd", {"CUDA_VISIBLE_DEVICES": "0,2"}, [0, 2]),
    ],
)
def test_physical_indices_are_read_as_zeus_reads_them(
    vendor: str, environ: dict[str, str], expected: list[int] | None
) -> None:
    assert visible_indices(vendor, environ) == expected
