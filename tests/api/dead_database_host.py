"""A database host that dies under a server's pooled connections, for real: run as root in a
network namespace of its own (``unshare --net python -m tests.api.dead_database_host URL SOCKET
FOLDER``), where iptables may drop packets without touching the machine's own network.

The database (started outside, by the test) is reached through its Unix socket, which crosses
namespaces; inside, a relay listens on a loopback TCP port and carries each connection to that
socket, and the server under test connects to the relay's port over TCP (``URL``, its port
replaced by the relay's). Once a job is registered (a connection is pooled), iptables drops
every packet to the relay's port: what the server sends on its pooled connection is never
acknowledged, as where the host died, and new connections are refused, as where it is gone.
The request on the job is timed, the packets are let through again, and a dispatch on the job
is tried. Prints one JSON object: the request's status and message (or the client's error,
where it gave up first), the seconds it waited, and the trial number of the dispatch after the
host came back.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import make_url

from tests.helpers import ServerProcess, job_body, unique_id
from zeus_bso.client import ServerClient

GIVE_UP_S = 45.0
"""How long the request may wait before this script gives up on it (the answer the test wants
comes in well under this; without a bound on the connection, the server waits ~15 minutes)."""


def relay(listener: socket.socket, database_socket: str) -> None:
    """Carry each TCP connection to ``listener`` to the database's Unix socket."""
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(database_socket)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(source, sink), daemon=True).start()


def pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def iptables(action: str, port: int) -> None:
    """Add (``-A``) or delete (``-D``) the rules: a new connection to ``port`` is refused, and
    every other packet to it dropped."""
    for rule in (
        ["-p", "tcp", "--dport", str(port), "--syn", "-j", "REJECT", "--reject-with", "tcp-reset"],
        ["-p", "tcp", "--dport", str(port), "-j", "DROP"],
    ):
        subprocess.run(["iptables", action, "INPUT", *rule], check=True, capture_output=True)


def main(database: str, database_socket: str, folder: Path) -> dict[str, object]:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)
    listener = socket.create_server(("127.0.0.1", 0))
    relay_port = int(listener.getsockname()[1])
    threading.Thread(target=relay, args=(listener, database_socket), daemon=True).start()

    db_url = make_url(database).set(port=relay_port).render_as_string(hide_password=False)
    server = ServerProcess(db_url, cwd=folder)  # forked here, in this namespace
    try:
        job_id = unique_id("dead-host")
        with httpx.Client(base_url=server.url, timeout=GIVE_UP_S) as http:
            registered = http.post("/jobs", json=job_body(job_id))
            assert registered.status_code == 201, registered.text
            time.sleep(1.5)  # idle past the ping's threshold: the ping meets the dead host first
            iptables("-A", relay_port)
            started = time.monotonic()
            answer: dict[str, object]
            try:
                response = http.get("/jobs/batch_size", params={"job_id": job_id})
                answer = {"status": response.status_code, "message": response.json()["message"]}
            except httpx.TimeoutException as err:
                answer = {"status": None, "message": f"the client gave up: {type(err).__name__}"}
            answer["waited"] = round(time.monotonic() - started, 1)
        iptables("-D", relay_port)
        with ServerClient(server.url, retry_seconds=20) as client:
            answer["after"] = client.dispatch(job_id).trial_number
        return answer
    finally:
        server.stop()


if __name__ == "__main__":
    if shutil.which("iptables") is None:
        sys.exit("iptables is not installed")
    print(json.dumps(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))))
