"""Start a ``zeus-bso-server serve`` process for a benchmark."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def installed_command(name: str) -> str:
    """The path of the project's command ``name``: beside this Python (its environment's), else
    on ``PATH`` (an install with ``pip install --target``, its ``bin`` on ``PATH``)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} is not installed: pip install -e '.[server]'")
    return found


@contextmanager
def running_server(database_url: str, workers: int = 1) -> Iterator[str]:
    """A server on the database; yields its base URL and stops it (and its workers) after."""
    port = free_port()
    command = [installed_command("zeus-bso-server"), "serve", "--db", database_url]
    command += ["--port", str(port)]
    command += ["--workers", str(workers), "--log-level", "warning"]
    with serving(command, port, ready_path="/readyz") as url:
        yield url


@contextmanager
def serving(
    command: list[str], port: int, ready_path: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run a server command in its own process group; yields its base URL once ``ready_path``
    answers 200, and stops the server and its workers after."""
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + ready_path).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise SystemExit(f"server did not start: {' '.join(command)}")
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):  # the group is killed either way
            proc.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class LightClient:
    """A keep-alive HTTP/1.1 client on the standard library's ``http.client``.

    Load generators share the two cores with the server: httpx spends about 2 ms of CPU per
    request with 32 threads (mostly contention for the GIL), so with it the client, not the
    server, was the bottleneck. This one spends a fraction of that.
    """

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        """Send one request; returns the status and the decoded JSON answer (None if empty, the
        text if it is not JSON)."""
        if params:
            path = f"{path}?{urlencode(params)}"
        headers = {}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self._conn.request(method, path, body=payload, headers=headers)
        response = self._conn.getresponse()
        data = response.read()
        if not data:
            return response.status, None
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, data.decode(errors="replace")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> LightClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def upstream_server(python: str, tmp: str, workers: int) -> Iterator[str]:
    """Upstream Zeus 0.16's server (``python`` has ``zeus[bso-server]==0.16.0``) with
    ``workers`` workers on a fresh SQLite file in ``tmp``; yields its base URL."""
    # The scripts put the repository root on sys.path (for tests/) after importing this module.
    from tests.upstream import upstream_server as started

    with started(Path(tmp), python, workers) as url:
        yield url
