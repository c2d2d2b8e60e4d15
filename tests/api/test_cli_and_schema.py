"""The ``zeus-bso-server`` command: settings, schema creation and upgrade, refusals."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection, make_url

from tests import forkserver
from tests.helpers import (
    BACKENDS,
    DRIVERS,
    SERVER_BIN,
    ServerProcess,
    database_url,
    environment_without_settings,
    job_body,
    needs_driver,
    sqlite_url,
    unique_id,
)
from tests.ports import free_port
from zeus_bso_server.errors import SettingsError
from zeus_bso_server.settings import load_settings, to_engine_url
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.migrate import head_revision, upgrade
from zeus_bso_server.store.schema import on_connection
from zeus_bso_server.store.tables import Base


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = environment_without_settings()
    full_env.update(env or {})
    return forkserver.run([SERVER_BIN, *args], cwd=cwd, env=full_env, timeout=60)


def test_the_server_imports_neither_the_client_nor_its_meters() -> None:
    """Every server and CLI start would pay for them (the server needs only the wire models and
    the policy of `zeus_bso`); a script still gets `zeus_bso.BatchSizeOptimizer`."""
    client_side = {"zeus_bso.client", "zeus_bso.energy", "zeus_bso.client.http", "httpx"}
    code = (
        "import sys, zeus_bso_server.cli, zeus_bso_server.api.app\n"
        f"print(sorted({sorted(client_side)!r} & sys.modules.keys()))\n"
        "import zeus_bso\n"
        "print(zeus_bso.BatchSizeOptimizer.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "zeus_bso.training.optimizer"]


def test_db_upgrade_and_current(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "explicit.db")
    first = run_cli("db", "upgrade", "--db", url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"empty -> {head_revision()}" in first.stdout
    again = run_cli("db", "upgrade", "--db", url, cwd=tmp_path)
    assert f"{head_revision()} -> {head_revision()}" in again.stdout
    current = run_cli("db", "current", "--db", url, cwd=tmp_path)
    assert f"current: {head_revision()}" in current.stdout
    with sqlite3.connect(tmp_path / "explicit.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_matches_the_tables(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = database_url(backend, tmp_path, request)

    def compare(conn: Connection) -> list[Any]:
        return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))

    async def migrate_and_compare() -> list[Any]:
        db = Database(to_engine_url(url))
        try:
            await upgrade(db)
            return await on_connection(db, compare)
        finally:
            db.dispose()

    assert asyncio.run(migrate_and_compare()) == []


def test_database_errors_are_one_clear_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    for backend in ("postgresql", "mysql"):
        if importlib.util.find_spec(DRIVERS[backend][0]) is None:
            continue  # a settings error here (the test above)
        url = f"{backend}://nobody@127.0.0.1:{port}/x"
        for command in (["db", "upgrade"], ["db", "current"], ["serve", "--port", "0"]):
            result = run_cli(*command, "--db", url, cwd=tmp_path)
            assert result.returncode == 1, (command, url, result.stderr)  # a run-time failure
            assert "cannot" in result.stderr
            assert f"127.0.0.1:{port}" in result.stderr
            assert "Traceback" not in result.stderr + result.stdout


def test_a_port_in_use_is_one_clear_line_before_the_database_is_touched(tmp_path: Path) -> None:
    """Said before the schema is made and the server announced, with the status of a run-time
    failure (uvicorn said it after both, and exited 3)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        url = sqlite_url(tmp_path / "x.db")
        result = run_cli("serve", "--port", str(port), "--db", url, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use; another process"
        " listens there: stop it, or pass another --port"
    )
    assert not (tmp_path / "x.db").exists()


def ipv6_loopback() -> None:
    """Skips where this machine has no IPv6 loopback address."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as err:
        pytest.skip(f"no IPv6 loopback here: {err}")


def test_an_ipv6_address_is_written_in_brackets(tmp_path: Path) -> None:
    """``--host ::1`` was announced as http://::1:8000, and its port in use as ::1:8000: URLs
    that nothing parses. The announced URL answers."""
    ipv6_loopback()
    with socket.socket(socket.AF_INET6) as held:
        held.bind(("::1", 0))
        held.listen()
        port = held.getsockname()[1]
        url = sqlite_url(tmp_path / "x.db")
        in_use = run_cli("serve", "--host", "::1", "--port", str(port), "--db", url, cwd=tmp_path)
    assert in_use.returncode == 1, in_use.stderr
    assert f"error: cannot listen on [::1]:{port}: Address already in use" in in_use.stderr
    port = free_port()
    env = environment_without_settings()
    with subprocess.Popen(
        [SERVER_BIN, "serve", "--host", "::1", "--port", str(port), "--db", url],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            announced = next(line for line in server.stdout if " on http" in line)
            assert (
                f" on http://[::1]:{port} (dashboard at /dashboard, API docs at /docs)" in announced
            )
            deadline = time.monotonic() + 30
            while True:
                try:
                    answer = httpx.get(f"http://[::1]:{port}/healthz", timeout=5)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the announced URL never answered"
                    time.sleep(0.1)
            assert answer.json() == {"status": "ok"}
        finally:
            server.terminate()
            server.wait(30)


def test_no_upgrade_refuses_an_empty_database(tmp_path: Path) -> None:
    result = run_cli(
        "serve", "--no-upgrade", "--port", "0", "--db", sqlite_url(tmp_path / "x.db"), cwd=tmp_path
    )
    assert result.returncode == 2  # a usage error: upgrade first
    assert "zeus-bso-server db upgrade" in result.stdout + result.stderr


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_database_whose_driver_is_missing_names_the_extra(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server installed without its database's extra says which to install, before it
    connects (SQLAlchemy's own error is a traceback from deep in its dialect)."""
    module, extra = DRIVERS[backend]
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(SettingsError) as info:
        to_engine_url(f"{backend}://bso@db.example:5432/bso")
    assert str(info.value) == (
        f"the {backend} driver {module} is not installed; pip install 'zeus-bso[server,{extra}]'"
    )


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_database_urls_own_tcp_user_timeout_wins(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The server bounds how long what it sends on a connection may go unacknowledged (a host
    that died: `tests.api.test_faults` drops real packets), on the socket itself; an operator's
    own value in the URL stays (PyMySQL, which has no such option, is not handed it)."""
    needs_driver(backend)
    url = database_url(backend, tmp_path, request)

    def user_timeout_ms(conn: Connection) -> int:
        raw = conn.connection.dbapi_connection
        if backend == "mysql":
            return int(raw._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))
        with socket.socket(fileno=os.dup(raw.pgconn.socket)) as tcp:
            return int(tcp.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))

    for query, expected in (("", 10_000), ("?tcp_user_timeout=2500", 2500)):
        db = Database(to_engine_url(url + query))
        try:
            assert db.run(user_timeout_ms, write=False) == expected
        finally:
            db.dispose()
    if backend == "postgresql":
        own = to_engine_url(f"{url}?connect_timeout=3").query
        assert (own["connect_timeout"], own["tcp_user_timeout"]) == ("3", "10000")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_database_urls_tcp_user_timeout_is_a_whole_number(backend: str) -> None:
    """Said before a connection: PostgreSQL refused each connection (503 at every request),
    and MySQL's, made by the server, raised a traceback."""
    needs_driver(backend)
    with pytest.raises(SettingsError) as info:
        to_engine_url(f"{backend}://zeus@db.corp/zeus?tcp_user_timeout=abc")
    assert str(info.value) == (
        "the database URL's tcp_user_timeout is 'abc': write a whole number (milliseconds)"
    )


def test_a_postgresql_urls_prepare_threshold_is_a_whole_number_or_none() -> None:
    """``prepare_threshold`` (statements prepared on the server after that many runs on a
    connection; none by default) is said wrong before a connection, not at each one."""
    needs_driver("postgresql")
    for good in ("none", "0", "5"):
        to_engine_url(f"postgresql://zeus@db.corp/zeus?prepare_threshold={good}")
    with pytest.raises(SettingsError) as info:
        to_engine_url("postgresql://zeus@db.corp/zeus?prepare_threshold=soon")
    assert str(info.value) == (
        "the database URL's prepare_threshold is 'soon': write a whole number (after how many "
        "runs on a connection a statement is prepared), or none"
    )


def test_a_postgresql_url_of_several_hosts_serves_from_the_one_that_answers(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """libpq's URL of several hosts (a primary and its standbys, tried in turn, as Patroni's
    documentation writes it) was refused: "invalid literal for int() with base 10". The first
    host here refuses connections; the server serves from the second."""
    needs_driver("postgresql")
    url = make_url(database_url("postgresql", tmp_path, request))
    hosts = f"127.0.0.1:{free_port()},{url.host}:{url.port}"
    several = f"postgresql://{url.username}@{hosts}/{url.database}?target_session_attrs=read-write"
    server = ServerProcess(several, cwd=tmp_path)
    try:
        job_id = unique_id("hosts")
        with server.client() as http:
            assert http.post("/jobs", json=job_body(job_id)).status_code == 201
            assert http.get("/jobs/batch_size", params={"job_id": job_id}).status_code == 200
    finally:
        server.stop()


def test_a_database_url_of_several_hosts_or_a_bad_port_is_said_plainly() -> None:
    """What is wrong, in words, and never the password (the whole URL was shown)."""
    needs_driver("postgresql")
    said = {
        "postgresql://zeus:s3cret@h1:5432,h2:x/zeus": (
            "the database URL's host 'h2:x' is not host or host:port (of h1:5432,h2:x)"
        ),
        "mysql://zeus:s3cret@h1,h2/zeus": (
            "the database URL names several hosts (h1,h2); only a PostgreSQL URL may"
        ),
        "postgresql://zeus:s3cret@h1:x/zeus": "the database URL's port is not a number",
    }
    for raw, words in said.items():
        with pytest.raises(SettingsError) as info:
            to_engine_url(raw)
        assert str(info.value) == words
    kept = to_engine_url("postgresql://zeus:p%40ss@h1,h2:5433/zeus?sslmode=require")
    assert (kept.query["host"], kept.query["port"]) == ("h1,h2", ",5433")  # "": the default
    assert (kept.password, kept.query["sslmode"]) == ("p@ss", "require")
    ipv6 = to_engine_url("postgresql://zeus@[fd00::1]:5432,[fd00::2]/zeus")
    assert (ipv6.query["host"], ipv6.query["port"]) == ("fd00::1,fd00::2", "5432,")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_an_at_sign_in_a_password_is_said_before_a_connection(backend: str) -> None:
    """A generated password with an '@' split the URL there: the rest became the host or the
    database, and the error was "failed to resolve host 'ss'"."""
    for raw in (f"{backend}://zeus:p@ss@db.corp/zeus", f"{backend}://zeus:p@ss/w0rd@db.corp/zeus"):
        with pytest.raises(SettingsError) as info:
            to_engine_url(raw)
        assert "an '@' in the password must be written %40" in str(info.value)
        assert "ss" not in str(info.value).replace("password", "")  # nothing of the password
    assert to_engine_url(f"{backend}://zeus:p%40ss@db.corp/zeus").password == "p@ss"
    azure = to_engine_url(f"{backend}://zeus@srv:pw@srv.corp/zeus")  # a user name with '@'
    assert (azure.username, azure.host) == ("zeus@srv", "srv.corp")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_an_at_sign_in_a_password_is_said_before_a_missing_driver(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installing the driver does not mend the URL: its own mistake is said first (a server
    without its driver said only "not installed", and after the install, the '@')."""
    monkeypatch.setitem(sys.modules, DRIVERS[backend][0], None)  # as if it were not installed
    with pytest.raises(SettingsError, match="an '@' in the password must be written %40"):
        to_engine_url(f"{backend}://zeus:p@ss@db.corp/zeus")


def test_settings_from_a_secret_with_a_line_break_are_read_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret or a file written with ``echo`` ends in a line break. The SQLite file was
    created as 'bso.db\\n' (a fresh, empty database beside the real one), PostgreSQL was asked
    for a database of that name and the password with it."""
    db = tmp_path / "bso.db"
    upgraded = run_cli(
        "db", "upgrade", cwd=tmp_path, env={"ZEUS_BSO_DATABASE_URL": f"{sqlite_url(db)}\n"}
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert [path.name for path in tmp_path.iterdir()] == ["bso.db"]
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    for name, value in {
        "DATABASE_URL": "postgresql://zeus@db.corp:5432/zeus_bso\n",
        "DB_PASSWORD": "pass word\n",
        "HOST": " 0.0.0.0\n",
        "TOKEN_FILE": f"{token_file}\n",
        "LOG_LEVEL": "debug\n",
    }.items():
        monkeypatch.setenv(f"ZEUS_BSO_{name}", value)
    settings = load_settings()
    url = settings.engine_url
    assert (url.host, url.database, url.password) == ("db.corp", "zeus_bso", "pass word")
    assert (settings.host, settings.log_level, settings.token_file) == (
        "0.0.0.0",
        "DEBUG",
        token_file,
    )


def test_invalid_settings_stop_the_server_with_a_clear_message(tmp_path: Path) -> None:
    bad_url = run_cli("serve", "--db", "oracle://nope", cwd=tmp_path)
    assert bad_url.returncode == 2
    assert "not supported" in bad_url.stderr
    assert "Traceback" not in bad_url.stderr
    bad_env = run_cli("serve", cwd=tmp_path, env={"ZEUS_BSO_LEASE_SECONDS": "-3"})
    assert bad_env.returncode == 2
    assert "ZEUS_BSO_LEASE_SECONDS" in bad_env.stderr
    bad_level = run_cli("serve", "--log-level", "chatty", cwd=tmp_path)
    assert bad_level.returncode == 2
    # Named by the option that gave it (it said ZEUS_BSO_LOG_LEVEL, which was not set).
    assert "--log-level: Input should be 'CRITICAL'" in bad_level.stderr


def test_default_database_and_dotenv(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("ZEUS_BSO_LEASE_SECONDS=123\n")
    proc = ServerProcess(None, cwd=tmp_path)  # the default: ./zeus-bso.db
    try:
        with proc.client() as http:
            assert http.post("/jobs", json=job_body("dotenv-1")).status_code == 201
            trial = http.get("/jobs/batch_size", params={"job_id": "dotenv-1"}).json()
            state = http.get("/api/jobs/dotenv-1").json()
        stored = state["trials"][0]
        assert trial["trial_number"] == 1
        assert 122 < stored["lease_expires_at"] - stored["created_at"] < 124
    finally:
        proc.stop()
    assert (tmp_path / "zeus-bso.db").exists()


def test_upstream_database_url_variable(tmp_path: Path) -> None:
    db_file = tmp_path / "from-env.db"
    result = run_cli(
        "db", "upgrade", cwd=tmp_path, env={"ZEUS_BSO_DATABASE_URL": sqlite_url(db_file)}
    )
    assert result.returncode == 0, result.stderr
    assert db_file.exists()


def test_readyz_reports_an_outdated_schema(tmp_path: Path) -> None:
    proc = ServerProcess(sqlite_url(tmp_path / "ready.db"), cwd=tmp_path)
    try:
        with sqlite3.connect(tmp_path / "ready.db") as conn:
            conn.execute("UPDATE alembic_version SET version_num = 'old'")
        answer = httpx.get(proc.url + "/readyz")
        assert answer.status_code == 503
        assert "db upgrade" in answer.json()["message"]
        assert httpx.get(proc.url + "/healthz").status_code == 200
    finally:
        proc.stop()


def test_a_missing_database_driver_says_what_to_install(tmp_path: Path) -> None:
    # A process where the drivers cannot be imported, as after `pip install 'zeus-bso[server]'`.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['psycopg'] = None\nsys.modules['pymysql'] = None\n"
    )
    env = {"PYTHONPATH": str(tmp_path)}
    for url, extra in (("postgresql://u@127.0.0.1/x", "postgres"), ("mysql://u@h/x", "mysql")):
        for command in (["db", "current"], ["serve", "--port", "0"]):
            result = run_cli(*command, "--db", url, cwd=tmp_path, env=env)
            assert result.returncode == 2, result.stderr
            assert f"pip install 'zeus-bso[server,{extra}]'" in result.stderr
            assert "Traceback" not in result.stderr


def test_without_the_server_extra_the_command_says_what_to_install(tmp_path: Path) -> None:
    # A process where the server's libraries cannot be imported, as after `pip install zeus-bso`.
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['sqlalchemy'] = None\n")
    for command in (["--version"], ["serve"]):
        result = run_cli(*command, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
        assert result.returncode == 2, result.stderr
        assert "this command needs its extra (no module named 'sqlalchemy" in result.stderr
        assert "pip install 'zeus-bso[server]'" in result.stderr
        assert "Traceback" not in result.stderr


def test_db_upgrade_waits_for_a_database_that_is_not_there_yet(tmp_path: Path) -> None:
    """`db upgrade --wait` (the compose migration service, the Kubernetes init container)
    retries while the database cannot be reached, instead of failing the rollout."""
    url = sqlite_url(tmp_path / "later" / "bso.db")  # its directory does not exist yet
    refused = run_cli("db", "upgrade", "--db", url, cwd=tmp_path)
    assert refused.returncode == 1  # cannot be reached: a run-time failure
    assert "cannot" in refused.stderr

    env = environment_without_settings()
    proc = subprocess.Popen(
        [SERVER_BIN, "db", "upgrade", "--db", url, "--wait", "60"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Only once it has found the database missing and says it waits (starting takes a while
    # on a loaded machine) does the database appear.
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert "waiting up to 60 s for the database" in first, first + proc.communicate()[1]
    assert proc.poll() is None
    (tmp_path / "later").mkdir()
    out, errors = proc.communicate(timeout=60)
    assert proc.returncode == 0, errors
    assert f"empty -> {head_revision()}" in out


def test_db_commands_ignore_the_listening_address_and_its_token_rule(tmp_path: Path) -> None:
    """A migration container has the server's environment (ZEUS_BSO_HOST=0.0.0.0) but not
    necessarily its token: the db commands serve nothing, so they run anyway."""
    url = sqlite_url(tmp_path / "bso.db")
    exposed = {"ZEUS_BSO_HOST": "0.0.0.0"}
    assert run_cli("db", "upgrade", "--db", url, cwd=tmp_path, env=exposed).returncode == 0
    assert run_cli("db", "current", "--db", url, cwd=tmp_path, env=exposed).returncode == 0
    refused = run_cli("serve", "--db", url, cwd=tmp_path, env=exposed)
    assert refused.returncode == 2
    assert "without a token" in refused.stderr
