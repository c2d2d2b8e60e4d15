"""Shared fixtures: database servers, a real server process per backend, an HTTP client.

The helpers they use, and that tests import, are in `tests.helpers`."""

from __future__ import annotations

import atexit
import functools
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import httpx
import pytest

from tests.helpers import BACKENDS, ServerProcess, serve_backend
from tests.mariadb import MariaDBServer
from tests.postgres import PostgresServer

DatabaseServer = TypeVar("DatabaseServer", PostgresServer, MariaDBServer)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL 15 server for the whole run, started by the test setup."""
    yield from _started(PostgresServer)


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDBServer]:
    """One MariaDB server for the whole run (the server's MySQL path), started by the test setup."""
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``, as ``scripts/test`` runs it) a test module runs on
    one worker, so its module-scoped servers start once; the deployment tests run on one worker
    together (`PODMAN_GROUP`). Without xdist the marks change nothing."""
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = PODMAN_GROUP if path.startswith("tests/deploy/") else path
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server on a fresh database of each backend, shared by one test module."""
    yield from serve_backend(request, tmp_path_factory)


@pytest.fixture(scope="module", params=["sqlite"])
def sqlite_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server on a fresh SQLite database, shared by one test module: for the tests of the
    training side and the client, whose subject is not the database (every backend is tested by
    tests/api and tests/store). Their test ids keep the ``[sqlite]`` of `server`'s."""
    yield from serve_backend(request, tmp_path_factory)


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client
