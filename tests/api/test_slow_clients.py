"""Slow clients (headers sent a line every few seconds, as a slowloris attack does) hold only
their own connections: the server keeps answering everyone else."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from tests.helpers import ServerProcess, job_body, sqlite_url, unique_id

SLOW_CLIENTS = 50


def test_fifty_slow_clients_do_not_starve_the_others(tmp_path: Path) -> None:
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path)
    stop = threading.Event()
    sockets: list[socket.socket] = []

    def trickle() -> None:
        for sock in sockets:
            sock.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: x\r\n")
        while not stop.wait(2.0):  # a header line every 2 s, never the blank line
            for sock in sockets:
                sock.sendall(b"X-Slow: 1\r\n")

    try:
        for _ in range(SLOW_CLIENTS):
            sockets.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        slow = threading.Thread(target=trickle, daemon=True)
        slow.start()
        with server.client() as http:
            deadline = time.monotonic() + 6.0  # across three rounds of trickled lines
            answered = 0
            while time.monotonic() < deadline:
                job_id = unique_id()
                registered = http.post("/jobs", json=job_body(job_id), timeout=5)
                assert registered.status_code == 201
                trial = http.get("/jobs/batch_size", params={"job_id": job_id}, timeout=5)
                assert trial.status_code == 200
                answered += 2
        assert answered >= 10
        # The slow connections were held all along, not dropped to make room.
        assert slow.is_alive()
    finally:
        stop.set()
        for sock in sockets:
            sock.close()
        server.stop()


def test_the_keep_alive_timeout_is_a_setting(tmp_path: Path) -> None:
    """An idle keep-alive connection is closed after ZEUS_BSO_TIMEOUT_KEEP_ALIVE seconds."""
    server = ServerProcess(
        sqlite_url(tmp_path / "bso.db"), cwd=tmp_path, env={"ZEUS_BSO_TIMEOUT_KEEP_ALIVE": "1"}
    )
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while b'{"status":"ok"}' not in answer:  # the whole answer, headers and body
                chunk = sock.recv(4096)
                assert chunk, answer
                answer += chunk
            assert b"200 OK" in answer
            time.sleep(2.5)
            sock.settimeout(5)
            assert sock.recv(4096) == b""  # the server closed the idle connection
    finally:
        server.stop()
