"""The engine and the unit of work: one transaction per request, database errors translated.

SQLite runs in WAL mode with a busy timeout, and a write transaction starts with
``BEGIN IMMEDIATE`` so that it holds the database's write lock from its first statement: two
requests on one job (in any process) are serialised before either reads. On PostgreSQL and MySQL
the job row is locked with ``SELECT ... FOR UPDATE`` (see the repository).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from zeus_bso_server.errors import DatabaseUnavailableError

logger = logging.getLogger(__name__)

_WRITE = "zeus_bso_write"


def _install_sqlite_hooks(engine: AsyncEngine, busy_timeout_ms: int) -> None:
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
        immediate = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    event.listen(engine.sync_engine, "connect", on_connect)
    event.listen(engine.sync_engine, "begin", on_begin)


def create_engine(url: URL, *, busy_timeout_ms: int = 30_000, echo: bool = False) -> AsyncEngine:
    """Create the async engine for ``url`` (already mapped to an async driver)."""
    if url.get_backend_name() == "sqlite":
        engine = create_async_engine(
            url, echo=echo, connect_args={"timeout": busy_timeout_ms / 1000.0}
        )
        _install_sqlite_hooks(engine, busy_timeout_ms)
        return engine
    return create_async_engine(url, echo=echo, pool_pre_ping=True, pool_size=10, max_overflow=10)


class Database:
    """Sessions over one engine: `write` for requests that change state, `read` for the rest."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._writer = async_sessionmaker(
            engine.execution_options(**{_WRITE: True}), expire_on_commit=False
        )
        self._reader = async_sessionmaker(engine, expire_on_commit=False)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """One write transaction: committed when the block ends, rolled back on any error.

        Raises:
            DatabaseUnavailableError: the database is unreachable, stayed locked, or a
                concurrent writer won a race; nothing was written and the request may be retried.
        """
        async with self._translate(), self._writer() as session, session.begin():
            yield session

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """One read-only transaction."""
        async with self._translate(), self._reader() as session, session.begin():
            yield session

    @asynccontextmanager
    async def _translate(self) -> AsyncIterator[None]:
        try:
            yield
        except IntegrityError as err:
            logger.warning("write conflict, rolled back: %s", type(err.orig).__name__)
            raise DatabaseUnavailableError(
                "A concurrent request changed the same job; nothing was written. Retry."
            ) from err
        except (OperationalError, DBAPIError) as err:
            if isinstance(err, DBAPIError) and not (
                isinstance(err, OperationalError) or err.connection_invalidated
            ):
                raise
            logger.warning("database unavailable: %s", type(err.orig).__name__)
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
        await self.engine.dispose()
