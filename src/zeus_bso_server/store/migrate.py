"""Schema migrations (Alembic, shipped inside the package): a database brought to the revision
this server needs, or taken back to an older one. The check at start is
`zeus_bso_server.store.schema`'s, which needs no Alembic."""

from __future__ import annotations

import functools
from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from zeus_bso_server.errors import MigrationFailedError, SchemaError
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.dialects import dialect_of
from zeus_bso_server.store.schema import current_revision, on_connection, revision_of


def alembic_config() -> Config:
    """Alembic configuration pointing at the packaged migration scripts."""
    config = Config()
    config.set_main_option("script_location", str(files("zeus_bso_server.store") / "migrations"))
    return config


@functools.cache
def head_revision() -> str:
    """The newest migration's revision, read from the scripts (the server holds its database
    against `zeus_bso_server.store.schema.HEAD`, which must equal it)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _migrate(connection: Connection, revision: str, *, down: bool) -> list[str]:
    """Migrate under a database-wide lock: replicas that upgrade as they start (an init
    container in every pod) take turns, and those after the first find nothing left to do,
    because Alembic reads the current revision only once it holds the lock. On SQLite the
    transaction's BEGIN IMMEDIATE is that lock (see `on_connection`)."""
    config = alembic_config()
    config.attributes["connection"] = connection
    dialect = dialect_of(connection)
    in_transaction = not dialect.session_schema_lock  # else `on_connection` holds it
    if in_transaction:
        dialect.lock_schema(connection)
    notices: list[str] = []
    try:
        if down:
            notices = _check_downgrade(connection, config, revision)
        (command.downgrade if down else command.upgrade)(config, revision)
    except CommandError as error:  # an unknown revision
        raise SchemaError(str(error)) from None
    finally:
        if in_transaction:
            dialect.unlock_schema(connection)
    return notices


def _check_downgrade(connection: Connection, config: Config, target: str) -> list[str]:
    """Ask each revision a downgrade would undo whether it can keep the stored data's meaning,
    before any is undone (on MySQL, DDL commits at once, so a refusal halfway would leave a
    schema between revisions). A revision module may define ``refuse_downgrade(connection)``
    (a reason to refuse, or None) and ``downgrade_notice(connection)`` (what the older schema
    keeps less precisely, or None). Returns the notices.

    Raises:
        SchemaError: a revision refuses; its words say why and what to do. Nothing changed.
    """
    script = ScriptDirectory.from_config(config)
    current = revision_of(connection)
    try:  # newest first: the revisions the downgrade undoes (target: a revision, base, -N)
        undone = list(script.iterate_revisions(current, target)) if current else []
    except RevisionError:
        return []  # an unknown target: Alembic's downgrade refuses it with its own words
    notices = []
    for script_revision in undone:
        revision, module = script_revision.revision, script_revision.module
        refuse = getattr(module, "refuse_downgrade", None)
        reason = refuse(connection) if refuse is not None else None
        if reason:
            raise SchemaError(
                f"cannot downgrade below revision {revision}: {reason}; nothing was changed"
            )
        notice = getattr(module, "downgrade_notice", None)
        said = notice(connection) if notice is not None else None
        if said:
            notices.append(f"below revision {revision}: {said}")
    return notices


async def upgrade(db: Database, revision: str = "head") -> tuple[str | None, str | None]:
    """Bring the database to the current schema (or to ``revision``). Returns the revisions
    before and after."""
    before = await current_revision(db)
    try:
        await on_connection(db, lambda conn: _migrate(conn, revision, down=False), exclusive=True)
    except (SQLAlchemyError, ValueError, KeyError, TypeError) as error:  # a revision's own step
        failed = await _failed_upgrade(db, before, error)
        if failed is None:
            raise
        raise failed from error
    return before, await current_revision(db)


async def _failed_upgrade(
    db: Database, before: str | None, error: Exception
) -> MigrationFailedError | None:
    """What a failed upgrade left, and what to do (None: the database cannot be read now, and
    the error says so itself)."""
    words = str(getattr(error, "orig", None) or error)
    try:
        after = await current_revision(db)
    except SQLAlchemyError:
        return None
    failed = f"the schema upgrade from revision {before or 'empty'} failed: {words}"
    if dialect_of(db.engine).transactional_ddl:
        return MigrationFailedError(
            f"{failed}; nothing was changed (the database is still at revision "
            f"{after or 'none'}, where the server version that wrote it starts); report this "
            "error with its message"
        )
    return MigrationFailedError(
        f"{failed}; MySQL and MariaDB commit each schema change at once, so the database is at "
        f"revision {after or 'none'} with the next revision perhaps partly applied: restore the "
        "backup taken before the upgrade (or undo that revision's changes by hand, as its file "
        "in zeus_bso_server/store/migrations/versions says) and run `db upgrade` again"
    )


async def downgrade(db: Database, revision: str) -> tuple[str | None, str | None, list[str]]:
    """Take the database's schema back to ``revision`` (``base``: no schema), keeping the
    stored data. Returns the revisions before and after, and what the older schema keeps less
    precisely (see `_check_downgrade`).

    Raises:
        SchemaError: the older schema cannot hold some of the data; nothing changed.
    """
    before = await current_revision(db)
    notices = await on_connection(
        db, lambda conn: _migrate(conn, revision, down=True), exclusive=True
    )
    return before, await current_revision(db), notices
