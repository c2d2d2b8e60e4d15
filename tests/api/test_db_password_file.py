"""``ZEUS_BSO_DB_PASSWORD_FILE``: the database's password from a file, read again at each new
connection, so that a rotated secret is taken without a restart."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.helpers import needs_driver, serving_a_job
from tests.mariadb import MariaDBServer
from tests.postgres import PostgresServer
from zeus_bso.client import ServerClient
from zeus_bso_server.errors import SettingsError
from zeus_bso_server.settings import load_settings


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_password_rotated_under_a_running_server_is_read_from_its_file(
    backend: str, tmp_path: Path
) -> None:
    """The database's password changes (a secret rotated: Kubernetes updates the file it mounts)
    and the database ends the server's sessions: the connections the server opens then give the
    file's new password, and the job goes on. A password given once at start (the environment
    variable) would be refused from then on, until a restart. A database server of the test's
    own, whose connections must give a password."""
    needs_driver(backend)
    if backend == "mysql" and os.geteuid() != 0:
        pytest.skip("administers MariaDB as the operating system's root (its socket's login)")
    try:
        db_server = (
            PostgresServer(password="first-secret")
            if backend == "postgresql"
            else MariaDBServer(password="first-secret")
        )
    except FileNotFoundError as err:
        pytest.skip(str(err))
    secret = tmp_path / "db-password"
    secret.write_text("first-secret\n")
    env = {"ZEUS_BSO_DB_PASSWORD_FILE": str(secret)}
    with serving_a_job(db_server, tmp_path, "rotated", env) as (server, job_id, database):
        rotate = (
            "ALTER ROLE zeus PASSWORD 'second-secret'"
            if isinstance(db_server, PostgresServer)
            else "ALTER USER zeus@'127.0.0.1' IDENTIFIED BY 'second-secret'"
        )
        db_server.sql(rotate)
        secret.write_text("second-secret\n")
        db_server.end_sessions(database)
        time.sleep(1.5)  # idle past the ping's threshold: the ping replaces what was ended
        with ServerClient(server.url, retry_seconds=10) as client:
            assert client.dispatch(job_id).trial_number == 1
        log = server.log()
        assert "denied" not in log
        assert "authentication failed" not in log


def test_a_password_file_is_checked_at_start_and_not_given_with_a_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the repository's
    for name in ("ZEUS_BSO_DB_PASSWORD", "ZEUS_BSO_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("ZEUS_BSO_DB_PASSWORD_FILE", str(missing))
    with pytest.raises(SettingsError, match=f"cannot read the database password file {missing}"):
        load_settings()
    empty = tmp_path / "empty"
    empty.write_text("\n")
    monkeypatch.setenv("ZEUS_BSO_DB_PASSWORD_FILE", str(empty))
    with pytest.raises(SettingsError, match=f"the database password file {empty} is empty"):
        load_settings()
    given = tmp_path / "given"
    given.write_text("s3cret\n")
    monkeypatch.setenv("ZEUS_BSO_DB_PASSWORD_FILE", str(given))
    assert load_settings().db_password_file == given
    monkeypatch.setenv("ZEUS_BSO_DB_PASSWORD", "other")
    with pytest.raises(SettingsError, match="ZEUS_BSO_DB_PASSWORD or ZEUS_BSO_DB_PASSWORD_FILE"):
        load_settings()
