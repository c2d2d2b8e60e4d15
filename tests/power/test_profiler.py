"""`PowerProfiler` alone: the sequence of limits over the steps, and what it measures, with a
clock and an energy reading that the test drives."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import one_settable_gpu
from zeus_bso.errors import ConfigurationError, PowerLimitError
from zeus_bso.policy.power import profile_goes_on
from zeus_bso.power import PowerProfiler
from zeus_bso.power.limits import restore_gpus
from zeus_bso.power.profiler import (
    MAX_MEASURED_STEPS,
    MEASURED_STEPS,
    SETTLE_STEPS,
    UNKNOWN_EPOCH_STEPS,
    counter_period_s,
    measured_steps_for,
    spread,
)
from zeus_bso.power.run import check_power_limit


class Gpu:
    """A GPU whose step at each limit takes ``seconds[limit]`` and draws ``watts[limit]``."""

    def __init__(self) -> None:
        self.seconds = {300.0: 1.0, 250.0: 1.5}
        self.watts = {300.0: 300.0, 250.0: 150.0}
        self.limit = 300.0
        self.now = 0.0
        self.joules = 0.0
        self.set_calls: list[float] = []

    def set(self, limit: float) -> None:
        self.set_calls.append(limit)
        self.limit = limit

    def step(self) -> None:
        self.now += self.seconds[self.limit]
        self.joules += self.seconds[self.limit] * self.watts[self.limit]


def run_profile(profiler: PowerProfiler, gpu: Gpu) -> int:
    """Every step of ``profiler``'s profile on ``gpu``; returns how many it took."""
    steps = 0
    while not profiler.done:
        profiler.step_begin()
        gpu.step()
        profiler.step_end()
        steps += 1
    return steps


def test_each_limit_settles_then_is_measured_and_an_epoch_is_its_step_times_the_steps() -> None:
    gpu = Gpu()
    profiler = PowerProfiler(
        [300.0, 250.0], gpu.set, lambda: gpu.joules, clock=lambda: gpu.now,
        settle_steps=1, measured_steps=2,
    )  # fmt: skip
    assert profiler.steps_needed == 6
    assert run_profile(profiler, gpu) == 6
    assert gpu.set_calls == [300.0, 250.0]
    low, high = profiler.measurements(steps_per_epoch=100, gpus_factor=2.0)
    assert (low.power_limit, low.time_per_epoch, low.energy_per_epoch) == (250.0, 150.0, 45000.0)
    assert (high.power_limit, high.time_per_epoch, high.energy_per_epoch) == (300.0, 100.0, 60000.0)
    profiler.step_begin()  # done: nothing more is set
    profiler.step_end()
    assert gpu.set_calls == [300.0, 250.0]


def test_a_limit_whose_energy_could_not_be_read_is_left_out_and_the_profile_goes_on() -> None:
    """The GPUs' counters failed every read at the end of 275 W's window (NaN joules): 275 W is
    not measured, where its window counted 0 J and it looked free; the profile goes on below."""
    gpu = Gpu()
    gpu.seconds = {300.0: 1.0, 275.0: 1.1, 250.0: 1.3}
    gpu.watts = {300.0: 300.0, 275.0: 250.0, 250.0: 230.0}
    unread = {"at": 4}  # the 4th reading: 275 W's window's end
    readings: list[float] = []

    def joules() -> float:
        readings.append(gpu.joules)
        return math.nan if len(readings) == unread["at"] else gpu.joules

    asked: list[list[float]] = []
    profiler = PowerProfiler(
        [300.0, 275.0, 250.0], gpu.set, joules, clock=lambda: gpu.now, settle_steps=1,
        measured_steps=1, goes_on=lambda costs: asked.append(costs) or True,
    )  # fmt: skip
    run_profile(profiler, gpu)
    assert gpu.set_calls == [300.0, 275.0, 250.0]
    measured = profiler.measurements(1)
    assert [(m.power_limit, m.energy_per_epoch) for m in measured] == [
        (250.0, pytest.approx(299.0)),
        (300.0, 300.0),
    ]
    assert len(asked) == 2  # after 300 W, then 275 W: its cost left out
    assert len(asked[1]) == 1


def test_the_mode_is_checked_and_optimize_needs_gpus_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``optimize`` where no GPU's limit could be set is refused at once (a constructor calls
    this before anything is registered), in one sentence that says what to change."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert check_power_limit("off") == "off"
    with pytest.raises(PowerLimitError, match=r"power limits need NVML.*zeus-bso\[nvml\]") as no:
        check_power_limit("optimize")
    assert str(no.value).endswith("; or train without power_limit='optimize'")
    with pytest.raises(PowerLimitError, match=r"power limits need NVML.*zeus-bso\[nvml\]") as no:
        restore_gpus(tmp_path / "records")  # an operator's restore: no advice for training
    assert "train" not in str(no.value)
    with pytest.raises(ConfigurationError, match="'off' or 'optimize'"):
        check_power_limit("max")
    one_settable_gpu(monkeypatch, tmp_path, "GPU-0000cafe-1111-2222-3333-444444444444")
    assert check_power_limit("optimize") == "optimize"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(PowerLimitError, match="NVML sees none here"):
        check_power_limit("optimize")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f3c1a2b-0000-5000-8000-000000000000")
    with pytest.raises(PowerLimitError, match="sets whole GPUs' limits: CUDA_VISIBLE_DEVICES"):
        check_power_limit("optimize")


def stopping_profiler(
    gpu: Gpu, max_slowdown: float | None = None
) -> tuple[PowerProfiler, list[list[float]]]:
    """A profile of ``gpu``'s limits, one step each, that stops as `profile_goes_on` says, and
    the costs it asked about each time."""
    asked: list[list[float]] = []

    def goes_on(costs: list[float]) -> bool:
        asked.append(costs)
        return profile_goes_on(costs)

    profiler = PowerProfiler(
        sorted(gpu.seconds, reverse=True), gpu.set, lambda: gpu.joules, clock=lambda: gpu.now,
        settle_steps=1, measured_steps=1, goes_on=goes_on, max_slowdown=max_slowdown,
    )  # fmt: skip
    return profiler, asked


def test_a_profile_stops_once_the_limits_below_cost_more_three_times_in_a_row() -> None:
    gpu = Gpu()
    gpu.seconds = {300.0: 1.0, 275.0: 1.1, 250.0: 1.3, 225.0: 1.6, 200.0: 2.0, 175.0: 2.5}
    gpu.watts = {300.0: 300.0, 275.0: 250.0, 250.0: 230.0, 225.0: 200.0, 200.0: 180.0, 175.0: 150.0}
    profiler, asked = stopping_profiler(gpu)
    run_profile(profiler, gpu)
    # Energy a step: 300, 275, 299, 320, 360: 275 W is cheapest, the three below it cost more.
    assert gpu.set_calls == [300.0, 275.0, 250.0, 225.0, 200.0]
    assert [m.power_limit for m in profiler.measurements(1)] == [200.0, 225.0, 250.0, 275.0, 300.0]
    assert asked[-1] == pytest.approx([300.0, 275.0, 299.0, 320.0, 360.0])


def test_a_profile_ends_at_the_first_limit_slower_than_the_jobs_bound() -> None:
    """``power_max_slowdown`` 1.2: 250 W's step takes 1.3 times 300 W's, so the server could
    not choose it, nor any limit below it (slower still): the profile ends there, though its
    energy is the lowest yet; 275 W (1.1 times) counts at its cost."""
    gpu = Gpu()
    gpu.seconds = {300.0: 1.0, 275.0: 1.1, 250.0: 1.3, 225.0: 1.6}
    gpu.watts = {300.0: 300.0, 275.0: 250.0, 250.0: 150.0, 225.0: 100.0}
    profiler, asked = stopping_profiler(gpu, max_slowdown=1.2)
    run_profile(profiler, gpu)
    assert gpu.set_calls == [300.0, 275.0, 250.0]
    assert asked[-1] == pytest.approx([300.0, 275.0, math.inf])
    # Measured, it is sent: the server applies the same bound to what it keeps.
    assert [m.power_limit for m in profiler.measurements(1)] == [250.0, 275.0, 300.0]


def test_profile_goes_on_until_patience_runs_out() -> None:
    assert profile_goes_on([10.0, 9.0, 9.5, 9.8])  # two above the cheapest: on
    assert not profile_goes_on([10.0, 9.0, 9.5, 9.8, 9.9])  # three: stop
    assert profile_goes_on([10.0, 9.0, 9.5, 9.8, 8.0])  # a new cheapest: on
    assert profile_goes_on([10.0])
    assert not profile_goes_on([10.0, math.inf])  # too slow to be chosen: the rest are slower


def test_a_long_first_epoch_measures_each_limit_longer() -> None:
    """Half the first epoch's steps, spread over the limits after settling, from 5 to 40 a
    limit; 5 where the epoch's steps are not known."""
    assert measured_steps_for(None, 10) == MEASURED_STEPS == 5
    assert measured_steps_for(40, 5) == 5  # 20 steps for 5 limits: the least
    assert measured_steps_for(200, 10) == 100 // 10 - SETTLE_STEPS == 8
    assert measured_steps_for(10_000, 10) == MAX_MEASURED_STEPS == 40
    assert measured_steps_for(10_000, 0) == 5


class QuickGpu(Gpu):
    """Steps of 10 ms at 300 W, 12 ms at 250 W."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = {300.0: 0.010, 250.0: 0.012}


def test_steps_too_quick_for_the_energy_counter_are_measured_longer() -> None:
    """Five steps of 10 ms span 50 ms: a counter updated every 100 ms could read none of their
    energy, or twice it. With a 2 s window the first limit's measurement goes on to 200 steps
    (2 s), and so does every limit after it."""
    gpu, asked = QuickGpu(), []

    def agree(steps: int) -> int:
        asked.append(steps)
        return steps

    profiler = PowerProfiler(
        [300.0, 250.0], gpu.set, lambda: gpu.joules, clock=lambda: gpu.now,
        min_window_s=2.0, room=1000, agree=agree,
    )  # fmt: skip
    steps = run_profile(profiler, gpu)
    assert asked == [200]  # asked once, at the end of the first limit's 5 steps
    assert profiler.measured_steps == 200
    assert steps == 2 * (SETTLE_STEPS + 200)
    assert profiler.window_s == pytest.approx(2.0)
    measured = {m.power_limit: m for m in profiler.measurements(steps_per_epoch=1)}
    assert measured[250.0].time_per_epoch == pytest.approx(0.012)
    assert measured[250.0].energy_per_epoch == pytest.approx(0.012 * 150.0)


def test_the_main_process_s_steps_are_every_process_s_and_the_room_caps_them() -> None:
    """``agree`` is the main process's answer (a collective): this process measures what it
    says, whatever it asked. Without room for the window, the steps stop at the room."""
    gpu = QuickGpu()
    profiler = PowerProfiler([300.0, 250.0], gpu.set, lambda: gpu.joules, clock=lambda: gpu.now,
                             agree=lambda steps: 30)  # fmt: skip
    assert run_profile(profiler, gpu) == 2 * (SETTLE_STEPS + 30)
    quick = QuickGpu()
    capped = PowerProfiler([300.0, 250.0], quick.set, lambda: quick.joules,
                           clock=lambda: quick.now, min_window_s=2.0, room=84)  # fmt: skip
    assert run_profile(capped, quick) == 2 * (SETTLE_STEPS + 40)
    assert capped.window_s == pytest.approx(0.4)  # short of 2 s: the caller says so


def test_steps_long_enough_are_not_lengthened() -> None:
    profiler = PowerProfiler([300.0, 250.0], (gpu := Gpu()).set, lambda: gpu.joules,
                             clock=lambda: gpu.now, min_window_s=2.0)  # fmt: skip
    assert run_profile(profiler, gpu) == 2 * (SETTLE_STEPS + MEASURED_STEPS)  # 5 s a window


class TenLimitGpu(Gpu):
    """Limits from 300 W down to 75 W; a step of 10 ms at 300 W, longer below."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = {300.0 - 25 * i: 0.010 * 300 / (300.0 - 25 * i) for i in range(10)}
        self.watts = {limit: limit * 0.8 for limit in self.seconds}


@pytest.mark.parametrize(
    ("room", "kept", "steps"),
    [
        (5000, [300.0 - 25 * i for i in range(10)], 100),  # room for every limit's second
        (500, [300.0, 225.0, 150.0, 75.0], 100),  # four limits of 102 steps fit in 500
        (200, [300.0, 200.0, 75.0], 64),  # three at least, each as long as the room allows
        (None, [300.0 - 25 * i for i in range(10)], 100),  # unknown epoch: up to 400 steps
    ],
)
def test_without_room_to_measure_every_limit_long_enough_fewer_are_measured(
    room: int | None, kept: list[float], steps: int
) -> None:
    """Steps of 10 ms and a window of 1 s: 100 steps a limit."""
    gpu = TenLimitGpu()
    profiler = PowerProfiler(sorted(gpu.seconds, reverse=True), gpu.set, lambda: gpu.joules,
                             clock=lambda: gpu.now, min_window_s=1.0, room=room)  # fmt: skip
    taken = run_profile(profiler, gpu)
    assert (list(profiler.limits), profiler.measured_steps) == (kept, steps)
    assert gpu.set_calls == kept
    assert taken == len(kept) * (SETTLE_STEPS + steps)
    assert taken <= (room or len(kept) * (SETTLE_STEPS + UNKNOWN_EPOCH_STEPS))
    for measured in profiler.measurements(steps_per_epoch=1):
        limit = measured.power_limit
        assert measured.energy_per_epoch == pytest.approx(gpu.seconds[limit] * gpu.watts[limit])


def test_limits_are_spread_evenly_the_first_and_last_kept() -> None:
    limits = [300.0 - 25 * i for i in range(10)]
    assert spread(limits, 3) == [300.0, 200.0, 75.0]
    assert spread(limits, 10) == spread(limits, 12) == limits
    assert spread(limits, 1) == [300.0]
    assert spread(limits, 0) == []


def test_the_counter_s_update_period_is_the_time_between_its_changes() -> None:
    """A counter that changes every 100 ms, read every millisecond of a driven clock."""
    now = [0.0]

    def clock() -> float:
        now[0] += 0.001
        return now[0]

    assert counter_period_s(lambda: now[0] // 0.1, clock) == pytest.approx(0.1, abs=0.002)
    assert counter_period_s(lambda: 7.0, clock) is None  # no counter: never changes


def held_up_reads(period: float, held: Callable[[int], float]) -> tuple[Any, Any]:
    """A counter that changes every ``period`` s, and a loop that reads it every millisecond
    of a driven clock, but reads change ``k`` ``held(k)`` s late (a busy CPU's delay, or
    more than a period: the loop did not read that change apart from the next)."""
    now = [0.0]

    def read() -> float:
        step = now[0] + 0.001
        change = math.floor(step / period) * period
        if now[0] < change <= step:  # a change within this read's millisecond
            step = max(step, change + held(round(change / period)))
        now[0] = step
        return float(math.floor(now[0] / period + 1e-9))

    return read, lambda: now[0]


@pytest.mark.parametrize(
    ("held", "why"),
    [
        (lambda k: 0.004 * (k % 2), "every other change seen 4 ms late"),
        (lambda k: 0.03 if k == 3 else 0.0, "the loop held up over a change"),
        (lambda k: 0.004 * (k % 2) + (0.03 if k == 4 else 0.0), "both"),
    ],
)
def test_a_loop_held_up_by_a_busy_cpu_still_finds_the_counter_s_period(
    held: Callable[[int], float], why: str
) -> None:
    """The period sizes each limit's measurement (`COUNTER_PERIODS` of it): a test run of
    four workers on two cores made it 16 ms for the double's counter of 20 (every other
    change seen late: the median gap was the short one)."""
    read, clock = held_up_reads(0.02, held)
    assert counter_period_s(read, clock) == pytest.approx(0.02, rel=0.05), why
