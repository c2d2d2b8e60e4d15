"""Schema migrations (Alembic, shipped inside the package) and the schema check at start."""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.resources import files
from typing import TypeVar

import anyio.to_thread
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from zeus_bso_server.errors import SchemaError
from zeus_bso_server.store.database import WRITE_OPTION, Database

T = TypeVar("T")

UPGRADE_COMMAND = "zeus-bso-server db upgrade --db <URL>"
# Names the database-wide lock that schema changes take (PostgreSQL wants a number).
_LOCK_NAME = "zeus_bso_schema"
_LOCK_KEY = 0x7A657573_62736F00  # "zeusbso\0"
_LOCK_WAIT_SECONDS = 600


def alembic_config() -> Config:
    """Alembic configuration pointing at the packaged migration scripts."""
    config = Config()
    config.set_main_option("script_location", str(files("zeus_bso_server.store") / "migrations"))
    return config


@functools.cache
def head_revision() -> str:
    """The schema revision this server needs (read once: /readyz asks on every probe)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _migrate(connection: Connection, revision: str, *, down: bool) -> None:
    """Migrate under a database-wide lock: replicas that upgrade as they start (an init
    container in every pod) take turns, and those after the first find nothing left to do,
    because Alembic reads the current revision only once it holds the lock. On SQLite the
    transaction's BEGIN IMMEDIATE is that lock (see `on_connection`)."""
    config = alembic_config()
    config.attributes["connection"] = connection
    dialect = connection.dialect.name
    if dialect == "postgresql":  # released when the transaction ends
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    elif dialect == "mysql":  # DDL commits on MySQL: a session lock, released below
        got = connection.execute(
            text("SELECT GET_LOCK(:name, :wait)"), {"name": _LOCK_NAME, "wait": _LOCK_WAIT_SECONDS}
        ).scalar()
        if got != 1:
            raise SchemaError(
                f"another process held the schema lock for {_LOCK_WAIT_SECONDS} s; "
                "is a migration stuck?"
            )
    try:
        (command.downgrade if down else command.upgrade)(config, revision)
    finally:
        if dialect == "mysql":
            connection.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": _LOCK_NAME})


async def on_connection(
    db: Database, work: Callable[[Connection], T], *, exclusive: bool = False
) -> T:
    """Run ``work`` (schema work: Alembic, reflection) on a SQLAlchemy `Connection` of ``db``,
    in a transaction, in a worker thread; ``exclusive`` takes SQLite's write lock from the
    start. The driver's errors are not translated: the CLI shows their own words."""

    def run() -> T:
        with db.engine.execution_options(**{WRITE_OPTION: exclusive}).begin() as connection:
            return work(connection)

    return await anyio.to_thread.run_sync(run)


async def current_revision(db: Database) -> str | None:
    """The database's schema revision (``None`` for an empty database)."""
    return await on_connection(db, _current)


async def upgrade(db: Database, revision: str = "head") -> tuple[str | None, str | None]:
    """Bring the database to the current schema (or to ``revision``). Returns the revisions
    before and after."""
    before = await current_revision(db)
    await on_connection(db, lambda conn: _migrate(conn, revision, down=False), exclusive=True)
    return before, await current_revision(db)


async def downgrade(db: Database, revision: str) -> tuple[str | None, str | None]:
    """Take the database's schema back to ``revision`` (``base``: no schema), keeping the
    stored data. Returns the revisions before and after."""
    before = await current_revision(db)
    await on_connection(db, lambda conn: _migrate(conn, revision, down=True), exclusive=True)
    return before, await current_revision(db)


async def check_schema(db: Database) -> None:
    """Refuse a database whose schema is not the one this server needs.

    Raises:
        SchemaError: the schema is missing, older or newer; the message says what to run.
    """
    current, head = await current_revision(db), head_revision()
    if current == head:
        return
    if current is None:
        raise SchemaError(
            f"the database has no zeus-bso schema; create it with `{UPGRADE_COMMAND}`"
        )
    raise SchemaError(
        f"the database schema is at revision {current}, this server needs {head}; "
        f"upgrade it with `{UPGRADE_COMMAND}` (or use the server version that wrote it)"
    )
