"""What differs between the databases, in one place: one `Dialect` per backend.

Each says which URL schemes name it and the driver the server uses for them (with what installs
it), the engine's options and connection hooks, how to insert a row unless its key exists, how
to take and release the schema lock migrations run under, the database's clock, whether
Alembic must rebuild a table to change it and whether its schema changes roll back, its own
column types, and the file a database lives in. The engine (`database`), the repository, the tables
and the migrations read them here instead of asking for a backend by name.
"""

from __future__ import annotations

import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import Double, Engine, Table, event, insert, text
from sqlalchemy.dialects.mysql import MEDIUMTEXT
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.types import TypeEngine
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random

from zeus_bso_server.errors import SchemaError, SettingsError

WRITE_OPTION = "zeus_bso_write"
"""Execution option: on SQLite the transaction starts with BEGIN IMMEDIATE (the write lock)."""

IDLE_PING_SECONDS = 1.0
"""A pooled connection idle longer than this is pinged before use."""

SCHEMA_LOCK_KEY = 0x7A657573_62736F00  # "zeusbso\0"
LOCK_TIMEOUT_MS = 10_000
"""How long a statement on PostgreSQL or MySQL waits for a lock another connection holds (a
job's row, which a request of another server process holds) before it fails, and its request
answers 503 with nothing written (the `lock_timeout_ms` setting's default): well within the
client's 30 s timeout, so that it hears the 503 and retries."""
CONNECT_TIMEOUT_S = 10
"""The most seconds a new PostgreSQL connection may take to open (a URL's own
``connect_timeout`` wins): libpq's default is to wait as long as the operating system does, two
minutes on Linux, while a request waits for it, when the database's host is down or a network
drops its packets. MySQL's driver waits 10 s by default."""
TCP_USER_TIMEOUT_MS = 10_000
"""The most milliseconds what the server sent on an open PostgreSQL or MySQL connection may go
unacknowledged before the connection is given up (``tcp_user_timeout``; a URL's own wins): a
host that died under a pooled connection (a failover, a node lost) acknowledges
nothing, and the operating system retransmits for about fifteen minutes while the request, and
the ping that checks an idle connection, wait. Then a request answers 503 in at most this and
`CONNECT_TIMEOUT_S`, within the client's 30 s. A statement that runs long is not cut short: the
database acknowledges it at once."""
IDLE_IN_TRANSACTION_MS = 60_000
"""How long a PostgreSQL session of the server may sit idle inside a transaction before the
database ends it, releasing its locks: a request's transaction takes milliseconds, so one idle
that long belongs to a server process that stalled (paused, or cut off from the database),
whose job row would otherwise stay locked until TCP gave up on it, hours later."""
READ_ONLY_SQLSTATE = "25006"
"""PostgreSQL's "cannot execute ... in a read-only transaction"."""
READ_ONLY_ERRNOS = frozenset({1290, 1792, 1836})
"""MySQL's and MariaDB's refusals of a write as read-only: the server runs with
``--read-only`` or ``--super-read-only`` (a demoted primary), a read-only transaction (the
session's default), InnoDB in read-only mode."""
SCHEMA_LOCK_NAME = "zeus_bso_schema"
SCHEMA_LOCK_WAIT_SECONDS = 600


@dataclass(frozen=True)
class Dialect:
    """One backend: SQLite, PostgreSQL or MySQL (MariaDB)."""

    backend: str
    """SQLAlchemy's backend name (``url.get_backend_name()``, ``dialect.name``)."""
    schemes: tuple[str, ...]
    """The URL schemes that name it (asyncio drivers of older configurations included)."""
    driver: str
    """The SQLAlchemy driver name the server uses."""
    module: str | None = None
    """The driver's module, to check that it is installed (None: the standard library's)."""
    install: str = ""
    """What installs the driver."""
    now_sql: ClassVar[str] = ""
    """SQL for the database's clock, in seconds since the epoch (every replica agrees)."""
    rebuilds_tables: ClassVar[bool] = False
    """Whether Alembic changes a table by rebuilding it (batch mode)."""
    transactional_ddl: ClassVar[bool] = True
    """Whether a schema change rolls back with its transaction (MySQL commits each at once)."""
    double_type: ClassVar[TypeEngine[Any] | None] = None
    """The column type of a double-precision float where ``FLOAT`` is not one (None: it is)."""
    long_text_type: ClassVar[TypeEngine[Any] | None] = None
    """The column type of a message where ``TEXT`` holds too few characters (None: it holds)."""
    snapshot: ClassVar[dict[str, Any]] = {"isolation_level": "REPEATABLE READ"}
    """Execution options of a read transaction that sees one snapshot of the whole database
    throughout (`zeus_bso_server.store.copy`)."""

    def database_file(self, url: URL) -> Path | None:
        """The file the database lives in, on this machine (None: a server's database)."""
        return None

    def url(self, url: URL) -> URL:
        """The URL with the server's driver and the connection options it needs."""
        return url.set(drivername=self.driver)

    def engine_options(self, busy_timeout_ms: int) -> dict[str, Any]:
        """Keyword arguments of `create_engine`."""
        return {"pool_size": 10, "max_overflow": 20}

    def session_settings(self, lock_timeout_ms: int) -> list[str]:
        """What each new connection sets first: how long its statements wait for another
        connection's lock (``lock_timeout_ms``; 0: as long as it takes), and how long it may
        idle inside a transaction. None here (SQLite waits its busy timeout)."""
        return []

    def connect(self, dbapi: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        """Each new connection, first (SQLAlchemy's ``do_connect``): change the driver's
        ``cparams`` for it, or make it with ``dbapi`` (the driver's module) and return it. None:
        the driver connects with them (nothing changed here)."""
        return None

    def refused_as_read_only(self, error: BaseException) -> bool:
        """Whether the driver's ``error`` refused a write as read-only (never here: SQLite's
        read-only file is no connection's)."""
        return False

    def takes_no_writes(self, conn: Connection) -> bool:
        """Whether a write on ``conn`` would be refused as read-only (a standby's connection,
        a database set read-only), for readiness. False where that cannot be told (SQLite:
        its file's disk is checked)."""
        return False

    def without_time_limits(self, conn: Connection) -> None:
        """Lift `session_settings`' limits for the transaction under way: a migration or a copy
        may wait on locks and idle between statements for as long as it takes."""

    def install_hooks(
        self, engine: Engine, busy_timeout_ms: int, lock_timeout_ms: int = LOCK_TIMEOUT_MS
    ) -> None:
        """Connection hooks: each new connection is opened through `connect` and makes its
        `session_settings`; a pooled connection that sat idle is pinged when checked out (the
        database may have closed it since: a restart, an idle timeout) and replaced if the ping
        fails; a write refused as read-only is taken for a lost connection. A busy server
        reuses its connections within milliseconds and pings none: SQLAlchemy's
        ``pool_pre_ping`` would cost every request a round trip."""
        settings = self.session_settings(lock_timeout_ms)

        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            for statement in settings:
                cursor.execute(statement)
            cursor.close()
            dbapi_connection.commit()  # a setting made in a transaction lasts once committed

        if settings:
            event.listen(engine, "connect", on_connect)

        def on_checkin(_dbapi_connection: Any, record: Any) -> None:
            record.info["idle_since"] = time.monotonic()

        def on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
            idle_since = record.info.get("idle_since")
            if idle_since is None or time.monotonic() - idle_since < IDLE_PING_SECONDS:
                return
            try:
                alive = engine.dialect.do_ping(dbapi_connection)
            except Exception as err:  # the driver's own error for a dead connection
                raise DisconnectionError("a pooled connection failed its ping") from err
            if not alive:
                raise DisconnectionError("a pooled connection failed its ping")

        def on_error(context: Any) -> None:
            # A write refused as read-only came on a connection to a standby (a failover
            # demoted the host it opened on, and a server keeps its connections) or to a
            # database set read-only: taken for a lost connection, it invalidates the pool, so
            # that the request answers 503, nothing written, and the next connections open on
            # whichever host takes writes then (libpq's ``target_session_attrs``, a virtual
            # address moved), with the database's settings of then. It answered 500 on
            # PostgreSQL, and every request on those connections failed alike, for good.
            if self.refused_as_read_only(context.original_exception):
                context.is_disconnect = True

        def on_do_connect(dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
            return self.connect(dialect.loaded_dbapi, cargs, cparams)

        event.listen(engine, "do_connect", on_do_connect)
        event.listen(engine, "checkin", on_checkin)
        event.listen(engine, "checkout", on_checkout)
        event.listen(engine, "handle_error", on_error)

    def insert_if_absent(self, conn: Connection, table: Table, values: dict[str, Any]) -> bool:
        """Insert a row unless its primary key exists; returns whether it did."""
        key = next(iter(table.primary_key.columns))
        upsert = pg_insert if self.backend == "postgresql" else sqlite_insert
        stmt = upsert(table).values(values).on_conflict_do_nothing().returning(key)
        return conn.execute(stmt).first() is not None

    session_schema_lock: ClassVar[bool] = False
    """Whether `lock_schema` takes a lock of the session, not of the transaction: it is then
    taken before a migration's transaction begins and released after it commits
    (`zeus_bso_server.store.schema.on_connection`)."""

    def lock_schema(self, conn: Connection) -> None:
        """Take the database-wide lock migrations run under (replicas that upgrade as they
        start take turns)."""

    def unlock_schema(self, conn: Connection) -> None:
        """Release what `lock_schema` took, where the transaction's end does not."""


class _SQLite(Dialect):
    now_sql = "((julianday('now') - 2440587.5) * 86400.0)"
    snapshot: ClassVar[dict[str, Any]] = {}  # WAL: a read transaction's first read fixes it
    rebuilds_tables = True

    def database_file(self, url: URL) -> Path | None:
        database = url.database
        if not database or database == ":memory:":
            return None
        return Path(database).resolve()

    def engine_options(self, busy_timeout_ms: int) -> dict[str, Any]:
        return {
            "pool_size": 8,
            "connect_args": {"timeout": busy_timeout_ms / 1000.0, "check_same_thread": False},
        }

    def install_hooks(
        self, engine: Engine, busy_timeout_ms: int, lock_timeout_ms: int = LOCK_TIMEOUT_MS
    ) -> None:
        """WAL mode, a busy timeout and foreign keys on every connection, and transactions the
        server begins itself: a write starts with BEGIN IMMEDIATE, which takes the database's
        write lock before its first read (the job row lock of the other databases). A file on
        this machine needs no idle ping."""

        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Take over transaction control from the driver, so that we can say BEGIN IMMEDIATE.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            _write_ahead_log(cursor, busy_timeout_ms)
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.close()

        def on_begin(conn: Connection) -> None:
            immediate = conn.get_execution_options().get(WRITE_OPTION, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        event.listen(engine, "connect", on_connect)
        event.listen(engine, "begin", on_begin)

    # The schema lock is the migration's BEGIN IMMEDIATE (`schema.on_connection`).


def _write_ahead_log(cursor: Any, busy_timeout_ms: int) -> None:
    """Put the database in WAL mode (a no-op once it is: the mode is stored in the file).

    On a new database, connections that switch it at once race for its write lock, and SQLite
    answers the losers "database is locked" at once, without waiting out the busy timeout (one
    start in ten of four processes on a fresh file: replicas or ``db upgrade`` init containers
    that start together). The switch is tried again until the busy timeout has passed."""
    retrying = Retrying(
        retry=retry_if_exception(_locked),
        stop=stop_after_delay(busy_timeout_ms / 1000.0),
        wait=wait_random(0.005, 0.05),
        reraise=True,
    )
    retrying(cursor.execute, "PRAGMA journal_mode = WAL")


def _locked(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)


class _PostgreSQL(Dialect):
    now_sql = "extract(epoch from clock_timestamp())"

    def url(self, url: URL) -> URL:
        url = super().url(url)
        if "connect_timeout" not in url.query:
            url = url.update_query_dict({"connect_timeout": str(CONNECT_TIMEOUT_S)})
        if "tcp_user_timeout" not in url.query:
            url = url.update_query_dict({"tcp_user_timeout": str(TCP_USER_TIMEOUT_MS)})
        _whole_number(url, "tcp_user_timeout", "milliseconds")
        _whole_number(
            url,
            "prepare_threshold",
            "after how many runs on a connection a statement is prepared",
            none=True,
        )
        return url

    def connect(self, dbapi: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        """No statement prepared on the server, unless the URL's ``prepare_threshold`` says
        after how many runs on a connection psycopg prepares one (its own default is 5). A
        pooler in transaction mode (PgBouncer's, many managed databases') gives each
        transaction whichever server connection is free, where a statement psycopg prepared on
        another does not exist, or another of its name does: every such request failed.
        Preparing saves a fraction of a millisecond a request (`benchmarks/server_latency.py`)."""
        threshold = cparams.pop("prepare_threshold", "none")  # checked by `url`
        cparams["prepare_threshold"] = None if threshold == "none" else int(threshold)
        return None

    def refused_as_read_only(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == READ_ONLY_SQLSTATE

    def takes_no_writes(self, conn: Connection) -> bool:
        return conn.execute(text("SHOW transaction_read_only")).scalar() == "on"

    def session_settings(self, lock_timeout_ms: int) -> list[str]:
        return [
            f"SET lock_timeout = {int(lock_timeout_ms)}",
            f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}",
        ]

    def without_time_limits(self, conn: Connection) -> None:
        conn.execute(text("SET LOCAL lock_timeout = 0"))  # until the transaction ends
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))

    def lock_schema(self, conn: Connection) -> None:
        # Released when the transaction ends; a migration waits its turn however long it takes.
        self.without_time_limits(conn)
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})


class _MySQL(Dialect):
    now_sql = "unix_timestamp(now(6))"
    transactional_ddl = False
    double_type = Double()  # its FLOAT is single precision
    long_text_type = MEDIUMTEXT()  # utf8mb4 makes TEXT hold a quarter as many characters

    def url(self, url: URL) -> URL:
        url = super().url(url)
        if "charset" not in url.query:
            # Every Unicode character, astral ones included; the tables are utf8mb4 too (0003).
            url = url.update_query_dict({"charset": "utf8mb4"})
        _whole_number(url, "tcp_user_timeout", "milliseconds")
        return url

    def engine_options(self, busy_timeout_ms: int) -> dict[str, Any]:
        # InnoDB's default, REPEATABLE READ, locks the gaps between index records that a
        # statement scans: two requests on different jobs then lock each other's gaps in
        # trials and deadlock. READ COMMITTED takes no such locks; the job row lock serialises
        # requests on one job, as on PostgreSQL (whose default it is).
        return {**super().engine_options(busy_timeout_ms), "isolation_level": "READ COMMITTED"}

    def session_settings(self, lock_timeout_ms: int) -> list[str]:
        # InnoDB's row-lock wait is whole seconds (50 by default); 0 here: its most, a year.
        seconds = max(1, -(-lock_timeout_ms // 1000)) if lock_timeout_ms else 31_536_000
        return [f"SET SESSION innodb_lock_wait_timeout = {seconds}"]

    def connect(self, dbapi: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        """A PyMySQL connection over a TCP socket on which what it sends goes unacknowledged
        for `TCP_USER_TIMEOUT_MS` at most (the URL's ``tcp_user_timeout``, in milliseconds,
        wins; 0: as long as the operating system retransmits), as libpq's
        ``tcp_user_timeout`` bounds PostgreSQL's. PyMySQL has no such option, but connects on a
        socket it is given, which is made here as PyMySQL makes its own. None (PyMySQL connects
        itself) over a Unix socket or where the system has no such option."""
        user_timeout_ms = int(cparams.pop("tcp_user_timeout", TCP_USER_TIMEOUT_MS))
        if cparams.get("unix_socket") or not hasattr(socket, "TCP_USER_TIMEOUT"):
            return None
        connection = dbapi.connect(*cargs, **cparams, defer_connect=True)
        bind = (connection.bind_address, 0) if connection.bind_address else None
        try:
            tcp = socket.create_connection(
                (connection.host, connection.port), connection.connect_timeout, source_address=bind
            )
        except OSError as err:  # PyMySQL's own words for it
            raise dbapi.OperationalError(
                2003, f"Can't connect to MySQL server on {connection.host!r} ({err})"
            ) from err
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if user_timeout_ms:
            tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, user_timeout_ms)
        connection.connect(tcp)
        return connection

    def refused_as_read_only(self, error: BaseException) -> bool:
        code = error.args[0] if error.args else None
        return isinstance(code, int) and code in READ_ONLY_ERRNOS

    def takes_no_writes(self, conn: Connection) -> bool:
        # What refuses every account: ``read_only`` alone does not refuse one with SUPER (MySQL)
        # or READ ONLY ADMIN (MariaDB), which a server's account may be; the transactions' own
        # setting is ``tx_read_only`` before MySQL 8.0 and MariaDB 11.1.
        names = "'super_read_only', 'tx_read_only', 'transaction_read_only'"
        rows = conn.execute(text(f"SHOW VARIABLES WHERE Variable_name IN ({names})")).all()
        return any(str(value).upper() in ("ON", "1") for _, value in rows)

    def insert_if_absent(self, conn: Connection, table: Table, values: dict[str, Any]) -> bool:
        # No RETURNING; INSERT IGNORE's row count is exact here.
        return bool(conn.execute(insert(table).prefix_with("IGNORE").values(values)).rowcount)

    session_schema_lock = True

    def lock_schema(self, conn: Connection) -> None:
        # DDL commits on MySQL: a session lock, released by `unlock_schema`.
        params = {"name": SCHEMA_LOCK_NAME, "wait": SCHEMA_LOCK_WAIT_SECONDS}
        if conn.execute(text("SELECT GET_LOCK(:name, :wait)"), params).scalar() != 1:
            raise SchemaError(
                f"another process held the schema lock for {SCHEMA_LOCK_WAIT_SECONDS} s; "
                "is a migration stuck?"
            )

    def unlock_schema(self, conn: Connection) -> None:
        conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": SCHEMA_LOCK_NAME})


def _whole_number(url: URL, name: str, meaning: str, *, none: bool = False) -> None:
    """Raises SettingsError, before any connection, where the URL's ``name`` is not a whole
    number (``meaning``) or, where ``none``, the word none: each connection would refuse it."""
    value = url.query.get(name)
    if value is None or (
        isinstance(value, str) and (value.isdigit() or (none and value == "none"))
    ):
        return
    raise SettingsError(
        f"the database URL's {name} is {value!r}: write a whole number ({meaning})"
        + (", or none" if none else "")
    )


DIALECTS: dict[str, Dialect] = {
    d.backend: d
    for d in (
        _SQLite("sqlite", ("sqlite", "sqlite+pysqlite"), "sqlite+pysqlite"),
        _PostgreSQL(
            "postgresql",
            ("postgresql", "postgres", "postgresql+psycopg", "postgresql+asyncpg"),
            "postgresql+psycopg",
            module="psycopg",
            install="pip install 'zeus-bso[server,postgres]'",
        ),
        _MySQL(
            "mysql",
            ("mysql", "mariadb", "mysql+pymysql", "mysql+aiomysql"),
            "mysql+pymysql",
            module="pymysql",
            install="pip install 'zeus-bso[server,mysql]'",
        ),
    )
}
"""Every backend the server runs on, by SQLAlchemy's backend name."""


def dialect_named(scheme: str) -> Dialect | None:
    """The backend a URL scheme names (None: not one the server runs on)."""
    return next((d for d in DIALECTS.values() if scheme in d.schemes), None)


def column_type(base: TypeEngine[Any], variant: str) -> TypeEngine[Any]:
    """``base``, with each dialect's own type where it declares one (its ``variant``
    attribute: ``double_type``, ``long_text_type``)."""
    for dialect in DIALECTS.values():
        own = getattr(dialect, variant)
        if own is not None:
            base = base.with_variant(own, dialect.backend)
    return base


def dialect_of(conn_or_engine: Connection | Engine) -> Dialect:
    """The backend of a connection or an engine."""
    return DIALECTS[conn_or_engine.dialect.name]


def mysql_binary_collation(dialect: Any) -> str:
    """The utf8mb4 collation under which MySQL and MariaDB compare ids as the exact strings
    they are, as PostgreSQL and SQLite do: binary, and without padding where the server has one
    (``dialect``: a connection's SQLAlchemy dialect, whose server version it reads)."""
    if getattr(dialect, "is_mariadb", False):
        return "utf8mb4_nopad_bin"
    version = dialect.server_version_info or (0,)
    return "utf8mb4_0900_bin" if version >= (8,) else "utf8mb4_bin"
