"""Copy a server's whole database into another, empty one: the move from the embedded SQLite
file to PostgreSQL (or MySQL) when one machine is no longer enough, or a copy kept as a backup.

Everything the server knows is in its tables (`zeus_bso_server.store.tables`): every row of
each is copied, in one transaction on the target, from one snapshot of the source (a read
transaction: SQLite's WAL, REPEATABLE READ elsewhere), so a server may keep serving the source
while it runs, and what it writes meanwhile is not in the copy. The target gets the current
schema first; both must be at it (upgrade the source with ``db upgrade``). Either every row is
copied, or (the target refused one, or went away) none is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, FromClause, Table, func, select
from sqlalchemy.exc import DBAPIError

from zeus_bso.spec import TrialStatus
from zeus_bso_server.errors import DatabaseUnavailableError, SchemaError
from zeus_bso_server.store.database import Database, shown_url
from zeus_bso_server.store.dialects import DIALECTS
from zeus_bso_server.store.migrate import upgrade
from zeus_bso_server.store.schema import HEAD, current_revision
from zeus_bso_server.store.tables import Base, JobRow, TrialRow

CHUNK_ROWS = 1000
"""Rows read and inserted at a time: a large database is never held in memory whole."""


@dataclass(frozen=True)
class Copied:
    """What a copy moved: rows by table name, the tables in the order they were copied."""

    rows: dict[str, int]
    running: dict[str, int]
    """Trials still running in the snapshot (dispatched, or abandoned, which a report revives),
    by job: a server that goes on serving the source takes their later reports."""


def _rows(source: Connection, table: Table) -> Iterator[list[dict[str, Any]]]:
    """The rows of ``table`` in primary-key order, a chunk at a time."""
    query = select(table).order_by(*table.primary_key.columns)
    result = source.execution_options(yield_per=CHUNK_ROWS).execute(query)
    for chunk in result.mappings().partitions():
        yield [dict(row) for row in chunk]


def _copy_rows(source: Connection, target: Connection) -> Copied:
    """Insert every row of the source's tables into the target's (parents first); checks that
    the target then holds as many rows of each table as the source did."""
    rows: dict[str, int] = {}
    for table in Base.metadata.sorted_tables:  # jobs before the trials that refer to them
        copied = 0
        for chunk in _rows(source, table):
            target.execute(table.insert(), chunk)
            copied += len(chunk)
        held = _count(target, table)
        if held != copied:  # the target's own rows in a table: refused before, never here
            raise SchemaError(
                f"the target's table {table.name} holds {held} rows after {copied} were copied"
            )
        rows[table.name] = copied
    open_ = (TrialStatus.DISPATCHED.value, TrialStatus.ABANDONED.value)
    running = source.execute(
        select(TrialRow.job_id, func.count())
        .where(TrialRow.status.in_(open_))
        .group_by(TrialRow.job_id)
        .order_by(TrialRow.job_id)
    )
    return Copied(rows, {job_id: int(count) for job_id, count in running})


async def _checked_source(source: Database) -> None:
    current = await current_revision(source)
    if current is None:
        raise SchemaError("the source database has no zeus-bso schema: nothing to copy")
    if current != HEAD:
        raise SchemaError(
            f"the source database's schema is at revision {current}, this version copies {HEAD}: "
            "upgrade the source first (`zeus-bso-server db upgrade --db SOURCE`), or copy with "
            "the version that wrote it"
        )


def _count(conn: Connection, table: FromClause) -> int:
    """Rows ``table`` holds."""
    return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


async def copy_database(source: Database, target: Database) -> Copied:
    """Copy every row of ``source`` into ``target``, which gets the current schema first and
    must hold no job.

    Raises:
        SchemaError: the source is not at the current schema, or the target holds jobs.
        DatabaseUnavailableError: either database cannot be reached (the message says which);
            nothing was copied.
    """
    async with _naming(f"cannot use the source database {shown_url(source.url)}"):
        await _checked_source(source)
    async with _naming(f"cannot use the target database {shown_url(target.url)}"):
        await upgrade(target)
        held = target.run(lambda conn: _count(conn, JobRow.__table__), write=False)
    if held:
        raise SchemaError(
            f"the target database holds {held} job{'s' if held != 1 else ''}: copy into an empty "
            "database (a copy does not merge two servers' histories)"
        )
    dialect = DIALECTS[source.url.get_backend_name()]
    snapshot = source.engine.execution_options(**dialect.snapshot)
    async with _naming(f"cannot use the source database {shown_url(source.url)}"):
        reading = snapshot.connect()
    with reading, reading.begin():
        dialect.without_time_limits(reading)  # idle while the target writes each chunk
        async with _naming("the copy failed"):
            return target.run(lambda writing: _copy_rows(reading, writing), write=True)


@asynccontextmanager
async def _naming(what: str) -> AsyncIterator[None]:
    """A database error inside, as one that says ``what`` failed, in the driver's words."""
    try:
        yield
    except (DBAPIError, DatabaseUnavailableError) as error:
        cause = " ".join(str(getattr(error, "orig", None) or error).split())
        raise DatabaseUnavailableError(f"{what}: {cause}; nothing was copied") from None
