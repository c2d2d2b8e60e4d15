"""A throwaway MariaDB server for the tests (mariadb-install-db + mariadbd on a free loopback
port), for the server's MySQL path (``mysql://``, PyMySQL).

Debian's ``mariadb-server`` package provides the binaries; `.ci/run` installs it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
import uuid

from tests.ports import free_port, socket_folder


def system_binary(name: str) -> str | None:
    """A system program: on the path, or in the system's folders (not on every user's path)."""
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )


class MariaDBServer:
    """A MariaDB server in a temporary directory; `new_database` hands out fresh databases.

    It runs with ``--skip-grant-tables`` (any user, no password) and on loopback only.
    """

    def __init__(self, password: str | None = None) -> None:
        """``password``: grants are checked, and the server's user (``zeus``) must give it
        over TCP (root administers through the socket, as the operating system's root)."""
        install, server = system_binary("mariadb-install-db"), system_binary("mariadbd")
        client = system_binary("mariadb")
        if not install or not server or not client:
            raise FileNotFoundError(
                "MariaDB is not installed (mariadb-install-db, mariadbd, mariadb): "
                "apt-get install mariadb-server"
            )
        self.client = client
        self.password = password
        self.root = socket_folder("zeus-bso-mariadb-", len("sock.lock"))  # its --socket
        self.data = self.root / "data"
        self.port = free_port()
        # mariadbd refuses to run as root unless told a user: run it as 'mysql' when we are root.
        user = ["--user=mysql"] if os.geteuid() == 0 else []
        # Its temporary tables in a folder of its own, not /tmp: another MariaDB on this machine
        # (a second test run) must not touch them (one failed to start with "Error on delete
        # of '/tmp/#sql-temptable-...'").
        tmp = self.root / "tmp"
        tmp.mkdir()
        if user:
            account = pwd.getpwnam("mysql")
            for folder in (self.root, tmp):
                os.chown(folder, account.pw_uid, account.pw_gid)
        # The install's own temporary files there too: as 'mysql' it cannot write to a TMPDIR
        # of root's ("Can't create/write to file", and no data folder).
        subprocess.run(
            [install, *user, f"--datadir={self.data}", "--skip-test-db", "--skip-name-resolve"],
            check=True,
            capture_output=True,
            timeout=120,
            env={**os.environ, "TMPDIR": str(tmp)},
        )
        self._log = self.root / "error.log"
        self._command = [
            server,
            "--no-defaults",
            *user,
            f"--datadir={self.data}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.root / 'sock'}",
            f"--pid-file={self.root / 'pid'}",
            f"--tmpdir={tmp}",
            f"--log-error={self._log}",
            *([] if password else ["--skip-grant-tables"]),
            "--skip-name-resolve",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-buffer-pool-size=64M",
            "--max-connections=300",
        ]
        self.resume()
        if password:
            for statement in (
                f"CREATE USER zeus@'127.0.0.1' IDENTIFIED BY '{password}'",
                "GRANT ALL ON *.* TO zeus@'127.0.0.1'",
            ):
                self.sql(statement)

    def resume(self) -> None:
        """Start the server (again), on the same port and data."""
        self.proc = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ready()

    def pause(self) -> None:
        """Stop the server, keeping its data, as an outage would."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.sql("SELECT 1", check=False).returncode == 0:
                return
            time.sleep(0.2)
        log = self.error_log()
        self.stop()
        raise RuntimeError(f"MariaDB did not start: {log}")

    def error_log(self) -> str:
        return self._log.read_text() if self._log.exists() else "(no log)"

    def sql(self, statement: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        where = (
            [f"--socket={self.root / 'sock'}"]
            if self.password
            else ["-h", "127.0.0.1", "-P", str(self.port)]
        )
        return subprocess.run(
            [self.client, *where, "-u", "root", "-e", statement],
            check=check,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def end_sessions(self, database: str) -> int:
        """End every session of ``database``, as a restart or an operator would; how many
        there were."""
        listed = f"SELECT id FROM information_schema.processlist WHERE db = '{database}'"
        sessions = self.sql(listed).stdout.split()[1:]  # below the column's name
        for session in sessions:
            self.sql(f"KILL {session}", check=False)  # one may have ended since
        return len(sessions)

    def url(self, database: str) -> str:
        return f"mysql://{'zeus' if self.password else 'root'}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """Create an empty database and return its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        self.pause()
        shutil.rmtree(self.root, ignore_errors=True)
