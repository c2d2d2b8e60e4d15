"""The engine and the unit of work: one transaction per request, database errors translated.

A request's work is one synchronous function of a SQLAlchemy `Connection`, run in a worker
thread (`anyio.to_thread`) inside one transaction on a synchronous engine: sqlite3, psycopg 3 or
PyMySQL. The event loop never waits on the database, so a request blocked on a lock (another
process's SQLite write, a PostgreSQL row lock) holds up only itself. One exception, for speed:
a SQLite write first tries the write lock without waiting, on the event loop, and runs there
when it gets it (a write takes a fraction of a millisecond, and the hop to a worker thread and
back cost a fifth of a report's latency); when another process holds the lock, the write goes
to a worker thread and waits there, as every other unit of work does.

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
from typing import Any, NoReturn, TypeVar

import anyio.to_thread
from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from zeus_bso_server.errors import DatabaseUnavailableError
from zeus_bso_server.store.dialects import DIALECTS, LOCK_TIMEOUT_MS, WRITE_OPTION, dialect_of
from zeus_bso_server.store.filesystem import warn_if_networked

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


MAX_WAL_FRAMES = 16_384
"""Pages (4 KiB each by default) past which a background checkpoint makes the log start over."""

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


def shown_url(url: URL) -> str:
    """``url`` as it may be shown or logged: without its password."""
    return url.render_as_string(hide_password=True)


class _LockedError(Exception):
    """The SQLite write lock is another connection's: the write did not start."""


class Database:
    """A synchronous engine and the units of work run on it, each in a worker thread (a SQLite
    write that gets the lock at once: on the event loop)."""

    def __init__(
        self,
        url: URL,
        *,
        busy_timeout_ms: int = 30_000,
        lock_timeout_ms: int = LOCK_TIMEOUT_MS,
        echo: bool = False,
        background_checkpoints: bool = False,
        password_file: Path | None = None,
    ) -> None:
        """``password_file``: the database's password is this file's first line, read at each
        new connection (a rotated secret is taken without a restart)."""
        self.url = url
        dialect = DIALECTS[url.get_backend_name()]
        self.engine = create_engine(url, echo=echo, **dialect.engine_options(busy_timeout_ms))
        if password_file is not None:  # before the dialect's hooks: MySQL's connects itself
            event.listen(self.engine, "do_connect", _password_from(password_file))
        dialect.install_hooks(self.engine, busy_timeout_ms, lock_timeout_ms)
        self._writer = self.engine.execution_options(**{WRITE_OPTION: True})
        self._sqlite_file = _SqliteFile.of(url)
        self._trying: Engine | None = None
        if self._sqlite_file is not None:  # a file: every connection opens the same database
            warn_if_networked(self._sqlite_file.path)
            trying = create_engine(url, echo=echo, **dialect.engine_options(0))
            dialect.install_hooks(trying, 0)  # no busy timeout: the lock now, or not at all
            self._trying = trying.execution_options(**{WRITE_OPTION: True})
            if background_checkpoints:
                for engine in (self.engine, trying):
                    event.listen(engine, "connect", _no_autocheckpoint)
        self._checkpoints = background_checkpoints and self._sqlite_file is not None

    async def write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one write transaction: committed if it returns, rolled back if not.

        Raises:
            DatabaseUnavailableError: the database is unreachable, stayed locked, or a
                concurrent writer won a race; nothing was written and the request may be retried.
        """
        if self._trying is not None:
            try:
                return self._run(work, self._trying, trying=True)
            except _LockedError:
                pass  # another process writes: wait for the lock in a worker thread
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
        return self._run(work, self._writer if write else self.engine)

    def _run(self, work: Callable[[Connection], T], engine: Engine, trying: bool = False) -> T:
        """`run` on ``engine``; ``trying``: raise `_LockedError` if the transaction cannot begin at
        once (SQLite's write lock is another connection's), having done nothing."""
        if self._sqlite_file is not None:
            self._sqlite_file.check()
        try:
            try:
                return _transaction(engine, work, trying)
            except DBAPIError as err:
                if not _stale_plan(err):
                    raise
                # The rollback dropped the connection's prepared statements: once more.
                logger.warning("a column type changed under the server; preparing statements anew")
                return _transaction(engine, work, trying)
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

    async def checkpoint_every(self, seconds: float) -> None:
        """With ``background_checkpoints`` (a SQLite file): copy the write-ahead log into the
        database every ``seconds``, in a worker thread, until cancelled. A commit that crosses
        SQLite's automatic threshold would otherwise checkpoint, and wait for the disk, inside
        a request: a few milliseconds every few hundred writes. See `checkpoint`."""
        if not self._checkpoints:
            return
        while True:
            await anyio.sleep(seconds)
            try:
                await anyio.to_thread.run_sync(self.checkpoint)
            except (DBAPIError, OSError) as err:
                logger.warning("WAL checkpoint failed (tried again later): %s", _cause(err))

    def checkpoint(self, max_wal_frames: int = MAX_WAL_FRAMES) -> tuple[int, int]:
        """Copy the write-ahead log into the SQLite database without holding up writers
        (PASSIVE). The log starts over at the first write after a checkpoint that copied all of
        it; under writes that never pause that long, it would only grow, so past
        ``max_wal_frames`` the checkpoint waits for the writers (RESTART) and the log starts
        over. Returns the log's frames and those copied (SQLite's answer)."""
        with self.engine.connect() as connection:
            _, frames, copied = connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
            if frames > max_wal_frames:
                _, frames, copied = connection.exec_driver_sql(
                    "PRAGMA wal_checkpoint(RESTART)"
                ).one()
        return int(frames), int(copied)

    async def check_writable(self) -> None:
        """For readiness: raises DatabaseUnavailableError where a write cannot succeed that a
        read would not notice (a SQLite file on a full disk; a connection that takes no
        writes: a standby's, a database set read-only). PostgreSQL and MySQL keep their own
        disks; their errors answer 503 as they come."""
        if self._sqlite_file is not None:
            await anyio.to_thread.run_sync(self._sqlite_file.check_space)
        elif await self.read(dialect_of(self.engine).takes_no_writes):
            # The pool's connections may keep the setting they opened with after the database
            # takes writes again: the next check opens new ones (else, its pod out of service
            # and nothing written to drop them, the server would stay unready for good).
            self.engine.dispose()
            raise DatabaseUnavailableError(
                "The database takes no writes (a standby, or set read-only): runs cannot be "
                "served. Point the server at the primary (a URL of several hosts: add "
                "target_session_attrs=read-write)."
            )

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
        if self._trying is not None:
            self._trying.engine.dispose()


def read_password(file: Path) -> str:
    """The password in ``file``: its first line.

    Raises:
        ValueError: the file cannot be read, or its first line is empty.
    """
    try:
        lines = file.read_text().splitlines()
    except OSError as err:
        raise ValueError(f"cannot read the database password file {file}: {err.strerror}") from None
    if not lines or not lines[0]:
        raise ValueError(f"the database password file {file} is empty")
    return lines[0]


def _password_from(file: Path) -> Callable[..., None]:
    """A ``do_connect`` hook: the connection's password is ``file``'s first line, as it is now.

    Raises (from the hook):
        DatabaseUnavailableError: the file cannot be read now (the log says why).
    """

    def on_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        try:
            cparams["password"] = read_password(file)
        except ValueError as err:
            logger.error("%s: no new database connection", err)
            raise DatabaseUnavailableError(
                "The database's password cannot be read; nothing was written. Retry shortly."
            ) from None

    return on_connect


def _no_autocheckpoint(dbapi_connection: Any, _record: Any) -> None:
    """The server's connections leave checkpoints to `Database.checkpoint_every`, and the log
    file is cut back to 64 MiB when it starts over."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA wal_autocheckpoint = 0")
    cursor.execute(f"PRAGMA journal_size_limit = {64 << 20}")
    cursor.close()


def _transaction(engine: Engine, work: Callable[[Connection], T], trying: bool) -> T:
    """``work`` in one transaction on ``engine``: committed if it returns, rolled back if not;
    ``trying``: `_LockedError` when the transaction cannot begin at once."""
    with engine.connect() as connection:
        try:
            transaction = connection.begin()
        except OperationalError as err:
            if trying:
                raise _LockedError from err
            raise
        with transaction:
            return work(connection)
