"""TrialProgress: the window of time and energy, and checkpoints that continue a trial."""

from __future__ import annotations

import pytest

from zeus_bso.client.progress import TrialProgress
from zeus_bso.energy import ProcessMeter
from zeus_bso.errors import ConfigurationError, ZeusBSOError
from zeus_bso.spec import TrialId


class CountingMeter(ProcessMeter):
    """A meter whose reading the test sets (joules since some origin)."""

    name = "counting"
    is_estimate = False
    max_power = 300.0
    device_count = 1
    device_model = "test"

    def __init__(self) -> None:
        self.reading = 1000.0

    def energy(self) -> float:
        return self.reading


TRIAL = TrialId(job_id="job-1", batch_size=32, trial_number=4)


def test_the_window_opens_at_begin_and_only_once() -> None:
    meter = CountingMeter()
    progress = TrialProgress(meter)
    meter.reading = 1500.0  # before training: set-up, not the trial's
    assert progress.energy() == 0.0
    progress.begin()
    meter.reading = 1600.0
    progress.begin()  # a second begin (e.g. a second on_train_begin) changes nothing
    meter.reading = 1750.0
    assert progress.energy() == 250.0
    assert progress.time() >= 0.0


def test_a_checkpoint_continues_the_trial_with_all_ranks_energy() -> None:
    meter = CountingMeter()
    progress = TrialProgress(meter)
    progress.trial = TRIAL
    assert TrialProgress(meter).checkpoint() == {}  # no trial yet: nothing to keep
    progress.begin()
    meter.reading = 1100.0
    assert progress.epoch_done() == 1
    assert progress.elapsed().joules == 100.0  # the reading the report is made of
    meter.reading = 1105.0  # read after the sample: not what the report stands for
    progress.reported(250.0)  # this rank's 100 J and another rank's 150 J
    meter.reading = 1130.0
    saved = progress.checkpoint()
    assert saved["trial"] == TRIAL.model_dump()
    assert saved["current_epoch"] == 1
    assert saved["energy"] == pytest.approx(280.0)  # the report's 250 J + 30 J since

    restarted = TrialProgress(CountingMeter())
    assert restarted.resume(saved) == TRIAL
    assert restarted.epochs == 1
    assert restarted.energy() == pytest.approx(280.0)
    assert restarted.time() == pytest.approx(saved["time"])
    restarted.begin()
    restarted.meter.reading += 20.0  # type: ignore[attr-defined]
    assert restarted.energy() == pytest.approx(300.0)


def test_a_wait_on_the_server_is_left_out_of_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`leave_out`: a wait on the server is neither the run's time nor its energy; a process
    that waited longer (the metric computed first, or another rank waiting for the answer)
    leaves out the same share of its joules since the mark. Before the window opens, or for no
    wait, nothing."""
    clock = [100.0]
    monkeypatch.setattr("zeus_bso.client.progress.time.monotonic", lambda: clock[0])
    meter = CountingMeter()
    progress = TrialProgress(meter)
    progress.leave_out(progress.mark(), 5.0)  # not begun: no mark, nothing left out
    progress.begin()
    clock[0], meter.reading = 110.0, 2000.0  # ten seconds of training, 1000 J
    mark = progress.mark()
    clock[0], meter.reading = 114.0, 2400.0  # a wait of 4 s, 400 J
    progress.leave_out(mark, 4.0)
    assert (progress.time(), progress.energy()) == (10.0, 1000.0)
    assert progress.elapsed().joules == 1000.0
    clock[0], meter.reading = 120.0, 3000.0  # six seconds more of training
    mark = progress.mark()
    clock[0], meter.reading = 124.0, 3400.0  # 4 s, of which 1 s on the server (a quarter)
    progress.leave_out(mark, 1.0)
    assert progress.time() == pytest.approx(19.0)
    assert progress.energy() == pytest.approx(1900.0)  # 2400 J, less 400 and 100
    progress.leave_out(progress.mark(), 0.0)  # no wait: nothing
    assert progress.time() == pytest.approx(19.0)


@pytest.mark.parametrize(
    "saved",
    [
        {},
        {"trial": TRIAL.model_dump(), "current_epoch": 1, "time": 2.0},
        {"trial": {"job_id": "j"}, "current_epoch": 1, "time": 2.0, "energy": 3.0},
        {"trial": TRIAL.model_dump(), "current_epoch": "x", "time": 2.0, "energy": 3.0},
        {"trial": TRIAL.model_dump(), "current_epoch": 1, "time": -2.0, "energy": 3.0},
    ],
)
def test_resuming_from_something_else_says_what_a_checkpoint_holds(saved: dict) -> None:
    progress = TrialProgress(CountingMeter())
    with pytest.raises(ZeusBSOError, match="current_epoch"):
        progress.resume(saved)
    assert progress.trial is None  # nothing half-restored


def test_resume_after_training_began_is_refused() -> None:
    progress = TrialProgress(CountingMeter())
    progress.begin()
    with pytest.raises(ZeusBSOError, match="before training begins"):
        progress.resume({"trial": TRIAL.model_dump(), "current_epoch": 1, "time": 1, "energy": 1})


def test_epochs_count_one_by_one_or_up_to_a_given_epoch() -> None:
    progress = TrialProgress(CountingMeter())
    assert progress.epoch_done() == 1
    assert progress.epoch_done(3) == 3  # a loop that validates every second epoch
    assert progress.epoch_done() == 4
    for epoch in (4, 2):
        with pytest.raises(ZeusBSOError, match=f"epoch {epoch} is not after the 4 epochs"):
            progress.epoch_done(epoch)
    assert progress.epochs == 4


class NotAMeter:
    """A meter written before meters declared their devices: no ``devices``, no ``readings``."""

    name = "old"
    is_estimate = False
    max_power = 300.0
    device_count = 1
    device_model = "test"

    def energy(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


def test_a_meter_without_devices_and_readings_is_refused_with_what_to_do() -> None:
    with pytest.raises(ConfigurationError, match=r"has no devices, readings .*ProcessMeter"):
        TrialProgress(NotAMeter())  # type: ignore[arg-type]
