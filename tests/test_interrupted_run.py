"""An interrupted test run (Ctrl-C, or SIGTERM from a CI runner) stops the database servers
it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.containers import REPO
from tests.helpers import NESTED_PYTEST_PLUGINS_OFF, default_sigint

INNER = """
import pathlib, time
from tests.conftest import postgres  # noqa: F401 (the fixture)

def test_hold(postgres):
    pathlib.Path({marker!r}).write_text(str(postgres.data))
    time.sleep(120)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_stops_its_postgresql_server(tmp_path: Path, signum: int) -> None:
    marker = tmp_path / "started"
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER.format(marker=str(marker)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.Popen(
        # The project's conftest loaded as the test command loads it (the file is elsewhere).
        [sys.executable, "-m", "pytest", "-q", *NESTED_PYTEST_PLUGINS_OFF, "-p", "tests.conftest"]
        + ["--rootdir", str(REPO)]
        + ["-c", str(REPO / "pyproject.toml"), str(inner)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if run.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the inner run never started its server:\n{run.communicate()[0]}")
            time.sleep(0.2)
        data = Path(marker.read_text())
        pid = int((data / "postmaster.pid").read_text().split()[0])
        run.send_signal(signum)
        try:
            output = run.communicate(timeout=240)[0]
        except subprocess.TimeoutExpired:
            run.kill()
            log = data.parent / "log"
            pytest.fail(
                f"the inner run did not end within 240 s of {signum!r}:\n"
                f"{run.communicate()[0]}\nPostgreSQL's log:\n"
                f"{log.read_text() if log.exists() else '(none)'}"
            )
    finally:
        if run.poll() is None:
            run.kill()
    assert not _alive(pid), f"PostgreSQL (pid {pid}) still runs after {signum!r}:\n{output}"
    assert not data.exists(), "its data directory was left behind"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited: only its parent has not collected it yet.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()
