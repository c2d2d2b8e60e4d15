"""Devices named alike in every process: which GPUs a process measures (``CUDA_VISIBLE_DEVICES`` by
index, UUID or MIG name), and how a run counts each device once over its ranks.

NVML is the test double of ``zeus_bso.testing.gpus`` (nvidia-ml-py's API, GPUs the test describes);
``tests/integrations/test_topology.py`` runs real multi-process fits over it, and
``tests/energy/test_meters.py`` reads a real GPU where there is one.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.energy.sampled import assert_sampled_apart_at_100_and_50_watts
from tests.helpers import nvml_double
from zeus_bso.energy import (
    Device,
    EnergyMeterError,
    EstimateMeter,
    MixedGpuModelsError,
    NVMLMeter,
    UnmeasurableDeviceError,
    auto_meter,
    device_meter,
    run_energy,
    run_gpus,
)
from zeus_bso.energy.device_meter import OUTAGE_READINGS, READ_TRIES, PowerSampler
from zeus_bso.testing.gpus import double_in_this_process, fail_counter_reads, paced_gpu

A100 = "NVIDIA A100-SXM4-40GB"


def gpus(*watts: float, name: str = A100, counter: bool = True) -> list[dict[str, Any]]:
    return [
        {"uuid": f"GPU-{i}{i}{i}{i}aaaa-0000-0000-0000-00000000000{i}", "name": name,
         "watts": w, "limit_w": 400, "counter": counter}
        for i, w in enumerate(watts)
    ]  # fmt: skip


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The double as ``pynvml`` for this test; describe GPUs with ``nvml.describe(...)``."""
    module = nvml_double(monkeypatch)

    def describe(described: list[dict[str, Any]]) -> None:
        monkeypatch.setenv("ZEUS_BSO_TEST_GPUS", json.dumps(described))

    module.describe = describe
    return module


def test_a_run_counts_each_device_once_and_adds_up_the_power_of_all_its_nodes() -> None:
    a = Device("GPU-a", A100, 400.0)
    b = Device("GPU-b", A100, 400.0)
    c = Device("GPU-c", A100, 300.0)
    # One node, two ranks that both see both GPUs; another node with one GPU.
    gpus_of_run = run_gpus([[a, b], [a, b], [c]])
    assert (gpus_of_run.number_of_gpus, gpus_of_run.max_power) == (3, 1100.0)
    assert gpus_of_run.gpu_model == A100
    # Each device's joules once: the lowest rank's reading.
    assert run_energy([{"GPU-a": 10.0, "GPU-b": 20.0}, {"GPU-a": 11.0, "GPU-b": 21.0}]) == 30.0
    assert run_energy([{"GPU-a": 10.0}, {"GPU-b": 20.0}, {"checkpoint": 5.0}]) == 35.0


def test_mixed_models_over_the_run_are_refused_by_type() -> None:
    a = Device("GPU-a", A100, 400.0)
    h = Device("GPU-h", "NVIDIA H100 80GB HBM3", 700.0)
    with pytest.raises(MixedGpuModelsError) as caught:
        run_gpus([[a], [h]])
    assert caught.value.models == [A100, "NVIDIA H100 80GB HBM3"]
    assert isinstance(caught.value, EnergyMeterError)


def test_a_meter_that_names_no_devices_counts_once_per_process() -> None:
    meter = EstimateMeter(100.0)
    (device,) = meter.devices
    assert device.key.startswith("estimate@")
    assert (device.model, device.max_power) == ("estimate", 100.0)
    assert list(meter.readings()) == [device.key]


def test_every_visible_gpu_is_named_by_its_uuid_and_read_from_its_counter(nvml: Any) -> None:
    nvml.describe(gpus(100, 50))
    start = time.monotonic()
    meter = NVMLMeter()
    assert [d.key for d in meter.devices] == [g["uuid"] for g in gpus(100, 50)]
    assert (meter.device_count, meter.max_power, meter.device_model) == (2, 800.0, A100)
    assert meter._sampler is None  # the counter is read
    time.sleep(0.2)
    first, second = meter.readings().values()
    total = meter.energy()
    elapsed = time.monotonic() - start
    # Each GPU's counter at its own power (100 W, 50 W) over the meter's life: at least the
    # sleep, at most the test (bounds, not a ratio: the two are read one after the other).
    assert 100 * 0.2 <= first <= 100 * elapsed
    assert 50 * 0.2 <= second <= 50 * elapsed
    assert first + second <= total <= 150 * elapsed


def test_a_counter_read_that_fails_is_tried_again_then_estimated_never_raised_mid_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """NVML answering ``Unknown Error`` or a timeout for a moment (a loaded driver) does not
    end the training the meter measures: the read is tried again (`READ_TRIES`), and a reading
    whose reads all fail is estimated at each GPU's recent power, with one warning. The
    counters are cumulative: the next read that succeeds is exact, and no reading gives less
    than the one before it. While readings are estimated, each tries one read, without waits."""
    described = gpus(100, 50)
    double_in_this_process(monkeypatch, described, tmp_path)
    opened = time.monotonic()
    meter = NVMLMeter()
    uuids = [gpu["uuid"] for gpu in described]
    # Before any reading there is no mean power to estimate from: a clear error.
    fail_counter_reads(tmp_path, uuids[0], [999] * READ_TRIES)
    with pytest.raises(EnergyMeterError, match="no reading yet to estimate"):
        meter.readings()
    time.sleep(0.1)
    meter.readings()
    fail_counter_reads(tmp_path, uuids[1], [10] * (READ_TRIES - 1))  # then it reads
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        retried = meter.readings()
    assert not caplog.records
    assert list(retried) == uuids
    time.sleep(0.1)
    # Two readings estimated: the first after `READ_TRIES` reads, the next (the outage known)
    # after one, with no waits.
    fail_counter_reads(tmp_path, uuids[0], [999] * (READ_TRIES + 1))
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        start = time.monotonic()
        estimated = meter.readings()
        later = meter.readings()
        faults = tmp_path / "gpu" / f"{uuids[0]}.faults.json"
        assert json.loads(faults.read_text()) == []  # the second tried one read
        again = meter.readings()
        elapsed = time.monotonic() - start
    assert [r.getMessage() for r in caplog.records] == [
        "zeus-bso: NVML's energy counter could not be read: Unknown Error (3 reads): readings "
        "are estimated at the devices' recent power until a read succeeds (the counters are "
        "cumulative: that one is exact)",
        "zeus-bso: the energy counters read again",
    ]
    # The estimates go on at each GPU's power (100 W, 50 W), as the counters do (the double's
    # GPUs draw their power all the time); the reading after them is exact again.
    for watts, uuid in zip((100, 50), uuids, strict=True):
        assert retried[uuid] < estimated[uuid] <= later[uuid] <= again[uuid]
        assert again[uuid] - retried[uuid] == pytest.approx(watts * (0.1 + elapsed), rel=0.5)
    assert again[uuids[0]] / (time.monotonic() - opened) == pytest.approx(100, rel=0.1)


def test_an_estimate_goes_on_at_the_power_of_the_last_readings_not_the_whole_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A GPU that drew 300 W, then 25 W (its limit lowered, as a profile does), whose counter
    then fails: the estimate goes on at 25 W, the power over the readings of the last
    `RATE_WINDOW_S` (here 0.3 s, readings kept 0.05 s apart), not at the mean since the meter
    began."""
    meters = sys.modules["zeus_bso.energy.device_meter"]  # the package's device_meter: a function
    monkeypatch.setattr(meters, "RATE_WINDOW_S", 0.3)
    monkeypatch.setattr(meters, "MARK_SPACING_S", 0.05)
    pynvml = double_in_this_process(monkeypatch, [paced_gpu()], tmp_path)
    meter = NVMLMeter()
    (uuid,) = [device.key for device in meter.devices]
    time.sleep(0.2)
    meter.readings()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetPowerManagementLimit(handle, 250_000)  # PACES: 25 W at 250 W
    for _ in range(8):
        time.sleep(0.06)
        last = meter.readings()[uuid]
    read_at = time.monotonic()
    fail_counter_reads(tmp_path, uuid, [999] * READ_TRIES)
    time.sleep(0.1)
    estimated = meter.readings()[uuid]
    since = time.monotonic() - read_at  # the retries' waits included
    # 25 W over the time since the last reading (the mean since the start: about 100 W).
    assert 25 * 0.8 * (since - 0.02) <= estimated - last <= 25 * 1.2 * since


def test_a_power_sampler_whose_readings_fail_counts_the_gap_at_the_last_power(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A GPU without an energy counter is sampled (NVML's power, every interval). While its
    readings fail, its joules went on at nothing, and a run that ended in the outage lost it:
    the time since the last reading counts at that reading's power (said once
    `OUTAGE_READINGS` failed in a row), and the next reading integrates the gap at its own."""
    failing = threading.Event()

    def watts() -> list[float]:
        if failing.is_set():
            raise OSError("NVML: Unknown Error")
        return [100.0]

    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        sampler = PowerSampler(watts, 1, 0.01, (OSError,), "test-sampler")
        try:
            start = time.monotonic()
            time.sleep(0.2)
            failing.set()
            time.sleep(0.4)
            (during,) = sampler.joules()
            during_s = time.monotonic() - start
            failing.clear()
            time.sleep(0.2)
            (after,) = sampler.joules()
            after_s = time.monotonic() - start
        finally:
            sampler.close()
    assert during == pytest.approx(100 * during_s, rel=0.15)  # not about 20 J
    assert after == pytest.approx(100 * after_s, rel=0.15)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"zeus-bso: the devices' power could not be read {OUTAGE_READINGS} times in a row "
        "(NVML: Unknown Error): the time since the last reading is counted at its power until "
        "one succeeds",
        "zeus-bso: the devices' power reads again",
    ]


def test_without_a_counter_each_gpu_is_sampled_on_its_own(nvml: Any) -> None:
    nvml.describe(gpus(100, 50, counter=False))
    assert_sampled_apart_at_100_and_50_watts(NVMLMeter(sample_interval=0.01))


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("1", [1]),
        ("1,0", [1, 0]),
        ("GPU-2222aaaa-0000-0000-0000-000000000002,GPU-0000", [2, 0]),  # a unique prefix does
        ("0,7,1", [0]),  # CUDA ignores the entry that names no GPU and every one after it
        ("GPU-", []),  # a prefix of every UUID names none
    ],
)
def test_cuda_visible_devices_is_read_as_cuda_reads_it(
    nvml: Any, monkeypatch: pytest.MonkeyPatch, visible: str, expected: list[int]
) -> None:
    described = gpus(100, 100, 100)
    nvml.describe(described)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    if not expected:
        with pytest.raises(EnergyMeterError, match="names none"):
            NVMLMeter()
        return
    meter = NVMLMeter()
    assert [d.key for d in meter.devices] == [described[i]["uuid"] for i in expected]


def test_a_mig_slice_is_a_clear_error_not_the_whole_gpu(
    nvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml.describe(gpus(100))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f3c1a2b-0000-5000-8000-000000000000")
    with pytest.raises(UnmeasurableDeviceError, match="MIG slice"):
        NVMLMeter()
    with pytest.raises(UnmeasurableDeviceError):
        auto_meter()  # not a reason to fall back to another meter: the choice is the user's
    whole = NVMLMeter(gpu_indices=[0])  # measuring the whole GPU, knowingly
    assert whole.device_count == 1


def test_mixed_models_in_one_process_are_refused_by_type_and_not_fallen_back_from(
    nvml: Any,
) -> None:
    described = gpus(100, 100)
    described[1]["name"] = "Tesla V100-SXM2-32GB"
    nvml.describe(described)
    with pytest.raises(MixedGpuModelsError):
        auto_meter()


def test_a_meter_of_gpus_by_uuid_measures_those_alone(nvml: Any) -> None:
    """``NVMLMeter(gpu_uuids=...)``: the GPUs of those UUIDs, as NVML names them or as torch
    does (``torch.cuda.get_device_properties(i).uuid``, without ``GPU-``), whatever
    ``CUDA_VISIBLE_DEVICES`` leaves visible; a UUID NVML does not have is an error."""
    described = gpus(100, 200, 300)
    nvml.describe(described)
    meter = NVMLMeter(gpu_uuids=[described[1]["uuid"].removeprefix("GPU-")])
    try:
        assert [device.key for device in meter.devices] == [described[1]["uuid"]]
        assert (meter.device_count, meter.max_power) == (1, 400.0)
    finally:
        meter.close()
    chosen = [described[2]["uuid"], described[0]["uuid"]]
    both = NVMLMeter(gpu_uuids=chosen)
    try:
        assert [device.key for device in both.devices] == chosen
    finally:
        both.close()
    with pytest.raises(EnergyMeterError, match="NVML has no GPU of UUID 0000-elsewhere"):
        NVMLMeter(gpu_uuids=["0000-elsewhere"])


def test_a_process_on_the_cpu_measures_what_auto_meter_does(nvml: Any) -> None:
    """`device_meter` measures one GPU for a process that trains on a CUDA device (checked on
    the GPU machine: tests/energy/test_meters.py); on the CPU, every visible GPU, as before."""
    torch = pytest.importorskip("torch", reason="pip install torch")

    nvml.describe(gpus(100, 200))
    meter = device_meter(torch.device("cpu"))
    try:
        assert meter.name == "nvml"
        assert meter.device_count == 2
    finally:
        meter.close()


@pytest.mark.parametrize(
    ("local_rank", "processes", "measured"),
    [("1", "2", [1]), ("0", "3", [0]), ("1", "1", [0, 1, 2]), (None, None, [0, 1, 2])],
)
def test_a_launched_process_measures_its_local_ranks_gpu(
    nvml: Any,
    monkeypatch: pytest.MonkeyPatch,
    local_rank: str | None,
    processes: str | None,
    measured: list[int],
) -> None:
    """`process_meter`, the meter of a run's process where none is given: in a launch of
    several processes on this node (``torchrun``, ``accelerate launch``: ``LOCAL_WORLD_SIZE``
    above 1), the visible GPU of its local rank, the one it trains on (two processes on a node
    of three GPUs counted all three, each); otherwise every visible GPU."""
    from zeus_bso.energy import process_meter

    described = gpus(100, 200, 300)
    nvml.describe(described)
    for name, value in (("LOCAL_RANK", local_rank), ("LOCAL_WORLD_SIZE", processes)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    meter = process_meter()
    try:
        assert [device.key for device in meter.devices] == [described[i]["uuid"] for i in measured]
    finally:
        meter.close()
    # Of the GPUs CUDA_VISIBLE_DEVICES leaves visible: local rank 1 trains on the second of them.
    if local_rank == "1" and processes == "2":
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
        meter = process_meter()
        try:
            assert [device.key for device in meter.devices] == [described[0]["uuid"]]
        finally:
            meter.close()
