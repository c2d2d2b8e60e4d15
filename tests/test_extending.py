"""The extending page's worked examples, written as a user writes them, outside the package: an
energy meter, a loop adapter, a bandit and a store, each held to the contract class that
`zeus_bso.testing` ships. Each touches only its own code and its test class here; a bandit that
jobs name is also an entry point of the ``zeus_bso.bandits`` group where the server runs."""

from __future__ import annotations

import ast
import math
import os
import pickle
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import ServerProcess, job_body, run_recurrences, sqlite_url, unique_id
from zeus_bso.energy import EnergyMeter, ProcessMeter
from zeus_bso.policy import CostStats, Posterior
from zeus_bso.policy.bandits import Bandit
from zeus_bso.policy.store import JobStore
from zeus_bso.sim.memory import MemoryStore
from zeus_bso.spec import JobSpec
from zeus_bso.testing import BanditContract, LoopAdapterContract, MeterContract, StoreContract
from zeus_bso.testing.adapters import Logged, MakeAdapter
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
    def __init__(self, logger: Logged, server_url: str, job: JobSpec, **options: Any) -> None:
        self.logged = logger
        super().__init__(
            True, lambda values, step: logger.append((values, step)), server_url, job, **options
        )


class TestMyLoop(LoopAdapterContract):
    @pytest.fixture
    def logged(self) -> Logged:
        return []

    @pytest.fixture
    def adapter(self, logged: Logged) -> MakeAdapter:
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


# A bandit that jobs name, kept outside: a module and its package's entry point, installed where
# the server runs (here a folder on the server's PYTHONPATH holding both).

PLUGIN = '''
from zeus_bso.policy import CostStats, Posterior


class Largest:
    """Always the largest arm (a bandit no built-in one behaves like)."""

    @classmethod
    def of(cls, job):
        return cls()

    def choose(self, arms, observations, rng, pulls):
        return max(arms)

    def posteriors(self, arms, observations):
        return {a: Posterior(-observations.get(a, CostStats()).mean, 1.0) for a in arms}
'''


def test_a_job_names_a_bandit_installed_on_the_server(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "my_bandits-0.1.dist-info").mkdir(parents=True)
    (site / "my_bandits.py").write_text(PLUGIN)
    (site / "my_bandits-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: my-bandits\nVersion: 0.1\n"
    )
    (site / "my_bandits-0.1.dist-info" / "entry_points.txt").write_text(
        "[zeus_bso.bandits]\nlargest = my_bandits:Largest.of\n"
    )
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path, env={"PYTHONPATH": path})
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            body = job_body(unique_id("plugin"), batch_sizes=[32, 64], default_batch_size=64)
            assert http.post("/jobs", json={**body, "bandit": "largest"}).status_code == 201
            trials = run_recurrences(http, body["job_id"], 8)
            view = http.get(f"/api/jobs/{body['job_id']}").json()
            bandit = [t for t in view["trials"] if t["kind"] == "bandit"]
            assert len(bandit) >= 4, trials
            assert {t["batch_size"] for t in bandit} == {64}  # the cheaper 32 never
            unknown = http.post("/jobs", json={**job_body(unique_id("plugin")), "bandit": "lagest"})
            assert unknown.status_code == 422
            assert "did you mean 'largest'?" in unknown.json()["message"]
    finally:
        server.stop()


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of a documentation page."""
    blocks, current = [], None
    for line in page.read_text().splitlines():
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_extending_page_s_test_classes_use_what_the_contracts_ship() -> None:
    """Each test class the page shows subclasses a contract `zeus_bso.testing` exports and
    defines fixtures that contract declares, with the types it exports: a rename there breaks
    the page here, not a reader's first try."""
    import zeus_bso.testing as testing

    page = Path(__file__).resolve().parent.parent / "docs" / "extending.md"
    classes = [
        node
        for block in python_blocks(page)
        for node in ast.walk(ast.parse(block))
        if isinstance(node, ast.ClassDef)
    ]
    assert len(classes) >= 5, "the page shows a test class for each contract"
    for shown in classes:
        (base,) = (b.id for b in shown.bases if isinstance(b, ast.Name))
        contract = getattr(testing, base)
        for method in (n for n in shown.body if isinstance(n, ast.FunctionDef)):
            assert hasattr(contract, method.name), f"{base} declares no fixture {method.name}"
            annotations = [method.returns] + [a.annotation for a in method.args.args]
            names = (n.id for a in annotations if a for n in ast.walk(a) if isinstance(n, ast.Name))
            for name in names:
                if name[0].isupper() and name not in {"Path", "Iterator"}:
                    assert hasattr(testing, name) or name in {"EnergyMeter", "Bandit"}, name
