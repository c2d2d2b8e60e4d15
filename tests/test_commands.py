"""Both commands, ``zeus-bso-server`` and ``zeus-bso``, as a user stops them: Ctrl-C at any
moment of a start (loading the command, then its work) ends the process promptly and never
prints a traceback; while the command loads, it says ``Aborted!`` as it does later."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import SERVER_BIN, environment_without_settings, sqlite_url
from tests.ports import free_port

ZEUS_BSO = str(Path(sys.executable).parent / "zeus-bso")


@pytest.mark.parametrize("command", ["server", "simulate"])
def test_ctrl_c_while_a_command_starts_never_prints_a_traceback(
    tmp_path: Path, command: str
) -> None:
    env = environment_without_settings()
    env["ZEUS_BSO_DATABASE_URL"] = sqlite_url(tmp_path / "bso.db")
    argv = {
        "server": [SERVER_BIN, "serve", "--port", str(free_port())],
        "simulate": [ZEUS_BSO, "simulate", "--workload", "all", "--recurrences", "5000"],
    }[command]
    aborted = []
    for delay in (0.03, 0.1, 0.2, 0.35, 0.6, 1.0):
        process = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)  # ended promptly
        assert "Traceback" not in out + err, (delay, err[-2000:])
        aborted.append("Aborted!" in err)
    assert any(aborted)  # a Ctrl-C came while the command loaded
