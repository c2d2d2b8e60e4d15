"""A throwaway PgBouncer in front of a test PostgreSQL server (`tests.postgres`), as platform
teams put one in front of a database many server processes share."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.mariadb import system_binary
from tests.ports import free_port
from tests.postgres import PostgresServer


class PgBouncer:
    """PgBouncer on a free loopback port, pooling ``pool_mode`` in front of ``postgres``, with
    at least ``min_pool_size`` server connections a database (``round_robin``: each
    transaction on the next of them, not the last one freed)."""

    def __init__(
        self,
        postgres: PostgresServer,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 4,
        min_pool_size: int = 0,
        round_robin: bool = False,
    ) -> None:
        binary = system_binary("pgbouncer")
        if binary is None:
            raise FileNotFoundError("PgBouncer is not installed (apt-get install pgbouncer)")
        self.root = Path(tempfile.mkdtemp(prefix="zeus-bso-pgbouncer-"))
        self.port = free_port()
        self.user = postgres.user
        (self.root / "users.txt").write_text(f'"{self.user}" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host=127.0.0.1 port={postgres.port}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.root / 'users.txt'}",
                    f"pool_mode = {pool_mode}",
                    f"default_pool_size = {pool_size}",
                    f"min_pool_size = {min_pool_size}",
                    f"server_round_robin = {int(round_robin)}",
                    "max_client_conn = 500",
                    f"logfile = {self.root / 'pgbouncer.log'}",
                    "ignore_startup_parameters = extra_float_digits,options",
                    "",
                ]
            )
        )
        # PgBouncer refuses to run as root: as the 'postgres' account when we are root.
        run_as: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, account.pw_uid, account.pw_gid)
            run_as = ["runuser", "-u", "postgres", "--"]
        self.proc = subprocess.Popen(
            [*run_as, binary, str(self.root / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"PgBouncer did not start: {self.log()}")

    def url(self, database_url: str) -> str:
        """``database_url`` (a database of the PostgreSQL server), through this pooler."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database_url.rsplit('/', 1)[1]}"

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "pgbouncer.log").read_text()
        return ""

    def stop(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)
