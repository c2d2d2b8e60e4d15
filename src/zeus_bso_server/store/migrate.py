"""Schema migrations (Alembic, shipped inside the package) and the schema check at start."""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from zeus_bso_server.errors import SchemaError

UPGRADE_COMMAND = "zeus-bso-server db upgrade --db <URL>"


def alembic_config() -> Config:
    """Alembic configuration pointing at the packaged migration scripts."""
    config = Config()
    config.set_main_option("script_location", str(files("zeus_bso_server.store") / "migrations"))
    return config


def head_revision() -> str:
    """The schema revision this server needs."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _upgrade(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


async def current_revision(engine: AsyncEngine) -> str | None:
    """The database's schema revision (``None`` for an empty database)."""
    async with engine.connect() as connection:
        return await connection.run_sync(_current)


async def upgrade(engine: AsyncEngine) -> tuple[str | None, str]:
    """Bring the database to the current schema. Returns the revisions before and after."""
    before = await current_revision(engine)
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade)
    return before, head_revision()


async def check_schema(engine: AsyncEngine) -> None:
    """Refuse a database whose schema is not the one this server needs.

    Raises:
        SchemaError: the schema is missing, older or newer; the message says what to run.
    """
    current, head = await current_revision(engine), head_revision()
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
