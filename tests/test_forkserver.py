"""The forkserver the tests start servers and commands from (`tests.forkserver`): a forked
command answers as the same command started as a new process does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests import forkserver
from tests.helpers import (
    SERVER_BIN,
    ZEUS_BSO,
    ServerProcess,
    environment_without_settings,
    sqlite_url,
)


def test_a_forked_command_prints_and_exits_as_a_started_one(tmp_path: Path) -> None:
    env = environment_without_settings()
    commands = [
        [SERVER_BIN, "db", "upgrade", "--db", "sqlite:///bso.db"],  # in the working directory
        [SERVER_BIN, "db", "current", "--db", "nosuchdriver://x"],
        [ZEUS_BSO, "simulate", "--workload", "mnist"],
    ]
    (tmp_path / "forked").mkdir()
    (tmp_path / "started").mkdir()
    statuses = set()
    for args in commands:
        assert forkserver.forkable(args, env)
        forked = forkserver.run(args, cwd=tmp_path / "forked", env=env)
        fresh = subprocess.run(
            args, cwd=tmp_path / "started", env=env, capture_output=True, text=True, timeout=60
        )
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            fresh.returncode,
            fresh.stdout,
            fresh.stderr,
        ), args
        statuses.add(fresh.returncode)
    assert statuses == {0, 2}  # done, and refused with what to change


def test_a_forked_server_ends_as_a_started_one_on_each_signal(tmp_path: Path) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        statuses = []
        for env in ({}, {"PYTHONFORKSERVERTEST": "1"}):  # forked, then started anew
            server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path, env=env)
            assert isinstance(server.proc, forkserver.ForkedProcess) == (not env)
            assert server.client().get("/readyz").status_code == 200
            server.proc.send_signal(signum)
            statuses.append(server.proc.wait(timeout=30))
            server.stop()
        assert statuses[0] == statuses[1], (signum, statuses)


def test_what_a_fork_cannot_give_the_same_way_starts_anew() -> None:
    env = dict(os.environ)
    assert forkserver.forkable([SERVER_BIN, "serve"], env)
    assert not forkserver.forkable([SERVER_BIN, "serve"], env, workers=2)
    assert not forkserver.forkable([SERVER_BIN, "serve"], {**env, "PYTHONPATH": "/patched"})
    assert not forkserver.forkable([ZEUS_BSO, "simulate"], {**env, "COLUMNS": "80"})
    assert not forkserver.forkable([sys.executable, "-c", "pass"], env)


def test_a_forked_command_notes_the_test_that_asked_for_it(tmp_path: Path) -> None:
    """``benchmarks/test_suite_cpu.py`` puts a process under the test module whose test started
    it, from its environment in ``/proc``, which a fork has from its forkserver: the fork notes
    its test where `forkserver.STARTED_BY` says, under its ``/proc`` key (pid, start time)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    env = {**environment_without_settings(), forkserver.STARTED_BY: str(notes)}
    args = [ZEUS_BSO, "--version"]
    assert forkserver.forkable(args, env)
    process = forkserver.launch(args, env, tmp_path, tmp_path / "out")
    assert process.wait(timeout=60) == 0
    (note,) = notes.iterdir()
    pid, start = note.name.split("-")
    assert int(pid) == process.pid
    assert int(start) > 0
    assert note.read_text() == os.environ["PYTEST_CURRENT_TEST"]
