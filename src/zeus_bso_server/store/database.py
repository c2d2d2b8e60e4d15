"""The engine and the unit of work: one transaction per request, database errors translated.

A request's work is one synchronous function of a `Session` in a transaction (the repository
is SQLAlchemy 2 Core). How it runs depends on the driver:

- PostgreSQL: the function gets an `AsyncpgSession` on a connection from SQLAlchemy's pool, in
  an asyncpg transaction, and runs in a greenlet: each statement is compiled by SQLAlchemy and
  awaited on the event loop through asyncpg directly (see `asyncpg_session` for why). The job
  row is locked with ``SELECT ... FOR UPDATE``.
- MySQL uses SQLAlchemy's asyncio extension (aiomysql): the function runs through
  ``AsyncConnection.run_sync`` with a SQLAlchemy `Connection`, in READ COMMITTED (see
  `Database.__init__`), and the job row is locked with ``SELECT ... FOR UPDATE``.
- SQLite uses the standard library driver, and the whole transaction runs at once on the event
  loop's thread. A transaction takes about a millisecond and SQLite admits one writer at a time,
  so handing it to another thread only adds latency: an async driver (aiosqlite) hops to its
  thread and back for every statement (about 0.8 ms a statement here), and one hop per
  transaction to a worker thread still added about 0.5 ms a request (see the README). The
  database runs in WAL mode with a busy timeout, and a write transaction starts with
  ``BEGIN IMMEDIATE``, so it holds the write lock from its first statement: two requests on one
  job, in any process, are serialised before either reads.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError, DisconnectionError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

from zeus_bso_server.errors import DatabaseUnavailableError
from zeus_bso_server.store.session import Session

if TYPE_CHECKING:
    from zeus_bso_server.store.asyncpg_session import AsyncpgSession, StatementCache

logger = logging.getLogger(__name__)

T = TypeVar("T")
# Execution option: on SQLite the transaction starts with BEGIN IMMEDIATE (the write lock).
WRITE_OPTION = "zeus_bso_write"


def _install_sqlite_hooks(engine: Engine, busy_timeout_ms: int) -> None:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over transaction control from the driver, so that we can say BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    def on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)


def _cause(err: BaseException) -> str:
    """The driver's error behind ``err`` (SQLAlchemy wraps it in ``orig``): its type and words."""
    cause = getattr(err, "orig", None) or err
    return f"{type(cause).__name__}: {cause}"


def _replace_if_closed(_dbapi_connection: Any, _record: Any, pooled: Any) -> None:
    """Pool checkout hook (asyncpg): a connection the database closed while it sat in the pool
    (a restart, an idle timeout) is replaced before anything is sent on it."""
    if pooled.driver_connection.is_closed():
        raise DisconnectionError("the database closed this pooled connection")


class Database:
    """Runs units of work: `write` for requests that change state, `read` for the rest."""

    def __init__(self, url: URL, *, busy_timeout_ms: int = 30_000, echo: bool = False) -> None:
        self.url = url
        self.is_sqlite = url.get_backend_name() == "sqlite"
        self.sync_engine: Engine | None = None
        self.async_engine: AsyncEngine | None = None
        self._statements: StatementCache | None = None
        self._session_class: type[AsyncpgSession] | None = None
        self._outdated_statement: type[Exception] | None = None
        # What a retry can get past (a DBAPIError only when it says so: see `_translate`).
        self._transient_errors: tuple[type[BaseException], ...] = (DBAPIError,)
        self._conflict_errors: tuple[type[BaseException], ...] = (IntegrityError,)
        if self.is_sqlite:
            engine = create_sync_engine(
                url,
                echo=echo,
                pool_size=4,
                connect_args={"timeout": busy_timeout_ms / 1000.0, "check_same_thread": False},
            )
            _install_sqlite_hooks(engine, busy_timeout_ms)
            self.sync_engine = engine
            self._sync_writer = engine.execution_options(**{WRITE_OPTION: True})
        else:
            options: dict[str, Any] = {}
            if url.get_backend_name() == "mysql":
                # InnoDB's default, REPEATABLE READ, locks the gaps between index records that
                # a statement scans: two requests on different jobs then lock each other's
                # gaps in trials and deadlock. READ COMMITTED takes no such locks; the job row
                # lock serialises requests on one job, as on PostgreSQL (whose default it is).
                options["isolation_level"] = "READ COMMITTED"
            self.async_engine = create_async_engine(
                url, echo=echo, pool_size=10, max_overflow=20, **options
            )
            self._autocommit = self.async_engine.execution_options(isolation_level="AUTOCOMMIT")
            if self.async_engine.dialect.driver == "asyncpg":
                self._use_asyncpg()

    def _use_asyncpg(self) -> None:
        import asyncpg.exceptions as pg_errors

        from zeus_bso_server.store.asyncpg_session import AsyncpgSession, StatementCache

        assert self.async_engine is not None
        self._statements = StatementCache(self.async_engine.dialect)
        self._session_class = AsyncpgSession
        self._outdated_statement = pg_errors.InvalidCachedStatementError
        event.listen(self.async_engine.sync_engine.pool, "checkout", _replace_if_closed)
        self._conflict_errors += (pg_errors.IntegrityConstraintViolationError,)
        # What a retry can get past: a lost or refused connection, a server shutting down or
        # out of connections, a lock or deadlock timeout, a cancelled statement.
        self._transient_errors += (
            pg_errors.PostgresConnectionError,
            pg_errors.OperatorInterventionError,
            pg_errors.InsufficientResourcesError,
            pg_errors.TransactionRollbackError,
            pg_errors.LockNotAvailableError,
            # A schema change outdated a prepared statement again, in the second run of the
            # work (see `_on_asyncpg`).
            pg_errors.InvalidCachedStatementError,
        )

    @property
    def dialect(self) -> str:
        """The database's dialect name (``sqlite``, ``postgresql``, ``mysql``)."""
        return str(self.url.get_backend_name())

    async def write(self, work: Callable[[Session], T]) -> T:
        """Run ``work`` in one write transaction: committed if it returns, rolled back if not.

        Raises:
            DatabaseUnavailableError: the database is unreachable, stayed locked, or a
                concurrent writer won a race; nothing was written and the request may be retried.
        """
        return await self._run(work, write=True)

    async def write_unbundled(self, work: Callable[[Session], T]) -> T:
        """Run ``work`` whose statements are each complete on their own: no transaction bundles
        them, so a failure after the first keeps what the first wrote. On PostgreSQL this saves
        the BEGIN and COMMIT round trips; SQLite runs it like `write`.

        Raises:
            DatabaseUnavailableError: as `write`.
        """
        if self.async_engine is None:
            return await self._run(work, write=True)
        if self._statements is not None:
            async with self._translate():
                return await self._on_asyncpg(work, transaction=None)
        async with self._translate(), self._autocommit.connect() as async_connection:
            return await async_connection.run_sync(work)

    async def read(self, work: Callable[[Session], T]) -> T:
        """Run ``work`` in one read-only transaction."""
        return await self._run(work, write=False)

    async def _run(self, work: Callable[[Session], T], *, write: bool) -> T:
        async with self._translate():
            if self.sync_engine is not None:
                engine = self._sync_writer if write else self.sync_engine
                with engine.begin() as connection:
                    return work(connection)
            if self._statements is not None:
                return await self._on_asyncpg(work, transaction={"readonly": not write})
            assert self.async_engine is not None
            async with self.async_engine.begin() as async_connection:
                return await async_connection.run_sync(work)

    async def _on_asyncpg(
        self, work: Callable[[Session], T], *, transaction: dict[str, bool] | None
    ) -> T:
        """Run ``work`` on a pooled connection's asyncpg connection, in an asyncpg transaction
        with ``transaction``'s options (or none: each statement commits by itself).

        A schema change since a statement was prepared on this connection (an upgrade while
        serving) fails the transaction; asyncpg then forgets its outdated statements, and the
        work runs once more, from the start, as the rolled-back transaction wrote nothing.
        Without a transaction asyncpg prepares the statement again by itself.
        """
        assert self._outdated_statement is not None
        try:
            return await self._on_asyncpg_once(work, transaction=transaction)
        except self._outdated_statement:
            if transaction is None:
                raise
            logger.info("a schema change outdated prepared statements: running the work again")
            return await self._on_asyncpg_once(work, transaction=transaction)

    async def _on_asyncpg_once(
        self, work: Callable[[Session], T], *, transaction: dict[str, bool] | None
    ) -> T:
        assert self.async_engine is not None
        assert self._statements is not None
        assert self._session_class is not None
        async with self.async_engine.connect() as pooled:
            driver = (await pooled.get_raw_connection()).driver_connection
            assert driver is not None
            session = self._session_class(driver, self._statements)
            try:
                if transaction is None:
                    return await greenlet_spawn(work, session)
                async with driver.transaction(**transaction):
                    return await greenlet_spawn(work, session)
            except Exception as err:
                if driver.is_closed():  # asyncpg says "connection is closed", an InterfaceError
                    raise DatabaseUnavailableError(
                        "The database connection was lost; nothing was written. Retry shortly."
                    ) from err
                raise
            finally:
                # A connection that broke, or was left in a transaction (a rollback that
                # failed), goes no further: the pool opens a new one.
                if driver.is_closed() or driver.is_in_transaction():
                    await pooled.invalidate()

    @asynccontextmanager
    async def _translate(self) -> AsyncIterator[None]:
        try:
            yield
        except self._conflict_errors as err:
            logger.warning("write conflict, rolled back: %s", _cause(err))
            raise DatabaseUnavailableError(
                "A concurrent request changed the same job; nothing was written. Retry."
            ) from err
        except self._transient_errors as err:
            if isinstance(err, DBAPIError) and not (
                isinstance(err, OperationalError) or err.connection_invalidated
            ):
                raise
            logger.warning("database unavailable: %s", _cause(err))
            raise DatabaseUnavailableError(
                "The database is unavailable or busy; nothing was written. Retry shortly."
            ) from err
        except OSError as err:
            logger.warning("database unreachable: %s", type(err).__name__)
            raise DatabaseUnavailableError(
                "The database is unreachable; nothing was written. Retry shortly."
            ) from err

    async def dispose(self) -> None:
        """Close every pooled connection."""
        if self.sync_engine is not None:
            self.sync_engine.dispose()
        if self.async_engine is not None:
            await self.async_engine.dispose()
