"""Start a ``zeus-bso-server serve`` process for a benchmark."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(database_url: str, workers: int = 1) -> Iterator[str]:
    """A server on the database; yields its base URL and stops it (and its workers) after."""
    port = free_port()
    server = Path(sys.executable).parent / "zeus-bso-server"
    command = [str(server), "serve", "--db", database_url, "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--workers", str(workers), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise SystemExit("server did not start")
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
