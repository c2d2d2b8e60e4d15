"""Start a ``zeus-bso-server serve`` process for a benchmark."""

from __future__ import annotations

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
def running_server(db: Path) -> Iterator[str]:
    """A server on a SQLite file; yields its base URL and stops it afterwards."""
    port = free_port()
    server = Path(sys.executable).parent / "zeus-bso-server"
    command = [str(server), "serve", "--db", f"sqlite:///{db}", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
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
