"""PostgreSQL's session: SQLAlchemy Core statements compiled by SQLAlchemy, run on asyncpg.

The API suite runs every route on it; these tests pin down what the routes do not reach: how
parameters are ordered and converted, row counts, rows, the compiled-statement cache, rollback,
and connections the database closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.exc import MultipleResultsFound, NoResultFound

from tests.conftest import ServerProcess, job_body, unique_id
from tests.postgres import PostgresServer
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store import migrate
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.session import Session

asyncpg = pytest.importorskip("asyncpg", reason="the postgres extra (asyncpg) is not installed")
from zeus_bso_server.store.asyncpg_session import (  # noqa: E402 (needs asyncpg)
    AsyncpgSession,
    CompiledStatement,
    StatementCache,
)

DIALECT = asyncpg_dialect.dialect()
metadata = sa.MetaData()
items = sa.Table(
    "items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(50)),
    sa.Column("payload", sa.JSON),
    sa.Column("flag", sa.Boolean),
)


def test_parameters_follow_the_compiled_positions_and_constants_fill_the_rest() -> None:
    statement = (
        sa.update(items)
        .where(items.c.id == sa.bindparam("key"), items.c.name == "fixed")
        .values(payload=sa.bindparam("new_payload", type_=sa.JSON()), flag=sa.bindparam("f"))
    )
    compiled = CompiledStatement.of(statement, DIALECT)
    arguments = compiled.arguments({"key": 7, "new_payload": {"a": [1, 2]}, "f": True})
    by_name = dict(zip(compiled.names, arguments, strict=True))
    assert by_name["key"] == 7
    assert by_name["new_payload"] == '{"a": [1, 2]}'  # JSON goes to asyncpg as text
    assert by_name["f"] is True
    assert "fixed" in arguments  # the statement's own literal
    assert compiled.returns_rows is False
    for position, name in enumerate(compiled.names, start=1):
        assert f"${position}::" in compiled.sql, name


def test_a_missing_parameter_is_named() -> None:
    statement = sa.select(items).where(items.c.id == sa.bindparam("k"))
    compiled = CompiledStatement.of(statement, DIALECT)
    with pytest.raises(KeyError, match="'k'"):
        compiled.arguments({})


def test_statements_it_cannot_run_as_compiled_are_refused_with_the_reason() -> None:
    with pytest.raises(TypeError, match="expanding IN"):
        CompiledStatement.of(sa.select(items).where(items.c.id.in_([1, 2])), DIALECT)
    with pytest.raises(ValueError, match="'keys'"):
        CompiledStatement.of(sa.select(items.c.name.label("keys")), DIALECT)


def test_repository_statements_compile_for_the_session() -> None:
    statements = [
        value
        for name, value in vars(repo).items()
        if name.startswith("_") and name.isupper() and isinstance(value, sa.sql.ClauseElement)
    ]
    assert len(statements) > 15
    for statement in statements:
        if isinstance(statement, sa.sql.Executable):
            CompiledStatement.of(statement, DIALECT)


def test_the_cache_compiles_a_statement_once_and_stays_bounded() -> None:
    cache = StatementCache(DIALECT, size=4)
    hot = sa.select(items).where(items.c.id == sa.bindparam("k"))
    first = cache.get(hot)
    for i in range(10):  # statements built per call pass through
        cache.get(sa.select(items).where(items.c.id == i))
        assert cache.get(hot) is first
    assert len(cache._entries) == 4


@pytest.fixture(scope="module")
def pg_database(postgres: PostgresServer) -> str:
    url = postgres.new_database()

    async def create() -> None:
        db = Database(to_engine_url(url))
        assert db.async_engine is not None
        async with db.async_engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        await migrate.upgrade(db)
        await db.dispose()

    asyncio.run(create())
    return url


def on_database(url: str, *works: Callable[[Database], Any]) -> list[Any]:
    """Run coroutines made by ``works`` one after another on one Database; their results."""

    async def run() -> list[Any]:
        db = Database(to_engine_url(url))
        try:
            return [await work(db) for work in works]
        finally:
            await db.dispose()

    return asyncio.run(run())


def test_rows_read_as_attributes_and_row_counts_come_from_the_command_tag(
    pg_database: str,
) -> None:
    name = unique_id("row")

    def write(session: Session) -> tuple[int, int, Any]:
        assert isinstance(session, AsyncpgSession)
        session.execute(sa.delete(items))
        inserted = session.execute(
            sa.insert(items).values(
                id=sa.bindparam("i"), name=sa.bindparam("n"), payload=sa.bindparam("p")
            ),
            {"i": 1, "n": name, "p": {"k": [1.5, None]}},
        ).rowcount
        session.execute(sa.insert(items).values(id=2, name="other", flag=False))
        changed = session.execute(sa.update(items).values(flag=True)).rowcount
        row = session.execute(sa.select(items).where(items.c.id == 1)).one()
        return inserted, changed, row

    def read(session: Session) -> tuple[Any, ...]:
        result = session.execute(sa.select(items.c.id).order_by(items.c.id))
        return tuple(result.scalars()), session.execute(sa.select(items).where(items.c.id == 9))

    [(inserted, changed, row), (ids, nothing)] = on_database(
        pg_database, lambda db: db.write(write), lambda db: db.read(read)
    )
    assert (inserted, changed) == (1, 2)
    assert (row.name, row.payload, row.flag) == (name, {"k": [1.5, None]}, True)
    assert row._mapping == {"id": 1, "name": name, "payload": {"k": [1.5, None]}, "flag": True}
    with pytest.raises(AttributeError, match="no column 'nope'"):
        _ = row.nope
    assert ids == (1, 2)
    assert nothing.first() is None
    with pytest.raises(NoResultFound):
        nothing.one()
    with pytest.raises(MultipleResultsFound):
        on_database(pg_database, lambda db: db.read(lambda s: s.execute(sa.select(items)).one()))


def test_a_failed_unit_of_work_leaves_nothing_and_the_connection_clean(pg_database: str) -> None:
    def write_then_fail(session: Session) -> None:
        session.execute(sa.insert(items).values(id=50, name="rolled back"))
        raise RuntimeError("the unit of work failed")

    def count(session: Session) -> int:
        return int(session.execute(sa.select(sa.func.count()).where(items.c.id == 50)).scalar_one())

    async def fail(db: Database) -> str:
        with pytest.raises(RuntimeError):
            await db.write(write_then_fail)
        return "raised"

    # One pooled connection, so that the second unit of work gets the first one's connection.
    results = on_database(pg_database, fail, lambda db: db.write(count), fail)
    assert results == ["raised", 0, "raised"]


def test_connections_the_database_closed_are_replaced_without_an_error(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """The server terminates every connection of the database (as a restart or an idle
    timeout would) between requests: the next requests are answered, not refused."""

    def terminate(url: str) -> None:
        assert asyncio.run(_terminate_connections(postgres, url)) >= 1

    _answered_across(terminate, postgres, tmp_path)


def _answered_across(
    disruption: Callable[[str], None], postgres: PostgresServer, tmp_path: Path
) -> None:
    """Three trials of a job on a server, ``disruption(database URL)``, three more: every
    request answered, the trial numbers going on."""
    url = postgres.new_database()
    server = ServerProcess(url, cwd=tmp_path)
    try:
        job_id = unique_id()
        with server.client() as http:
            assert http.post("/jobs", json=job_body(job_id)).status_code == 201
            for _ in range(3):
                assert http.get("/jobs/batch_size", params={"job_id": job_id}).status_code == 200
            disruption(url)
            for number in (4, 5, 6):
                answer = http.get("/jobs/batch_size", params={"job_id": job_id})
                assert answer.status_code == 200, answer.text
                assert answer.json()["trial_number"] == number
            assert http.get(f"/api/jobs/{job_id}").json()["trial_count"] == 6
    finally:
        server.stop()


async def _terminate_connections(postgres: PostgresServer, url: str) -> int:
    database = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(postgres.url())
    try:
        terminated = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1",
            database,
        )
    finally:
        await admin.close()
    await asyncio.sleep(0.5)  # the server's event loop sees the connections close
    return int(terminated)


def test_a_schema_change_under_a_running_server_costs_no_request(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """Column types change while the server holds prepared statements of them (as an upgrade
    while serving would): PostgreSQL refuses the outdated statements inside the request's
    transaction, and the server runs the request again on fresh ones instead of answering 503."""

    def retype(url: str) -> None:
        asyncio.run(
            _admin_sql(
                url,
                "ALTER TABLE trials ALTER COLUMN round TYPE bigint",
                "ALTER TABLE jobs ALTER COLUMN next_trial_number TYPE bigint",
            )
        )

    _answered_across(retype, postgres, tmp_path)


async def _admin_sql(url: str, *statements: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()
