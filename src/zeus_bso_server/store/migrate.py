"""Schema migrations (Alembic, shipped inside the package) and the schema check at start."""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.resources import files
from typing import TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from zeus_bso_server.errors import SchemaError
from zeus_bso_server.store.database import Database

T = TypeVar("T")

UPGRADE_COMMAND = "zeus-bso-server db upgrade --db <URL>"


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
    config = alembic_config()
    config.attributes["connection"] = connection
    (command.downgrade if down else command.upgrade)(config, revision)


async def on_connection(db: Database, work: Callable[[Connection], T]) -> T:
    """Run ``work`` (schema work: Alembic, reflection) on a SQLAlchemy `Connection` of ``db``,
    in a transaction."""
    if db.sync_engine is not None:
        # SQLite work runs on the loop thread, like every other unit of work (see Database).
        with db.sync_engine.begin() as connection:
            return work(connection)
    assert db.async_engine is not None
    async with db.async_engine.begin() as connection:
        return await connection.run_sync(work)


async def current_revision(db: Database) -> str | None:
    """The database's schema revision (``None`` for an empty database)."""
    return await on_connection(db, _current)


async def upgrade(db: Database, revision: str = "head") -> tuple[str | None, str | None]:
    """Bring the database to the current schema (or to ``revision``). Returns the revisions
    before and after."""
    before = await current_revision(db)
    await on_connection(db, lambda conn: _migrate(conn, revision, down=False))
    return before, await current_revision(db)


async def downgrade(db: Database, revision: str) -> tuple[str | None, str | None]:
    """Take the database's schema back to ``revision`` (``base``: no schema), keeping the
    stored data. Returns the revisions before and after."""
    before = await current_revision(db)
    await on_connection(db, lambda conn: _migrate(conn, revision, down=True))
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
