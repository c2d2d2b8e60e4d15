"""The extending page's worked examples, written as a user writes them, outside the package: an
energy meter, a loop adapter, a bandit and a store, each held to the contract class that
`zeus_bso.testing` ships. Each touches only its own code and its test class here (a bandit that
jobs can name also needs its name in `BanditName` and an entry in `BANDITS`: see the page)."""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from zeus_bso.energy import EnergyMeter, ProcessMeter
from zeus_bso.policy import CostStats, Posterior
from zeus_bso.policy.bandits import Bandit
from zeus_bso.policy.store import JobStore
from zeus_bso.sim.memory import MemoryStore
from zeus_bso.spec import JobSpec
from zeus_bso.testing import BanditContract, LoopAdapterContract, MeterContract, StoreContract
from zeus_bso.testing.adapters import MakeAdapter
from zeus_bso.testing.stores import Opener, new_job
from zeus_bso.training import TrialSession

# An energy meter: a hwmon-style counter file (microjoules), read as the kernel writes it.


class HwmonMeter(ProcessMeter):
    name = "hwmon"
    is_estimate = False
    device_model = "hwmon"
    device_count = 1

    def __init__(self, counter: Path, max_power: float = 300.0) -> None:
        self.counter = counter
        self.max_power = max_power
        self._start = self._microjoules()

    def _microjoules(self) -> int:
        return int(self.counter.read_text())

    def energy(self) -> float:
        return (self._microjoules() - self._start) / 1e6


class TestHwmonMeter(MeterContract):
    @pytest.fixture
    def meter(self, tmp_path: Path) -> Iterator[EnergyMeter]:
        counter = tmp_path / "energy1_input"
        counter.write_text("5000000")
        meter = HwmonMeter(counter)
        counter.write_text("7500000")  # the device spent 2.5 J since
        assert meter.energy() == 2.5
        yield meter
        meter.close()


# A loop adapter: a framework whose loop has one process (its object: a logger).


class ZeusBSOMyLoop(TrialSession):
    def __init__(
        self, logger: list[dict[str, float]], server_url: str, job: JobSpec, **options: Any
    ) -> None:
        self.logged = logger
        super().__init__(
            True, lambda values, step: logger.append(values), server_url, job, **options
        )


class TestMyLoop(LoopAdapterContract):
    @pytest.fixture
    def adapter(self) -> MakeAdapter:
        logged: list[dict[str, float]] = []
        return lambda url, job, **options: ZeusBSOMyLoop(logged, url, job, **options)

    # No server_url: the contract's own starts a real server, as it does for an outside one.


# A bandit: epsilon-greedy on the mean cost, an unobserved arm first.


class EpsilonGreedy:
    def __init__(self, epsilon: float = 0.1) -> None:
        self.epsilon = epsilon

    def choose(
        self,
        arms: tuple[int, ...],
        observations: Mapping[int, CostStats],
        rng: random.Random,
        pulls: int,
    ) -> int:
        unseen = [arm for arm in arms if arm not in observations]
        if unseen:
            return unseen[0]
        if rng.random() < self.epsilon:
            return rng.choice(arms)
        return min(arms, key=lambda arm: observations[arm].mean)

    def posteriors(
        self, arms: tuple[int, ...], observations: Mapping[int, CostStats]
    ) -> dict[int, Posterior]:
        found = {}
        for arm in arms:
            seen = observations.get(arm, CostStats())
            variance = seen.m2 / seen.count if seen.count > 1 else 1.0
            precision = seen.count / max(variance, 1e-9) if seen.count else 0.0
            found[arm] = Posterior(-seen.mean, precision if math.isfinite(precision) else 0.0)
        return found


class TestEpsilonGreedy(BanditContract):
    @pytest.fixture
    def bandit(self) -> Bandit:
        return EpsilonGreedy(epsilon=0.1)


# A store: one job's state and trials in a file, read and written at every opening.


class FileStore(MemoryStore):
    @classmethod
    @contextmanager
    def open(cls, path: Path) -> Iterator[JobStore]:
        store: FileStore = pickle.loads(path.read_bytes())  # the test's own file
        yield store
        path.write_bytes(pickle.dumps(store))


class TestFileStore(StoreContract):
    @pytest.fixture
    def opened(self, tmp_path: Path) -> Opener:
        path = tmp_path / "job.pickle"
        path.write_bytes(pickle.dumps(FileStore(new_job())))
        return lambda: FileStore.open(path)
