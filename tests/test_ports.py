"""The folders of the test servers' Unix sockets (`tests.ports.socket_folder`) under a deep
``TMPDIR``, as a CI runner's workspace can give: PostgreSQL, MariaDB and the preloaded python
bind their sockets there, and a socket's address holds at most `SOCKET_PATH_MAX` bytes."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from tests.ports import CHROMIUM_SOCKET, SOCKET_PATH_MAX, socket_environment, socket_folder
from tests.postgres import LONGEST_SOCKET_NAME as NAME
from tests.postgres import PostgresServer


@pytest.fixture
def deep_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary folder too deep for a socket's address, as ``TMPDIR``."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    return deep


def bind(path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
    path.unlink()


def test_a_deep_tmpdir_would_hold_no_socket(deep_tmpdir: Path) -> None:
    """The control: a socket in the deep folder itself cannot be bound."""
    assert len(os.fsencode(deep_tmpdir / NAME)) > SOCKET_PATH_MAX
    with pytest.raises(OSError, match="too long"):
        bind(deep_tmpdir / NAME)


def test_under_a_deep_tmpdir_the_folder_holds_the_longest_socket(deep_tmpdir: Path) -> None:
    folder = socket_folder("zeus-bso-test-", len(NAME))
    try:
        assert not folder.is_relative_to(deep_tmpdir)
        assert folder.parent == Path("/tmp")
        bind(folder / NAME)
    finally:
        folder.rmdir()


def test_under_a_short_tmpdir_the_folder_is_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    short = Path(tempfile.mkdtemp(prefix="zb-", dir="/tmp"))  # pytest's tmp_path may be deep
    try:
        monkeypatch.setenv("TMPDIR", str(short))
        monkeypatch.setattr(tempfile, "tempdir", None)
        folder = socket_folder("zeus-bso-test-", len(NAME))
        assert folder.parent == short
        bind(folder / NAME)
    finally:
        shutil.rmtree(short)


def test_a_program_making_sockets_in_a_deep_tmpdir_gets_tmp(deep_tmpdir: Path) -> None:
    """Chromium makes its singleton socket in TMPDIR: under a deep one it ended at its start."""
    assert socket_environment(CHROMIUM_SOCKET)["TMPDIR"] == "/tmp"
    assert socket_environment(CHROMIUM_SOCKET)["PATH"] == os.environ["PATH"]


def test_a_program_making_sockets_in_a_short_tmpdir_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TMPDIR", "/tmp")
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert socket_environment(CHROMIUM_SOCKET) == dict(os.environ)


def test_postgresql_starts_under_a_deep_tmpdir(deep_tmpdir: Path) -> None:
    """It did not: pg_ctl failed, and every test on PostgreSQL with it."""
    try:
        server = PostgresServer()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    try:
        database = server.new_database()
        assert database.startswith("postgresql://")
    finally:
        server.stop()
