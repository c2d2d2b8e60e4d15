"""How ``scripts/test`` spreads the suite over pytest-xdist workers (`tests.conftest`): a module on
one worker, the deployment tests on one worker together, the longest groups first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.conftest import LONGEST_GROUPS, PODMAN_GROUP, group_of
from tests.helpers import NESTED_PYTEST_PLUGINS_OFF

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("tests/policy/test_spec.py", "tests/policy/test_bandits.py")


def pytest_run(*args: str) -> str:
    """The output of a pytest run of this suite with ``args``, which must pass (outside this
    run's pytest-xdist worker, whose variables it does not inherit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *NESTED_PYTEST_PLUGINS_OFF, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_each_module_runs_on_one_worker() -> None:
    """Two workers, two modules of many tests: had each test been scheduled alone (as pytest-xdist's
    ``loadgroup`` does under pytest 9.2), both workers would have run tests of both."""
    output = pytest_run("-n", "2", "--dist", "loadgroup", "-v", *MODULES)
    workers: dict[str, set[str]] = defaultdict(set)
    for worker, module in re.findall(r"^\[(gw\d+)\].*PASSED (tests/\S+?\.py)::", output, re.M):
        workers[module].add(worker)
    assert set(workers) == set(MODULES), output
    assert all(len(ran_on) == 1 for ran_on in workers.values()), dict(workers)


def test_the_deployment_tests_are_one_group_and_the_longest_groups_come_first() -> None:
    assert group_of("tests/deploy/test_image.py::test_x") == PODMAN_GROUP
    assert group_of("tests/deploy/test_compose.py::test_y[a::b]") == PODMAN_GROUP
    assert group_of("tests/api/test_store.py::test_z[sqlite]") == "tests/api/test_store.py"
    collected = ("tests/policy/test_spec.py", "tests/api/test_migrations.py", "tests/deploy")
    listed = pytest_run("--collect-only", "-q", *collected)
    groups = [group_of(line) for line in listed.splitlines() if "::" in line]
    in_order = list(dict.fromkeys(groups))  # each group once, in the order collected
    assert in_order == [PODMAN_GROUP, "tests/api/test_migrations.py", "tests/policy/test_spec.py"]
    assert LONGEST_GROUPS.index(PODMAN_GROUP) < LONGEST_GROUPS.index(in_order[1])
