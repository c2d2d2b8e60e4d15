"""The schema check at start and on readiness probes, without Alembic: the revision a database
is at, read from Alembic's version table, against the one this server needs (`HEAD`); and
`on_connection`, where schema work runs.

A server whose database is already at `HEAD`, as it is at every start but the first after an
upgrade, never imports Alembic or loads the migration scripts (`zeus_bso_server.store.migrate`,
which brings a database to `HEAD`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

import anyio.to_thread
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from zeus_bso_server.errors import SchemaError
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.dialects import WRITE_OPTION, dialect_of

T = TypeVar("T")

HEAD = "0018"
"""The schema revision this server needs: the newest migration's (`migrate.head_revision`,
which reads the scripts; ``tests/api/test_migrations.py`` holds the two equal)."""

UPGRADE_COMMAND = "zeus-bso-server db upgrade --db <URL>"

VERSION_TABLE = "alembic_version"
"""Where Alembic keeps a database's revision (one row)."""


async def on_connection(
    db: Database, work: Callable[[Connection], T], *, exclusive: bool = False
) -> T:
    """Run ``work`` (schema work: Alembic, reflection) on a SQLAlchemy `Connection` of ``db``,
    in a transaction, in a worker thread; ``exclusive`` (a migration) takes SQLite's write lock
    from the start, and a dialect's session lock on the schema around the transaction. The
    driver's errors are not translated: the CLI shows their own words."""

    def run() -> T:
        with db.engine.connect() as connection:
            connection = connection.execution_options(**{WRITE_OPTION: exclusive})
            dialect = dialect_of(connection)
            with _session_schema_lock(connection) if exclusive else contextlib.nullcontext():
                if not (exclusive and dialect.rebuilds_tables):
                    with connection.begin():
                        return work(connection)
                return _without_sqlite_foreign_keys(connection, work)

    return await anyio.to_thread.run_sync(run)


@contextlib.contextmanager
def _session_schema_lock(connection: Connection) -> Iterator[None]:
    """Hold a dialect's session lock on the schema (MySQL's) from before the migration's
    transaction until after it commits. Released inside it, the next process to take the lock
    read the revision before the migration's last step, whose version row was not committed
    yet, and ran that step again ("Table 'power_profiles' already exists"). A connection whose
    lock cannot be released is closed, which releases it."""
    dialect = dialect_of(connection)
    if not dialect.session_schema_lock:
        yield
        return
    dialect.lock_schema(connection)
    connection.commit()
    try:
        yield
    finally:
        try:
            dialect.unlock_schema(connection)
            connection.commit()
        except SQLAlchemyError:
            connection.invalidate()


def _without_sqlite_foreign_keys(connection: Connection, work: Callable[[Connection], T]) -> T:
    """Run schema ``work`` on SQLite with foreign keys off, and check them before committing.

    Alembic's batch mode rebuilds a table (copy, ``DROP TABLE``, rename); with foreign keys on,
    dropping ``jobs`` deletes every trial (``ON DELETE CASCADE``). The pragma is a no-op inside a
    transaction, so it is set before ``BEGIN``, on the driver's connection (which runs outside
    any transaction), and set back afterwards, before the connection returns to the pool.

    Raises:
        SchemaError: the migrated tables break a foreign key (nothing is committed).
    """
    driver = connection.connection.driver_connection
    assert driver is not None
    driver.execute("PRAGMA foreign_keys = OFF")
    try:
        with connection.begin():
            result = work(connection)
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            if broken:
                raise SchemaError(
                    f"the migration would leave {len(broken)} row(s) whose foreign key points "
                    f"nowhere (first: table {broken[0][0]}, row {broken[0][1]}); nothing was "
                    "changed"
                )
        return result
    finally:
        driver.execute("PRAGMA foreign_keys = ON")


def revision_of(connection: Connection) -> str | None:
    """The database's schema revision (None: no schema)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(rows) > 1:
        raise SchemaError(f"the database's schema has {len(rows)} revisions ({', '.join(rows)})")
    return rows[0] if rows else None


async def current_revision(db: Database) -> str | None:
    """The database's schema revision (None: an empty database)."""
    return await on_connection(db, revision_of)


async def check_schema(db: Database) -> None:
    """Refuse a database whose schema is not the one this server needs.

    Raises:
        SchemaError: the schema is missing, older or newer; the message says what to run.
    """
    current = await current_revision(db)
    if current == HEAD:
        return
    if current is None:
        raise SchemaError(
            f"the database has no zeus-bso schema; create it with `{UPGRADE_COMMAND}`"
        )
    raise SchemaError(
        f"the database schema is at revision {current}, this server needs {HEAD}; "
        f"upgrade it with `{UPGRADE_COMMAND}` (or use the server version that wrote it)"
    )
