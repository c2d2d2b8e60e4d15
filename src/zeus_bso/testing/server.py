"""A real zeus-bso server for the tests of an adapter, meter or bandit of your own: `running_server`
starts ``zeus-bso-server serve`` on a free port of this machine with a SQLite file of its own,
waits until it answers, and stops it; the adapters' contracts' ``server_url`` fixture uses it
(`zeus_bso.testing.served`), so an outside adapter's test class defines only its own fixture.

Needs the server: ``pip install 'zeus-bso[server]'`` where the tests run.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from zeus_bso.client.tls import plain_http_context

INSTALL_HINT = "pip install 'zeus-bso[server]'"


def _server_command() -> str:
    """The ``zeus-bso-server`` of this environment."""
    beside = Path(sys.executable).parent / "zeus-bso-server"
    found = str(beside) if beside.exists() else shutil.which("zeus-bso-server")
    if found is None:
        raise RuntimeError(f"zeus_bso.testing needs the server to test against: {INSTALL_HINT}")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_server(folder: Path, timeout: float = 60.0) -> Iterator[str]:
    """A server on a free port of this machine, its database and its log in ``folder``; yields
    its URL, and stops it on leaving.

    Raises:
        RuntimeError: the server is not installed, exited, or did not answer in ``timeout``
            seconds (the message holds its log).
    """
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = folder / f"server-{port}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [_server_command(), "serve", "--port", str(port), "--log-level", "warning",
             "--db", f"sqlite:///{folder / 'bso.db'}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            _wait_ready(process, url, timeout, log_path)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(process: subprocess.Popen[bytes], url: str, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the zeus-bso server exited:\n{log.read_text()}")
        try:
            answer = httpx.get(f"{url}/readyz", timeout=1.0, verify=plain_http_context())
            if answer.status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the zeus-bso server did not answer in {timeout} s:\n{log.read_text()}")
