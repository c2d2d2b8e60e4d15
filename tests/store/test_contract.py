"""The `JobStore` contract (`zeus_bso.testing.StoreContract`) on every store: the simulator's
in-memory store and the server's SQL store on SQLite, PostgreSQL and MySQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import BACKENDS, database_url, unique_id
from zeus_bso.policy.store import JobStore
from zeus_bso.sim.memory import MemoryStore
from zeus_bso.testing import SIZES, Opener, StoreContract, new_job
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store import migrate
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.sql_store import SqlJobStore


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def opened(self) -> Opener:
        memory = MemoryStore(new_job())

        @contextmanager
        def in_memory() -> Iterator[JobStore]:
            yield memory

        return in_memory


class TestSqlStore(StoreContract):
    """Each opening is a new transaction that locks and reads the job row again."""

    @pytest.fixture(params=BACKENDS)
    def opened(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
        db = Database(to_engine_url(database_url(request.param, tmp_path, request)))
        asyncio.run(migrate.upgrade(db))
        job_id = unique_id("contract")
        config = {"batch_sizes": list(SIZES)}
        db.run(
            lambda c: repo.insert_job_if_absent(c, job_id, "contract", config),
            write=True,
        )

        @contextmanager
        def in_sql() -> Iterator[JobStore]:
            with db.engine.begin() as conn:
                stored = repo.get_job(conn, job_id, lock=True)
                assert stored is not None
                yield SqlJobStore.of(conn, stored)

        try:
            yield in_sql
        finally:
            db.dispose()
