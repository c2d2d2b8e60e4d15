"""`GpuPowerLimits` on the NVML test double: what a run leaves behind once restored, a record
whose PID another process took; and where NVML is missing, a usage error that says what to
change."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.helpers import GPU_DOUBLE, one_settable_gpu, sigterm_a_forked_child
from zeus_bso.energy import sharing
from zeus_bso.energy.device_meter import READ_TRIES
from zeus_bso.errors import PowerLimitError
from zeus_bso.power import GpuPowerLimits
from zeus_bso.power.limits import restore_orphaned
from zeus_bso.power.profiler import spread
from zeus_bso.testing.gpus import fail_counter_reads


def test_without_nvidia_ml_py_power_limits_are_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: its import fails
    with pytest.raises(PowerLimitError, match=r"zeus-bso\[nvml\].*power_limit='optimize'"):
        GpuPowerLimits(tmp_path)


UUID = "GPU-0000cafe-1111-2222-3333-444444444444"


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """One settable GPU of the NVML double (300 W); returns the run records' folder."""
    one_settable_gpu(monkeypatch, tmp_path, UUID)
    return tmp_path / "records"


def limit_now() -> float:
    nvml = sys.modules["pynvml"]
    return float(nvml.nvmlDeviceGetPowerManagementLimit(nvml.nvmlDeviceGetHandleByIndex(0))) / 1000


def test_once_restored_the_sigterm_handler_before_is_back(double: Path) -> None:
    """A process that goes on after a run (a notebook, the next recurrence) keeps no handler
    of a run that restored; one installed after ours (a framework's) is left alone."""

    def before(signum: int, frame: FrameType | None) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, before)
    try:
        limits = GpuPowerLimits(double)
        assert limits.set(250.0)
        assert limit_now() == 250.0
        ours = signal.getsignal(signal.SIGTERM)
        assert ours is not before  # SIGTERM restores first, while a GPU is set
        limits.restore()
        assert limit_now() == 300.0
        assert signal.getsignal(signal.SIGTERM) is before
        assert not list(double.glob("*.json"))

        later = GpuPowerLimits(double)
        assert later.set(225.0)

        def framework(signum: int, frame: FrameType | None) -> None:
            pass

        signal.signal(signal.SIGTERM, framework)  # installed after ours: not ours to take
        later.restore()
        assert limit_now() == 300.0
        assert signal.getsignal(signal.SIGTERM) is framework
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_record_whose_pid_another_process_reuses_is_restored(double: Path) -> None:
    """A killed run's record names its PID and when that process started: a process that
    runs under the same PID later is not the owner, so the next run restores the GPU."""
    limits = GpuPowerLimits(double)
    assert limits.set(250.0)
    (record,) = double.glob("*.json")
    saved = json.loads(record.read_text())
    assert saved["pid"] == os.getpid()
    # This process, its owner, runs: the GPU is left as it is.
    assert restore_orphaned(double) == []
    assert limit_now() == 250.0
    # The same PID, started at another time: the owner is gone.
    record.write_text(json.dumps({**saved, "started": "1"}))
    assert restore_orphaned(double) == [UUID]
    assert limit_now() == 300.0
    assert not record.exists()
    limits.restore()  # what it owned goes back to the same 300 W
    assert limit_now() == 300.0


def test_a_record_of_another_pid_namespace_is_left_to_its_own_run(double: Path) -> None:
    """Containers of a node that share its host name (Kubernetes' ``hostNetwork``) each have a
    PID namespace: a record's PID is looked up in the namespace it was written in only. A run
    took another container's owner, alive, for gone (its PID is none here) and put its GPU
    back while that run trained at its chosen limit."""
    limits = GpuPowerLimits(double)
    assert limits.set(250.0)
    (record,) = double.glob("*.json")
    saved = json.loads(record.read_text())
    assert saved["pid_namespace"] == os.readlink("/proc/self/ns/pid")
    elsewhere = {**saved, "pid": 4_000_000, "started": "1", "pid_namespace": "pid:[1]"}
    record.write_text(json.dumps(elsewhere))
    assert restore_orphaned(double) == []
    assert limit_now() == 250.0
    record.write_text(json.dumps({**elsewhere, "pid_namespace": saved["pid_namespace"]}))
    assert restore_orphaned(double) == [UUID]  # of this namespace: its owner is gone
    assert limit_now() == 300.0
    limits.restore()


def test_sigterm_in_the_middle_of_setting_a_limit_still_restores(double: Path) -> None:
    """The handler runs on the main thread, which the signal may have stopped while it holds
    the limits' lock (inside `set` or `restore`): it restores all the same."""
    handed_on = []

    def before(signum: int, frame: FrameType | None) -> None:
        handed_on.append(signum)

    previous = signal.signal(signal.SIGTERM, before)
    try:
        limits = GpuPowerLimits(double)
        assert limits.set(250.0)
        with limits._lock:  # as inside `set`, when the signal comes
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # the handler runs here, on this thread
        assert handed_on == [signal.SIGTERM]
        assert limit_now() == 300.0
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_forked_child_sent_sigterm_leaves_the_owner_s_limits_alone(double: Path) -> None:
    """A scheduler that cancels a job signals every process of it (``scancel``, ``kill -TERM
    -PGID``), DataLoader workers included, which inherit the handler: a worker owns no GPU, so
    it ends as by default, and the GPU stays at the run's limit until the run restores it."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        limits = GpuPowerLimits(double)
        assert limits.set(250.0)
        assert sigterm_a_forked_child() == signal.SIGTERM  # the worker ends as by default
        assert limit_now() == 250.0  # the run's, still
        assert list(double.glob("*.json"))  # and its record
        limits.restore()
        assert limit_now() == 300.0
    finally:
        signal.signal(signal.SIGTERM, previous)


def profile_quick_steps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, steps_per_epoch: int, **gpu: Any
) -> tuple[list[Any], int]:
    """A profiling run on the double's GPU, whose counter updates every 20 ms (``gpu``: more of
    its settings), in steps of about 1 ms: the profile it sends, and the steps it took."""
    from zeus_bso.power.run import PowerLimitRun
    from zeus_bso.spec import GpuConfig

    one_settable_gpu(monkeypatch, tmp_path, UUID)
    described = json.loads(os.environ["ZEUS_BSO_TEST_GPUS"])[0] | {"counter_period_s": 0.02}
    monkeypatch.setenv("ZEUS_BSO_TEST_GPUS", json.dumps([described | gpu]))
    limits = GpuPowerLimits(tmp_path / "records", gpu_indices=[0])
    assert limits.counter_period_s() == pytest.approx(0.02, rel=0.2)
    sent: list[Any] = []
    run_gpus = GpuConfig(max_power=300, number_of_gpus=1, gpu_model="NVIDIA A100-SXM4-40GB")
    run = PowerLimitRun(True, limits, lambda value: value, run_gpus, eta_knob=1.0)

    def chosen(profile: list[Any], limit_range_w: tuple[float, float]) -> float:
        # The server's answer: the lowest limit.
        sent.append(profile)
        return float(min(m.power_limit for m in profile))

    run.begin(None, True, chosen, steps_per_epoch)
    taken = 0
    while not sent and taken < steps_per_epoch:
        run.step_begin()
        time.sleep(0.001)
        run.step_end()
        taken += 1
    run.restore()
    (profile,) = sent
    return profile, taken


def test_quick_steps_are_profiled_over_many_updates_of_the_energy_counter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The GPU's counter updates every 20 ms (an H200's: every 100 ms) and a step takes about
    1 ms: the 40 steps a limit of a long epoch gets span two updates, and could read half its
    energy or one and a half times it. Each limit is measured over 20 updates instead, and
    reads the GPU's power at that limit within 15% (without: 48% off)."""
    paces = {"300": {"watts": 300.0}, "275": {"watts": 240.0}, "250": {"watts": 180.0}}
    with caplog.at_level("INFO", logger="zeus_bso.power.run"):
        profile, _ = profile_quick_steps(monkeypatch, tmp_path, 5000, paces=paces)
    assert [m.power_limit for m in profile] == [250.0, 275.0, 300.0]
    for measured in profile:
        watts = measured.energy_per_epoch / measured.time_per_epoch
        assert watts == pytest.approx(paces[f"{measured.power_limit:g}"]["watts"], rel=0.15)
    (lengthened,) = [r.getMessage() for r in caplog.records if "instead of 40" in r.getMessage()]
    said = re.search(r"spans 20 updates of the GPUs' energy counter \(every (\d+) ms\)", lengthened)
    assert said is not None, lengthened
    # As measured: the gaps between changes of the double's counter, 19 to 21 ms on a busy machine.
    assert int(said[1]) == pytest.approx(20, abs=3)


def test_a_short_first_epoch_measures_fewer_limits_each_long_enough(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten limits (300 W down to 75 W), a counter that updates every 20 ms and steps of about
    1 ms: each limit needs some 360 steps, and half of a 3000-step epoch has room for four such
    limits, not ten. Four are measured, evenly spread, each reading its power within 15% (5%
    from the counter, the rest from steps whose time changes after the first limit's)."""
    with caplog.at_level("INFO", logger="zeus_bso.power.run"):
        profile, taken = profile_quick_steps(monkeypatch, tmp_path, 3000)
    assert taken <= 1500  # inside the half of the epoch a profile may take
    # Four at steps of 1.1 ms; five where a loaded machine's steps take 1.5 ms.
    kept = sorted((m.power_limit for m in profile), reverse=True)
    assert 3 <= len(kept) < 10
    assert kept == spread([300.0 - 25 * i for i in range(10)], len(kept))
    for measured in profile:
        watts = measured.energy_per_epoch / measured.time_per_epoch
        assert watts == pytest.approx(min(300.0, measured.power_limit), rel=0.15)
    (said,) = [r.getMessage() for r in caplog.records if "instead of" in r.getMessage()]
    assert f"({', '.join(f'{w:g}' for w in kept)} W)" in said


def test_a_first_epoch_too_short_for_three_limits_warns_that_the_profile_is_coarse(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 60-step epoch has room for 8 of the ten limits at 2 + 5 steps (56 steps); a 20 ms
    counter wants 0.4 s a limit, some 360 steps: three limits of 2 + 16 steps are measured,
    each window some 20 ms."""
    with caplog.at_level("WARNING", logger="zeus_bso.power.run"):
        profile, taken = profile_quick_steps(monkeypatch, tmp_path, 60)
    assert [m.power_limit for m in profile] == [75.0, 175.0, 300.0]
    assert taken == 3 * (2 + 16)
    (coarse,) = [r.getMessage() for r in caplog.records if "coarse" in r.getMessage()]
    assert "even for 3 limits" in coarse
    assert "zeus-bso jobs reprofile" in coarse


def test_a_gpu_without_an_energy_counter_has_no_period_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A GPU older than Volta has no counter: nothing to wait half a second for."""
    nvml = one_settable_gpu(monkeypatch, tmp_path, UUID)
    described = json.loads(os.environ["ZEUS_BSO_TEST_GPUS"])[0] | {"counter": False}
    monkeypatch.setenv("ZEUS_BSO_TEST_GPUS", json.dumps([described]))
    limits = GpuPowerLimits(tmp_path / "records", gpu_indices=[0])
    reads = []
    read = nvml.nvmlDeviceGetTotalEnergyConsumption

    def counted(handle: Any) -> int:
        reads.append(handle)
        return int(read(handle))

    monkeypatch.setattr(nvml, "nvmlDeviceGetTotalEnergyConsumption", counted)
    assert limits.counter_period_s() is None
    assert len(reads) == 1  # not a loop of reads for half a second


KILLED = """
import os, signal, sys, time
from pathlib import Path
from zeus_bso.power import GpuPowerLimits

how = getattr(signal, sys.argv[2])
if how != signal.SIGKILL:  # its default, whatever this process inherited (nohup ignores SIGHUP)
    signal.signal(how, signal.SIG_DFL)
limits = GpuPowerLimits(Path(sys.argv[1]))
assert limits.set(250.0)
print("set", flush=True)
os.kill(os.getpid(), how)
time.sleep(30)
"""


@pytest.mark.parametrize("how", ["SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGABRT"])
def test_a_process_killed_by_any_signal_leaves_no_cap(double: Path, how: str) -> None:
    """SIGKILL (and the out-of-memory killer) and SIGABRT (an abort in C, which never returns
    to Python) end the process before any handler of its own: its watchdog restores the GPU as
    soon as it is gone, not the node's next run. The other signals whose default ends a process
    restore in the process, then end it so."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(GPU_DOUBLE.parent), str(root)])}
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(double), how],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -getattr(signal, how), done.stderr
    assert done.stdout.startswith("set")
    sys.modules["pynvml"].nvmlInit()  # this process's look at the GPU
    deadline = time.monotonic() + 10
    while (limit_now() != 300.0 or list(double.glob("*.json"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert limit_now() == 300.0, done.stderr
    assert not list(double.glob("*.json"))
    changes = json.loads((double.parent / "gpu" / f"{UUID}.json").read_text())["changes"]
    assert [mw / 1000 for _, mw in changes] == [250.0, 300.0]  # set, and put back once


def capped_before(double: Path, watts: float) -> None:
    """The double's GPU found at ``watts`` (a cap some earlier process left, or an
    operator's)."""
    state = double.parent / "gpu" / f"{UUID}.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"limit_mw": int(watts * 1000), "changes": [], "sets": 0}))


def test_a_gpu_found_capped_goes_back_to_its_default_not_to_the_cap(
    double: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A GPU left at 250 W (a run killed by an older release, another tool) with no record: the
    run says so, and puts it back at its default (300 W), not at the cap it found; with the
    operator's limit in the node's records (``operator.json``), at that."""
    capped_before(double, 250.0)
    limits = GpuPowerLimits(double)
    assert limits.set(275.0)
    assert "is at 250 W, below the 300 W it goes back to (its default)" in caplog.text
    limits.restore()
    assert limit_now() == 300.0

    double.mkdir(parents=True, exist_ok=True)
    (double / "operator.json").write_text(json.dumps({UUID: 225.0}))
    caplog.clear()
    limits = GpuPowerLimits(double)
    assert limits.set(275.0)
    assert "below" not in caplog.text  # found at 300 W: above the operator's 225 W
    limits.restore()
    assert limit_now() == 225.0


def test_an_unreadable_record_is_reported_and_the_gpu_set_and_restored(
    double: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A record left empty (a kill or a full disk while it was written, before 0.2 wrote them
    whole): the run that finds it says so, owns the GPU, sets it and restores it (it skipped
    the GPU for good, and profiled a limit it never set); the node's next run does the same for
    a GPU whose record alone is left."""
    double.mkdir(parents=True, exist_ok=True)
    (double / f"{UUID}.json").write_text("")
    limits = GpuPowerLimits(double)
    assert limits.set(250.0)
    assert "is not a readable record" in caplog.text
    assert limit_now() == 250.0
    limits.restore()
    assert limit_now() == 300.0
    assert not list(double.glob("*.json"))

    capped_before(double, 250.0)
    (double / f"{UUID}.json").write_text("{")
    assert restore_orphaned(double) == [UUID]
    assert limit_now() == 300.0
    assert not list(double.glob("*.json"))


def test_power_restore_puts_every_gpu_back_for_an_epilog(
    double: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``zeus-bso power restore``: a GPU left capped with its record (its run and watchdog both
    killed, as a container's end does) goes back at the record's limit, one with none at its
    default; a GPU the node lacks is a usage error."""
    from typer.testing import CliRunner

    from zeus_bso.cli.main import app
    from zeus_bso.power import records as node

    capped_before(double, 200.0)
    node.create(double, node.Record(UUID, 300.0, 300.0, 1, "1", None))
    monkeypatch.setenv("ZEUS_BSO_POWER_RECORDS", str(double))
    runner = CliRunner()
    result = runner.invoke(app, ["power", "restore"])
    assert result.exit_code == 0, result.output
    assert f"{UUID}: 200 W -> 300 W (the record of process 1)" in result.output
    assert limit_now() == 300.0
    assert not list(double.glob("*.json"))

    capped_before(double, 250.0)
    result = runner.invoke(app, ["power", "restore", "--gpu", UUID])
    assert f"{UUID}: 250 W -> 300 W (its default)" in result.output
    assert (
        runner.invoke(app, ["power", "restore"]).output.strip() == f"{UUID}: at 300 W (its default)"
    )
    wrong = runner.invoke(app, ["power", "restore", "--gpu", "GPU-nope"])
    assert wrong.exit_code == 2
    assert "no GPU GPU-nope on this node" in wrong.output


def test_the_slurm_epilog_restores_a_gpu_its_killed_step_left_capped(
    double: Path, tmp_path: Path
) -> None:
    """``integrations/slurm/epilog.sh``, run as Slurm runs it (a shell, its environment): the
    step's run and watchdog were killed together, and the epilog puts the GPU back at its
    record's limit; on a node without zeus-bso it does nothing and succeeds."""
    from zeus_bso.power import records as node

    epilog = Path(__file__).resolve().parents[2] / "integrations" / "slurm" / "epilog.sh"
    capped_before(double, 200.0)
    node.create(double, node.Record(UUID, 300.0, 300.0, 1, "1", None))
    command = Path(sys.executable).with_name("zeus-bso")
    env = {**os.environ, "ZEUS_BSO": str(command), "ZEUS_BSO_POWER_RECORDS": str(double),
           "PYTHONPATH": str(GPU_DOUBLE.parent)}  # fmt: skip
    done = subprocess.run([epilog], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"{UUID}: 200 W -> 300 W (the record of process 1)" in done.stdout
    state = json.loads((double.parent / "gpu" / f"{UUID}.json").read_text())
    assert state["limit_mw"] == 300_000
    assert not list(double.glob("*.json"))

    absent = {**env, "ZEUS_BSO": str(tmp_path / "no-zeus-bso")}
    done = subprocess.run([epilog], env=absent, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "")


def test_the_records_live_in_one_folder_per_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``$ZEUS_BSO_POWER_RECORDS`` first; else the node's folder where this process could make
    it (it is not made until a record is written); else the user's cache folder."""
    from zeus_bso.power import records as node

    cache = tmp_path / "cache"
    monkeypatch.setenv("ZEUS_BSO_POWER_RECORDS", str(tmp_path / "chosen"))
    assert node.records_folder(cache) == tmp_path / "chosen"
    monkeypatch.delenv("ZEUS_BSO_POWER_RECORDS")
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setattr(node, "NODE_FOLDER", run / "zeus-bso" / "power-limits")
    assert node.records_folder(cache) == run / "zeus-bso" / "power-limits"
    assert not (run / "zeus-bso").exists()
    (tmp_path / "a-file").write_text("")  # a folder that cannot be made under it
    monkeypatch.setattr(node, "NODE_FOLDER", tmp_path / "a-file" / "power-limits")
    assert node.records_folder(cache) == cache / "power_limits"


def test_sigterm_ignored_stays_ignored_and_the_limit_goes_back_with_the_run(
    double: Path,
) -> None:
    """A process that ignores SIGTERM goes on after one: the run keeps training at its limit,
    which goes back when the run restores it, not at the signal."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        limits = GpuPowerLimits(double)
        assert limits.set(250.0)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert limit_now() == 250.0
        limits.restore()
        assert limit_now() == 300.0
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_energy_counter_read_that_fails_is_tried_again_then_said_unread(
    double: Path, tmp_path: Path
) -> None:
    """A profile's reading of the GPUs' counters: a read NVML fails for a moment is tried again
    (`READ_TRIES`); one that fails every try is NaN, which the profile leaves out
    (tests/power/test_profiler.py), where it was 0 J: that limit looked free."""
    limits = GpuPowerLimits(double)
    try:
        first = limits.joules()
        fail_counter_reads(tmp_path, UUID, [999] * (READ_TRIES - 1))
        assert limits.joules() > first
        fail_counter_reads(tmp_path, UUID, [10] * READ_TRIES)
        assert math.isnan(limits.joules())
        assert limits.joules() > first
    finally:
        limits.restore()


def test_a_gpu_is_shared_by_the_processes_it_holds_beyond_the_runs_as_a_container_sees_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """NVML lists a GPU's processes by their IDs in the host's PID namespace. In a container
    with one of its own, the run's process is listed under a number it does not have there, and
    its power limits were refused ("processes [...] compute on it too"). Where NVML lists one
    that is not the run's, the processes this namespace sees holding the GPU's device file are
    counted instead: the run's alone, and as many as NVML lists, is the run's GPU."""
    device = tmp_path / "nvidia0"  # the GPU's device file (/dev/nvidia0), which CUDA holds open
    device.write_text("")
    monkeypatch.setattr(sharing, "DEVICE_FILE", str(tmp_path / "nvidia{minor}"))
    host_pid = 4_000_000  # no process of this namespace has it

    def limits_with(processes: list[int], run_pids: tuple[int, ...] = ()) -> GpuPowerLimits:
        one_settable_gpu(monkeypatch, tmp_path, UUID)
        described = json.loads(os.environ["ZEUS_BSO_TEST_GPUS"])
        monkeypatch.setenv(
            "ZEUS_BSO_TEST_GPUS", json.dumps([{**described[0], "processes": processes}])
        )
        return GpuPowerLimits(tmp_path / "records", run_pids=run_pids)

    with device.open():  # this process computes on the GPU: NVML lists it as host_pid
        limits_with([host_pid]).restore()
        with pytest.raises(PowerLimitError, match="shared with 1 process this one cannot see"):
            limits_with([host_pid, host_pid + 1])  # another container's too
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_APART, str(device)], stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None
        apart = int(holder.stdout.readline())
        try:
            with pytest.raises(PowerLimitError, match=f"shared with process {apart}: its"):
                limits_with([host_pid, host_pid + 1])  # a process of this container, not the run's
            limits_with([host_pid, host_pid + 1], run_pids=(apart,)).restore()  # a rank's
        finally:
            os.kill(apart, signal.SIGKILL)
            holder.wait()
        worker = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(device)], stdout=subprocess.PIPE, text=True
        )
        try:  # a process the run started (a DataLoader's worker, forked) is the run's
            assert worker.stdout is not None
            assert worker.stdout.readline() == "ready\n"
            limits_with([host_pid]).restore()
        finally:
            worker.kill()
            worker.wait()
    with pytest.raises(PowerLimitError, match="shared with 1 process this one cannot see"):
        limits_with([host_pid])  # this process no longer holds it: the one listed is not ours


def test_a_gpu_shared_through_mps_is_named_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Under MPS, NVML lists the MPS server as the GPU's process, whichever client the run is:
    the limit is refused (it would be every client's), and the message says MPS, not "a process
    this one cannot see"."""
    one_settable_gpu(monkeypatch, tmp_path, UUID)
    (described,) = json.loads(os.environ["ZEUS_BSO_TEST_GPUS"])
    server = {"processes": [4_000_000], "process_names": {"4000000": "nvidia-cuda-mps-server"}}
    monkeypatch.setenv("ZEUS_BSO_TEST_GPUS", json.dumps([described | server]))
    said = r"shared with the MPS server \(the GPU is shared through MPS: its limit is every"
    with pytest.raises(PowerLimitError, match=said):
        GpuPowerLimits(tmp_path / "records")


HOLD = "import sys, time; f = open(sys.argv[1]); print('ready', flush=True); time.sleep(60)"
"""A process that holds a file open, as one computing on a GPU holds its device file."""

HOLD_APART = """
import os, sys, time
if os.fork():  # the process started ends; its child, no longer of the starter's, holds the file
    os._exit(0)
f = open(sys.argv[1])
print(os.getpid(), flush=True)
time.sleep(60)
"""
"""A process that holds a file open, started apart from the test's process (reparented)."""
