"""`GpuPowerLimits` on the NVML test double: what a run leaves behind once restored, a record
whose PID another process took; and where NVML is missing, a usage error that says what to
change."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import pytest

from tests.helpers import one_settable_gpu, sigterm_a_forked_child
from zeus_bso.errors import PowerLimitError
from zeus_bso.power import GpuPowerLimits
from zeus_bso.power.limits import restore_orphaned


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
