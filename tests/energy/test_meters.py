"""Energy meters: the estimate, RAPL on a powercap tree, NVML on a GPU (skipped without one)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from zeus_bso.energy import EnergyMeterError, EstimateMeter, NVMLMeter, RAPLMeter, auto_meter
from zeus_bso.errors import ConfigurationError, ZeusBSOError


def test_estimate_is_time_times_watts_and_says_so_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zeus_bso.energy.estimate as estimate

    monkeypatch.setattr(estimate, "_announced", False)
    meter = EstimateMeter(250.0)
    EstimateMeter(100.0)
    assert caplog.text.count("ESTIMATED") == 1
    time.sleep(0.05)
    energy = meter.energy()
    assert 250.0 * 0.05 <= energy < 250.0 * 2.0
    assert meter.is_estimate
    assert meter.max_power == 250.0
    with pytest.raises(ConfigurationError, match="positive") as refused:
        EstimateMeter(0)
    # A usage error: of ours (ZeusBSOError) and, as Python's argument errors are, a ValueError.
    assert isinstance(refused.value, ValueError)
    assert isinstance(refused.value, ZeusBSOError)
    assert refused.value.exit_code == 2


def fake_powercap(root: Path, packages: dict[int, tuple[int, int, int]]) -> None:
    """packages: index -> (energy_uj, max_energy_range_uj, max_power_uw)."""
    for index, (energy, range_uj, power) in packages.items():
        domain = root / f"intel-rapl:{index}"
        domain.mkdir(parents=True)
        (domain / "name").write_text(f"package-{index}\n")
        (domain / "energy_uj").write_text(f"{energy}\n")
        (domain / "max_energy_range_uj").write_text(f"{range_uj}\n")
        (domain / "constraint_0_max_power_uw").write_text(f"{power}\n")
        sub = root / f"intel-rapl:{index}:0"  # a sub-domain (core): not counted
        sub.mkdir()


def test_rapl_sums_packages_and_survives_wraparound(tmp_path: Path) -> None:
    fake_powercap(
        tmp_path, {0: (1_000_000, 10_000_000, 95_000_000), 1: (5_000_000, 10_000_000, 95_000_000)}
    )
    meter = RAPLMeter(tmp_path)
    assert (meter.device_count, meter.max_power, meter.device_model) == (2, 190.0, "cpu-package-0")
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("3000000\n")  # +2 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("1000000\n")  # wrapped: +6 J
    assert meter.energy() == pytest.approx(8.0)
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("4000000\n")  # +1 J
    assert meter.energy() == pytest.approx(9.0)


def test_rapl_without_counters_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EnergyMeterError, match="no RAPL package domains"):
        RAPLMeter(tmp_path)


def test_rapl_on_this_machine_when_readable() -> None:
    try:
        meter = RAPLMeter()
    except EnergyMeterError as err:
        pytest.skip(f"RAPL is not readable here: {err}")
    first = meter.energy()
    time.sleep(0.1)
    assert meter.energy() >= first


def test_auto_meter_always_gives_a_meter() -> None:
    meter = auto_meter(estimate_watts=123.0)
    assert meter.energy() >= 0.0
    assert meter.max_power > 0


@pytest.mark.gpu
def test_nvml_on_a_gpu() -> None:
    """The real NVML: every visible GPU named by its UUID, a power limit, a counter that only
    grows, and readings per GPU that add up to the meter's energy."""
    try:
        meter = NVMLMeter()
    except EnergyMeterError as err:
        pytest.skip(f"needs an NVIDIA GPU with NVML (run on the GPU machine): {err}")
    try:
        assert meter.device_count >= 1
        assert meter.max_power > 0
        assert len(meter.devices) == meter.device_count
        assert all(device.key.startswith("GPU-") for device in meter.devices)
        assert len({device.key for device in meter.devices}) == meter.device_count
        assert sum(device.max_power for device in meter.devices) == meter.max_power
        first = meter.energy()
        time.sleep(0.5)
        readings = meter.readings()
        assert set(readings) == {device.key for device in meter.devices}
        assert all(joules >= 0 for joules in readings.values())
        assert meter.energy() >= sum(readings.values()) >= first
    finally:
        meter.close()


@pytest.mark.gpu
def test_a_process_on_a_cuda_device_measures_that_gpu_alone() -> None:
    """`device_meter` of CUDA device 0: NVML's meter of that GPU alone, found by the UUID torch
    gives it (a Lightning rank measures its own GPU, not every GPU it sees)."""
    torch = pytest.importorskip("torch", reason="pip install torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (run on the GPU machine)")
    from zeus_bso.energy import device_meter

    meter = device_meter(torch.device("cuda", 0))
    try:
        assert meter.name == "nvml"
        uuid = str(torch.cuda.get_device_properties(0).uuid)
        assert [device.key.removeprefix("GPU-") for device in meter.devices] == [uuid]
    finally:
        meter.close()


def test_rapl_reads_often_enough_to_count_every_wrap(tmp_path: Path) -> None:
    """A counter that wraps several times between two readings of the meter: its poller saw
    each wrap (a reader that only compared the two readings would count one at most)."""
    range_uj = 1_000_000  # 1 J, then the counter starts again from 0
    fake_powercap(tmp_path, {0: (0, range_uj - 1, 95_000_000)})
    meter = RAPLMeter(tmp_path, poll_seconds=0.005)
    try:
        counter = tmp_path / "intel-rapl:0" / "energy_uj"
        value = 0
        for _ in range(10):  # 0.4 J a step: 4 J in all, four wraps
            value = (value + 400_000) % range_uj
            counter.write_text(f"{value}\n")
            time.sleep(0.05)  # ten polls a step
        assert meter.energy() == pytest.approx(4.0)
    finally:
        meter.close()


def test_rapl_polls_at_least_four_times_a_wrap_and_once_a_minute(tmp_path: Path) -> None:
    fake_powercap(tmp_path, {0: (0, 262_143_328_850, 200_000_000)})  # 262 kJ at 200 W: 22 min
    meter = RAPLMeter(tmp_path)
    assert meter.poll_seconds == 60.0
    meter.close()
    fake_powercap(tmp_path / "small", {0: (0, 2_000_000_000, 200_000_000)})  # 10 s to a wrap
    meter = RAPLMeter(tmp_path / "small")
    assert meter.poll_seconds == pytest.approx(2.5)
    meter.close()
