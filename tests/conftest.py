"""Shared fixtures: database servers, a real server process per backend, an HTTP client.

The helpers they use, and that tests import, are in `tests.helpers`."""

from __future__ import annotations

import atexit
import functools
import gc
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import httpx
import hypothesis
import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from tests.environments import LIGHTNING, Environments, run_folder
from tests.helpers import BACKENDS, ServerProcess, database_url, needs_driver
from tests.mariadb import MariaDBServer
from tests.postgres import PostgresServer

DatabaseServer = TypeVar("DatabaseServer", PostgresServer, MariaDBServer)

# One OpenMP thread a process, for the tests and every process they start (torchrun sets the same
# for its workers): the suite runs many training processes at once on a few cores, and a process
# whose OpenMP threads outnumber the cores it gets spins waiting for them (the training tests'
# CPU time and their measured energy, time x watts, were up to twice as high with one thread a
# core).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The width of the terminal the suite was started from is no test's: a command run in a test's
# process keeps the width its console found when the test module imported it, and one run as a
# process would inherit it. The tests that need a width set COLUMNS themselves.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
# The client's files on this machine (fallback recommendations, the outbox of runs that ended
# while the server was away) go to a folder of this run's, not the home directory's, and each
# xdist worker to its own folder in it: tests on two workers that use the same job id must not
# read each other's fallback or deliver each other's outbox.
if "ZEUS_BSO_CACHE_DIR" not in os.environ:
    os.environ["ZEUS_BSO_CACHE_DIR"] = tempfile.mkdtemp(prefix="zeus-bso-cache-")
    atexit.register(shutil.rmtree, os.environ["ZEUS_BSO_CACHE_DIR"], ignore_errors=True)
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    os.environ["ZEUS_BSO_CACHE_DIR"] = os.path.join(os.environ["ZEUS_BSO_CACHE_DIR"], _worker)
# The node's power-limit records too, in the worker's folder (a test that sets limits, on the
# NVML double, has its own).
if _worker or "ZEUS_BSO_POWER_RECORDS" not in os.environ:
    os.environ["ZEUS_BSO_POWER_RECORDS"] = os.path.join(
        os.environ["ZEUS_BSO_CACHE_DIR"], "power_limits"
    )


# Under CI, the property tests draw the same examples every run: a new find of their random search
# must not keep an unrelated change from landing. Elsewhere they search anew each run, which is how
# they find what fixed examples miss; a find becomes an `@example` of its test.
hypothesis.settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    hypothesis.settings.load_profile("ci")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL 15 server for the whole run, started by the test setup."""
    needs_driver("postgresql")
    yield from _started(PostgresServer)


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDBServer]:
    """One MariaDB server for the whole run (the server's MySQL path), started by the test setup."""
    needs_driver("mysql")
    yield from _started(MariaDBServer)


def _started(server_class: Callable[[], DatabaseServer]) -> Iterator[DatabaseServer]:
    """A database server for a fixture's lifetime; the tests skip, saying why, without one.

    It is stopped when the fixture ends, which an interrupted run reaches too (see
    `pytest_configure`), and failing that when the interpreter exits."""
    try:
        server = server_class()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    stop_once = functools.cache(server.stop)
    atexit.register(stop_once)
    try:
        yield server
    finally:
        stop_once()
        atexit.unregister(stop_once)


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a CI runner's timeout, ``kill``) ends the run as Ctrl-C does: pytest then tears
    down the session's fixtures, stopping the database servers and containers they started."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


PODMAN_GROUP = "podman"
"""The deployment tests share images and a podman store under fixed names: one worker runs them."""

LONGEST_GROUPS = (
    PODMAN_GROUP,
    "tests/integrations/test_topology.py",
    "tests/test_oldest_frameworks.py",
    "tests/integrations/test_power_limits.py",
    "tests/client/test_upstream_client.py",
    "tests/api/test_migrations.py",
    "tests/api/test_schemathesis.py",
    "tests/api/test_concurrency.py",
    "tests/integrations/test_examples.py",
    "tests/client/test_cli_jobs.py",
    "tests/api/test_faults.py",
    "tests/sim/test_simulate.py",
    "tests/integrations/test_lightning.py",
    "tests/api/test_db_copy.py",
    "tests/scripts/test_corpus.py",
    "tests/client/test_optimizer.py",
    "tests/integrations/test_install_hints.py",
    "tests/client/test_sigterm.py",
    "tests/api/test_cli_and_schema.py",
)
"""The groups that take longest (most of a minute of a worker's time or more each, on two cores),
longest first. They are collected first, and a worker takes the next group in the order of
collection, so they start first and the short ones fill in around them. Which groups they are only
orders the run."""


def group_of(nodeid: str) -> str:
    """The group a test runs in under pytest-xdist: its module, or `PODMAN_GROUP`."""
    path = nodeid.split("::", 1)[0]
    return PODMAN_GROUP if path.startswith("tests/deploy/") else path


class ModuleScheduling(LoadScopeScheduling):
    """pytest-xdist's scheduling by scope, with the scope of a test its `group_of`: a module runs
    on one worker, so its module-scoped servers start once, and the deployment tests run on one
    worker together. Groups go to workers in the order of collection.

    (pytest-xdist's own ``--dist loadgroup`` cannot do this under pytest 9.2: it tags a test's
    group onto ``item._nodeid``, which pytest no longer reads, so every test is scheduled alone.)"""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> ModuleScheduling | None:
    """`ModuleScheduling` for ``--dist loadgroup`` (as ``scripts/test`` runs the suite)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    config.option.loadscopereorder = False  # the order of collection, not the size of a group
    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `LONGEST_GROUPS` first, longest first; the rest as collected."""
    rank = {group: index for index, group in enumerate(LONGEST_GROUPS)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))


def pytest_collection_finish() -> None:
    """What collection built (the modules of torch, Lightning, transformers and the rest: some
    millions of objects, which live as long as the process) leaves the garbage collector's
    view, as a server that preforks its workers does: a full collection in a test process
    traversed all of it, 0.35 s each, and accelerate's memory release after each out-of-memory
    error collects three times (21 collections, 7.5 s, in one test of the HF Trainer's
    ``auto_find_batch_size``). What the tests make is collected as before."""
    gc.freeze()


def _shared_server(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp(f"shared-{backend}")
    proc = ServerProcess(database_url(backend, tmp, request), cwd=tmp)
    yield proc
    proc.stop()


# One server of each backend for a whole worker's run (a server start, migrations included, costs
# about two CPU-seconds, and a worker runs many modules). Each is stopped before the database
# server under it (it asks for that fixture, so pytest tears it down first).
@pytest.fixture(scope="session")
def shared_sqlite_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _shared_server("sqlite", request, tmp_path_factory)


@pytest.fixture(scope="session")
def shared_postgresql_server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres: PostgresServer,
) -> Iterator[ServerProcess]:
    yield from _shared_server("postgresql", request, tmp_path_factory)


@pytest.fixture(scope="session")
def shared_mysql_server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    mariadb: MariaDBServer,
) -> Iterator[ServerProcess]:
    yield from _shared_server("mysql", request, tmp_path_factory)


@pytest.fixture(scope="module", params=BACKENDS)
def server(request: pytest.FixtureRequest) -> ServerProcess:
    """A server of each backend, one for all the modules a worker runs that ask for it.

    The tests that use it make jobs of ids of their own (`tests.helpers.unique_id`) and look only
    at those, or at what changes while they run (a worker runs one test at a time); nor do they
    stop the server or change its database's schema. A test that needs a server of its own, or a
    fresh database, starts one (`serve_backend`, `ServerProcess`)."""
    return shared(request, request.param)


@pytest.fixture(scope="module", params=["sqlite"])
def sqlite_server(request: pytest.FixtureRequest) -> ServerProcess:
    """`server` on SQLite only: for the tests of the training side and the client, whose subject
    is not the database (every backend is tested by tests/api and tests/store). Their test ids
    keep the ``[sqlite]`` of `server`'s."""
    return shared(request, "sqlite")


def shared(request: pytest.FixtureRequest, backend: str) -> ServerProcess:
    proc: ServerProcess = request.getfixturevalue(f"shared_{backend}_server")
    if proc.proc.poll() is not None:  # a test ended it: fail saying so, not with refused requests
        raise RuntimeError(f"the shared {backend} server has exited:\n{proc.log()}")
    return proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture(scope="session")
def environments(tmp_path_factory: pytest.TempPathFactory) -> Environments:
    """Environments with torch and one install of the project alone, shared by the run's workers
    (`tests.environments`)."""
    return Environments(run_folder(tmp_path_factory) / "environments")


@pytest.fixture(scope="session")
def lightning_python(environments: Environments) -> str:
    """The Python of an environment with torch and ``zeus-bso[lightning]`` alone: for the training
    processes of the tests whose subject is the Lightning callback."""
    return environments.python(LIGHTNING)
