"""A throwaway PostgreSQL server for the tests (initdb + pg_ctl on a free loopback port)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import uuid

from tests.ports import free_port, socket_folder

LONGEST_SOCKET_NAME = ".s.PGSQL.65535.lock"
"""The longest name of the files the server makes beside its socket, in the root (``-k``): the
socket is ``.s.PGSQL.<port>``, its lock file that and ``.lock``."""


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


class PostgresServer:
    """A PostgreSQL cluster in a temporary directory; `new_database` hands out fresh databases."""

    def __init__(self, password: str | None = None) -> None:
        """``password``: the user's, which every connection must give (none: trusted)."""
        initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
        if not initdb or not pg_ctl:
            raise FileNotFoundError("PostgreSQL binaries initdb and pg_ctl are not installed")
        self.pg_ctl = pg_ctl
        self.root = socket_folder("zeus-bso-pg-", len(LONGEST_SOCKET_NAME))
        self.data = self.root / "data"
        self.port = free_port()
        self.user = "zeus"
        # PostgreSQL refuses to run as root: run it as the 'postgres' account when we are root.
        self.run_as: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self.run_as = ["runuser", "-u", "postgres", "--"]
        os.chmod(self.root, 0o755)
        auth = ["--auth=trust"]
        if password is not None:
            given = self.root / "password"
            given.write_text(password + "\n")
            given.chmod(0o644)
            # Over TCP (the server under test); `sql`, through the socket, is trusted.
            auth = ["--auth-host=scram-sha-256", "--auth-local=trust", f"--pwfile={given}"]
        self._run(initdb, "-D", str(self.data), "-U", self.user, *auth, "-E", "UTF8")
        self.resume()

    def resume(self) -> None:
        """Start the server (again)."""
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-o",
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200",
            "start",
        )

    def pause(self) -> None:
        """Stop the server, keeping its data, as an outage would."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop")

    def _run(self, *args: str) -> None:
        subprocess.run([*self.run_as, *args], check=True, capture_output=True, timeout=120)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """Create an empty database and return its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)

    def sql(self, statement: str) -> str:
        """Run one statement as the cluster's user, through its socket (trusted, whatever the
        user's password is now); its output, unaligned."""
        psql = _binary("psql") or "psql"
        connect = ["-h", str(self.root), "-p", str(self.port), "-U", self.user, "-d", "postgres"]
        done = subprocess.run(
            [psql, *connect, "-At", "-c", statement],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout.strip()

    def end_sessions(self, database: str) -> int:
        """End every session of ``database``, as a restart, an idle timeout or an operator
        would; how many there were."""
        return int(
            self.sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                f"WHERE datname = '{database}'"
            )
        )

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.root, ignore_errors=True)
