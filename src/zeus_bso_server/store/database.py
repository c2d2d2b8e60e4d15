"""The engine and the unit of work: one transaction per request, database errors translated.

A request's work is one synchronous function of a SQLAlchemy `Connection`, run in a worker
thread (`anyio.to_thread`) inside one transaction on a synchronous engine: sqlite3, psycopg 3 or
PyMySQL. The event loop never waits on the database, so a request blocked on a lock (another
process's SQLite write, a PostgreSQL row lock) holds up only itself.

The job row is the lock: ``SELECT ... FOR UPDATE`` on PostgreSQL and MySQL; on SQLite a write
transaction starts with ``BEGIN IMMEDIATE`` (WAL mode, a busy timeout), so it holds the
database's write lock from its first statement. Either way two requests on one job, in any
process, are serialised before either reads. What differs between the databases is in
`zeus_bso_server.store.dialects`.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import anyio.to_thread
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from zeus_bso_server.errors import DatabaseUnavailableError
from zeus_bso_server.store.dialects import DIALECTS, WRITE_OPTION

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _stale_plan(err: DBAPIError) -> bool:
    """Whether ``err`` is PostgreSQL refusing a statement that psycopg prepared on the server
    before a column's type changed ("cached plan must not change result type")."""
    return getattr(err.orig, "sqlstate", None) == "0A000"


def _cause(err: BaseException) -> str:
    """The driver's error behind ``err`` (SQLAlchemy wraps it in ``orig``): its type and words."""
    cause = getattr(err, "orig", None) or err
    return f"{type(cause).__name__}: {cause}"


MIN_FREE_BYTES = 1 << 20
"""Free space below which a SQLite server says it is not ready: far more than a request writes."""


class _SqliteFile:
    """The SQLite file a server opened. Deleted or replaced under a running server (``rm
    zeus-bso.db*``), its open connections would go on writing to the unlinked file, and every
    answer would be a lie: each unit of work first checks that the path still names the file,
    a ``stat`` of a few microseconds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None

    @classmethod
    def of(cls, url: URL) -> _SqliteFile | None:
        path = DIALECTS[url.get_backend_name()].database_file(url)
        return None if path is None else cls(path)

    def check(self) -> None:
        """Raises DatabaseUnavailableError when the file is gone or is another file now."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            if self._identity is None:
                return  # not created yet: the first connection creates it
            self._lost("was deleted")
        identity = (stat.st_dev, stat.st_ino)
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            self._lost("was replaced by another file")

    def check_space(self) -> None:
        """Raises DatabaseUnavailableError when the file's filesystem has less than
        `MIN_FREE_BYTES` left: a write would fail (for readiness, whose probes come every few
        seconds; a ``statvfs`` costs microseconds)."""
        try:
            fs = os.statvfs(self.path.parent)
        except OSError:
            return  # the directory is gone: `check` says so
        free = fs.f_bavail * fs.f_frsize
        if free < MIN_FREE_BYTES:
            raise DatabaseUnavailableError(
                f"The disk of the database file is full ({free} bytes free); writes would fail."
            )

    def _lost(self, what: str) -> NoReturn:
        logger.error(
            "the SQLite database %s %s while the server was running: refusing requests so that "
            "no answer claims a write that is lost; restore the file, or restart the server to "
            "use the new one",
            self.path,
            what,
        )
        raise DatabaseUnavailableError(
            "The database file is gone; nothing was written. The operator must restore it."
        )


class Database:
    """A synchronous engine and the units of work run on it, each in a worker thread."""

    def __init__(self, url: URL, *, busy_timeout_ms: int = 30_000, echo: bool = False) -> None:
        self.url = url
        dialect = DIALECTS[url.get_backend_name()]
        self.engine = create_engine(url, echo=echo, **dialect.engine_options(busy_timeout_ms))
        dialect.install_hooks(self.engine, busy_timeout_ms)
        self._writer = self.engine.execution_options(**{WRITE_OPTION: True})
        self._sqlite_file = _SqliteFile.of(url)

    async def write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one write transaction: committed if it returns, rolled back if not.

        Raises:
            DatabaseUnavailableError: the database is unreachable, stayed locked, or a
                concurrent writer won a race; nothing was written and the request may be retried.
        """
        return await anyio.to_thread.run_sync(functools.partial(self.run, work, write=True))

    async def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction that writes nothing."""
        return await anyio.to_thread.run_sync(functools.partial(self.run, work, write=False))

    def run(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """Run ``work`` in one transaction, in the calling thread (`write` and `read` run this in
        a worker thread).

        Raises:
            DatabaseUnavailableError: as `write`.
        """
        if self._sqlite_file is not None:
            self._sqlite_file.check()
        engine = self._writer if write else self.engine
        try:
            try:
                with engine.begin() as connection:
                    return work(connection)
            except DBAPIError as err:
                if not _stale_plan(err):
                    raise
                # The rollback dropped the connection's prepared statements: once more.
                logger.warning("a column type changed under the server; preparing statements anew")
                with engine.begin() as connection:
                    return work(connection)
        except IntegrityError as err:
            logger.warning("write conflict, rolled back: %s", _cause(err))
            raise DatabaseUnavailableError(
                "A concurrent request changed the same job; nothing was written. Retry."
            ) from err
        except (DBAPIError, PoolTimeoutError) as err:
            # Programming errors (a bad statement) are bugs, not unavailability: they go on.
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

    async def check_writable(self) -> None:
        """For readiness: raises DatabaseUnavailableError where a write cannot succeed that a
        read would not notice (a SQLite file on a full disk). PostgreSQL and MySQL keep their
        own disks; their errors answer 503 as they come."""
        if self._sqlite_file is not None:
            await anyio.to_thread.run_sync(self._sqlite_file.check_space)

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
