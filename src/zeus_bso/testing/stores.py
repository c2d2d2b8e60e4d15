"""The contract every `JobStore` passes, as a class that a store's test module subclasses.

The simulator's in-memory store and the server's SQL store on each database run it
(``tests/store/test_contract.py``); a store of your own subclasses `StoreContract` and defines
the ``opened`` fixture.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace

import pytest

from zeus_bso.policy import (
    BatchSizeStats,
    BestRun,
    ByProfile,
    EpochSums,
    JobState,
    TrialKind,
    TrialState,
    TrialStatus,
)
from zeus_bso.policy.store import JobStore

SIZES = (16, 32, 64)
"""The batch sizes of the contract's job."""
V100, A40 = "1xV100@250W", "1xA40@300W"

Opener = Callable[[], AbstractContextManager[JobStore]]
"""Opens the job's store anew (a context manager that gives the store)."""


def new_job() -> JobState:
    """A registered job's state before its first trial (as the server stores it)."""
    return JobState(stats={size: BatchSizeStats(size) for size in SIZES})


def trial(
    number: int,
    size: int,
    kind: TrialKind = TrialKind.EXPLORATION,
    profile: str | None = None,
) -> TrialState:
    """A dispatched trial (an exploration is of pruning round 0)."""
    round_ = 0 if kind is TrialKind.EXPLORATION else None
    return TrialState(number, size, kind, round=round_, profile=profile)


def stored(store: JobStore, number: int) -> TrialState:
    found = store.trial(number)
    assert found is not None, f"no trial {number}"
    return found


def dispatched(opened: Opener, *trials: TrialState) -> JobState:
    """Add ``trials`` (numbered from the next one) as a dispatch would; returns the job after."""
    for new in trials:
        with opened() as store:
            job = replace(store.state(), next_trial_number=new.trial_number + 1)
            store.add_trial(new, job)
    with opened() as store:
        return store.state()


def reported(
    new: TrialState, *, cost: float, epochs: int = 2, energy: float = 100.0, time: float = 10.0
) -> TrialState:
    return replace(
        new,
        status=TrialStatus.REPORTED,
        epochs=epochs,
        energy=energy,
        time=time,
        metric=0.5,
        cost=cost,
        converged=True,
        message="converged",
        curve=((1, 0.25), (epochs, 0.5)),
    )


class StoreContract:
    """The `JobStore` contract (`zeus_bso.policy.store`): what every store must answer.

    Subclass it in a test module and define the ``opened`` fixture, which returns a function
    that opens one new job's store (a job of `SIZES` whose state is `new_job()`) again at each
    call, as a context manager. Open the store anew at each call (for a database: a new
    transaction that reads the job again), so that what the store answers is what it kept::

        class TestFileStore(StoreContract):
            @pytest.fixture
            def opened(self, tmp_path: Path) -> Opener:
                path = tmp_path / "job.json"
                FileStore.create(path, new_job())
                return lambda: FileStore.open(path)
    """

    @pytest.fixture
    def opened(self) -> Opener:
        raise NotImplementedError("a StoreContract subclass defines the `opened` fixture")

    def test_a_new_job_has_its_state_and_no_trials(self, opened: Opener) -> None:
        with opened() as store:
            assert store.state() == new_job()
            assert store.trial(1) is None
            assert list(store.explorations()) == []
            assert store.latest_costs(SIZES, 3) == {size: [] for size in SIZES}
            assert store.by_profile(V100) == ByProfile()

    def test_a_dispatch_keeps_the_trial_and_the_job_after_it(self, opened: Opener) -> None:
        first = trial(1, 32, profile=V100)
        after = dispatched(opened, first)
        assert after.next_trial_number == 2
        with opened() as store:
            assert store.trial(1) == first
            assert store.trial(2) is None
        # The dispatch that ends pruning: the arms and the first bandit trial.
        bandit = trial(2, 16, TrialKind.BANDIT, profile=V100)
        with opened() as store:
            entering = replace(store.state(), next_trial_number=3, arms=(16, 32), bandit_start=2)
            store.add_trial(bandit, entering)
        with opened() as store:
            assert store.state() == entering
            assert store.trial(2) == bandit

    def test_a_report_keeps_the_trial_and_a_final_one_the_jobs_statistics(
        self, opened: Opener
    ) -> None:
        dispatched(opened, trial(1, 32, profile=V100))
        with opened() as store:
            running = replace(
                stored(store, 1),
                epochs=1,
                time=5.5,
                energy=1234.25,
                metric=0.125,
                cost=617.125,
                curve=((1, 0.125),),
            )
            store.save_trial(running, store.state())
        with opened() as store:
            assert store.trial(1) == running
            assert store.state().stats == new_job().stats  # progress changes no statistic
        ended = reported(running, cost=900.5)
        with opened() as store:
            stats = dict(store.state().stats)
            stats[32] = stats[32].add(900.5, True, ended.curve)
            job = replace(store.state(), stats=stats, best=BestRun(32, 900.5))
            store.save_trial(ended, job)
        with opened() as store:
            assert store.trial(1) == ended
            assert store.state() == job
            assert store.state().stats[32].curves == (ended.curve,)

    def test_a_final_report_keeps_the_arms_an_extension_added(self, opened: Opener) -> None:
        """An exploration on new hardware after pruning (`zeus_bso.policy.profiles.extension`) that
        converged joins the arms: the job after its final report keeps them."""
        dispatched(opened, trial(1, 32, profile=V100))
        with opened() as store:
            entering = replace(store.state(), next_trial_number=3, arms=(32, 64), bandit_start=2)
            store.add_trial(trial(2, 32, TrialKind.BANDIT, profile=V100), entering)
        extension = TrialState(3, 16, TrialKind.EXPLORATION, round=None, profile=A40)
        dispatched(opened, extension)
        with opened() as store:
            assert list(store.explorations()) == [trial(1, 32, profile=V100), extension]
            ended = reported(extension, cost=250.0)
            stats = dict(store.state().stats)
            stats[16] = stats[16].add(250.0, True, ended.curve)
            job = replace(store.state(), stats=stats, arms=(16, 32, 64))
            store.save_trial(ended, job)
        with opened() as store:
            assert store.state() == job
            assert store.state().arms == (16, 32, 64)

    def test_explorations_are_the_pruning_trials_by_number(self, opened: Opener) -> None:
        trials = [
            trial(1, 32),
            trial(2, 64, TrialKind.CONCURRENT),
            trial(3, 64),
            trial(4, 16, TrialKind.BANDIT),
        ]
        dispatched(opened, *trials)
        with opened() as store:
            assert list(store.explorations()) == [trials[0], trials[2]]

    def test_latest_costs_are_the_last_reported_in_a_window_oldest_first(
        self, opened: Opener
    ) -> None:
        costs = {16: [10.0, 11.0, 12.0, 13.0], 32: [20.0]}
        number = 0
        for size, values in costs.items():
            for cost in values:
                number += 1
                dispatched(opened, trial(number, size, profile=V100 if number % 2 else A40))
                with opened() as store:
                    store.save_trial(reported(stored(store, number), cost=cost), store.state())
        # Runs that did not end with a report count for nothing.
        dispatched(opened, trial(number + 1, 16), trial(number + 2, 16))
        with opened() as store:
            failed = replace(stored(store, number + 2), status=TrialStatus.FAILED)
            store.save_trial(failed, store.state())
        with opened() as store:  # a reported trial saved again (ended after its final report)
            store.save_trial(stored(store, 1), store.state())
        with opened() as store:
            assert store.latest_costs((16, 32, 64), 3) == {
                16: [(11.0, A40), (12.0, V100), (13.0, A40)],
                32: [(20.0, V100)],
                64: [],
            }
            assert store.latest_costs((32,), 3) == {32: [(20.0, V100)]}
            assert store.latest_costs((16,), 1) == {16: [(13.0, A40)]}
            every = [(10.0, V100), (11.0, A40), (12.0, V100), (13.0, A40)]
            assert store.latest_costs((16,), 10) == {16: every}

    def test_by_profile_sums_each_trials_latest_epoch_and_counts_bandit_trials(
        self, opened: Opener
    ) -> None:
        dispatched(
            opened,
            trial(1, 32, profile=V100),
            trial(2, 32, TrialKind.BANDIT, profile=V100),
            trial(3, 32, profile=None),  # stored without a profile: the job's first
            trial(4, 32, TrialKind.BANDIT, profile=A40),
            trial(5, 16, TrialKind.BANDIT, profile=A40),  # not reported yet: no epoch
            trial(6, 16, TrialKind.CONCURRENT, profile=A40),
        )
        readings = {
            1: (2, 100.0, 10.0),
            2: (4, 400.0, 20.0),
            3: (1, 130.0, 3.0),
            4: (5, 250.0, 5.0),
        }
        for number, (epochs, energy, time) in readings.items():
            with opened() as store:
                # An earlier report, replaced by the latest: only the latest counts.
                for seen in (1, epochs):
                    progress = replace(
                        stored(store, number),
                        epochs=seen,
                        energy=energy * seen / epochs,
                        time=time,
                        metric=0.1,
                        cost=energy,
                    )
                    store.save_trial(progress, store.state())
        with opened() as store:
            got = store.by_profile(V100)
        # V100, 32: per epoch (50 J, 5 s), (100 J, 5 s) and (130 J, 3 s).
        assert got.epochs.keys() == {(V100, 32), (A40, 32)}
        assert got.epochs[(V100, 32)].trials == 3
        assert (got.epochs[(V100, 32)].energy, got.epochs[(V100, 32)].time) == pytest.approx(
            (280.0, 13.0)
        )
        assert got.readings()[(A40, 32)] == pytest.approx((50.0, 1.0))
        assert got.bandit_trials == {V100: 1, A40: 2}

    def test_the_counts_by_profile_are_kept_with_the_job(self, opened: Opener) -> None:
        counts = ByProfile({(V100, 32): EpochSums(50.0, 5.0, 1)}, {V100: 1})
        with opened() as store:
            job = replace(store.state(), next_trial_number=2, by_profile=counts)
            store.add_trial(trial(1, 32, TrialKind.BANDIT, profile=V100), job)
        with opened() as store:
            assert store.state().by_profile == counts
            more = counts.with_epoch((V100, 32, 50.0, 5.0), (V100, 32, 40.0, 4.0))
            store.save_trial(
                replace(stored(store, 1), epochs=2), replace(store.state(), by_profile=more)
            )
        with opened() as store:
            assert store.state().by_profile == more
            assert more.epochs[(V100, 32)] == EpochSums(40.0, 4.0, 1)

    def test_an_infeasible_trial_and_the_memory_caps_are_kept(self, opened: Opener) -> None:
        """A trial whose run ran out of memory ends ``infeasible``; the job keeps each profile's
        memory cap (`JobState.memory_caps`), and a lower cap replaces a higher one."""
        dispatched(opened, trial(1, 64, profile=V100), trial(2, 32, profile=A40))
        with opened() as store:
            job = replace(store.state(), memory_caps={V100: 64})
            store.save_trial(replace(stored(store, 1), status=TrialStatus.INFEASIBLE), job)
        with opened() as store:
            assert stored(store, 1).status is TrialStatus.INFEASIBLE
            assert store.state().memory_caps == {V100: 64}
            job = replace(store.state(), memory_caps={V100: 64, A40: 32})
            store.save_trial(replace(stored(store, 2), status=TrialStatus.INFEASIBLE), job)
        with opened() as store:
            assert store.state().memory_caps == {V100: 64, A40: 32}
            assert stored(store, 2).status is TrialStatus.INFEASIBLE
            assert store.state() == job

    def test_the_memory_doubts_are_kept_and_cleared(self, opened: Opener) -> None:
        """A size that trained and ran out of memory is in doubt on its profile
        (`JobState.memory_doubts`), kept with the job (with a trial that goes on, as a report
        saves it) until a doubt is cleared."""
        dispatched(opened, trial(1, 64, profile=V100), trial(2, 32, profile=A40))
        with opened() as store:
            job = replace(store.state(), memory_doubts={V100: 64, A40: 32})
            store.save_trial(replace(stored(store, 1), epochs=1), job)
        with opened() as store:
            assert store.state().memory_doubts == {V100: 64, A40: 32}
            job = replace(store.state(), memory_doubts={A40: 32})
            store.save_trial(replace(stored(store, 1), epochs=2), job)
        with opened() as store:
            assert store.state().memory_doubts == {A40: 32}
            assert store.state() == job
