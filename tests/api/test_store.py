"""The unit of work on every backend: rollback, the event loop never waiting on the database,
and connections or statements the database took away from a running server."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tests.helpers import BACKENDS, ServerProcess, database_url, job_body, sqlite_url, unique_id
from tests.postgres import PostgresServer
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store import migrate
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.dialects import IDLE_PING_SECONDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_unit_of_work_leaves_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = Database(to_engine_url(database_url(backend, tmp_path, request)))
    job_id = unique_id()
    config = {"batch_sizes": [32]}

    def insert_then_fail(conn: Connection) -> None:
        repo.insert_job_if_absent(conn, job_id, "job", config)
        raise RuntimeError("the unit of work failed")

    async def scenario() -> object:
        await migrate.upgrade(db)
        with pytest.raises(RuntimeError):
            await db.write(insert_then_fail)
        return await db.read(lambda conn: repo.get_job(conn, job_id))

    try:
        assert asyncio.run(scenario()) is None
    finally:
        db.dispose()


def test_a_request_waiting_on_the_database_holds_up_only_itself(tmp_path: Path) -> None:
    """Another process holds SQLite's write lock: a batch-size request waits for it (in a
    worker thread), while the same server process answers its health check at once."""
    path = tmp_path / "bso.db"
    server = ServerProcess(sqlite_url(path), cwd=tmp_path)
    try:
        job_id = unique_id()
        with server.client() as http:
            assert http.post("/jobs", json=job_body(job_id)).status_code == 201
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        answers: list[httpx.Response] = []
        waiting = threading.Thread(
            target=lambda: answers.append(
                httpx.get(f"{server.url}/jobs/batch_size", params={"job_id": job_id}, timeout=60)
            )
        )
        waiting.start()
        time.sleep(1.0)  # the request is now waiting on the lock
        health = httpx.get(f"{server.url}/healthz", timeout=5)
        assert health.status_code == 200
        assert waiting.is_alive(), "the batch-size request should still be waiting on the lock"
        holder.execute("COMMIT")
        holder.close()
        waiting.join(timeout=60)
        assert answers[0].status_code == 200, answers[0].text
    finally:
        server.stop()


def test_connections_the_database_closed_are_replaced_without_an_error(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """The server terminates every connection of the database (as a restart or an idle
    timeout would) between requests: the next requests are answered, not refused. The pool
    pings a connection that sat idle before reusing it; a restart takes longer than that."""

    def terminate(url: str) -> None:
        assert postgres.end_sessions(url.rsplit("/", 1)[1]) >= 1
        time.sleep(IDLE_PING_SECONDS + 0.5)

    _answered_across(terminate, postgres, tmp_path)


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_a_schema_change_under_a_running_server_costs_no_request(
    prepared: bool, postgres: PostgresServer, tmp_path: Path
) -> None:
    """Column types change under a running server (as an upgrade while serving would). Its
    statements are not prepared on the server (unless the URL's ``prepare_threshold`` says),
    so none goes stale; where they are, they fail once ("cached plan must not change result
    type"), and the request runs again on statements prepared anew."""

    def retype(url: str) -> None:
        _admin_sql(url, "ALTER TABLE trials ALTER COLUMN round TYPE bigint")
        _admin_sql(url, "ALTER TABLE jobs ALTER COLUMN next_trial_number TYPE bigint")

    query = "?prepare_threshold=5" if prepared else ""
    log = _answered_across(retype, postgres, tmp_path, query)
    assert ("a column type changed under the server" in log) is prepared


def _answered_across(
    disruption: Callable[[str], None], postgres: PostgresServer, tmp_path: Path, query: str = ""
) -> str:
    """Six trials of a job on a server (enough for a driver to prepare its statements, where it
    does), ``disruption(database URL)``, three more: every request answered, the numbers going
    on. ``query``: the server's database URL's. Returns the server's log."""
    url = postgres.new_database()
    server = ServerProcess(url + query, cwd=tmp_path)
    try:
        job_id = unique_id()
        with server.client() as http:
            assert http.post("/jobs", json=job_body(job_id)).status_code == 201
            for _ in range(6):
                assert http.get("/jobs/batch_size", params={"job_id": job_id}).status_code == 200
            disruption(url)
            for number in (7, 8, 9):
                answer = http.get("/jobs/batch_size", params={"job_id": job_id})
                assert answer.status_code == 200, answer.text
                assert answer.json()["trial_number"] == number
            assert http.get(f"/api/jobs/{job_id}").json()["trial_count"] == 9
    finally:
        server.stop()
    return server.log()


def _admin_sql(url: str, statement: str) -> int:
    """Run one statement on its own connection; returns its first column, if any."""
    engine = sa.create_engine(to_engine_url(url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            result = conn.exec_driver_sql(statement)
            return int(result.scalar_one()) if result.returns_rows else 0
    finally:
        engine.dispose()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_sqlite_file_deleted_or_replaced_under_the_server_refuses_writes(
    tmp_path: Path, how: str
) -> None:
    """``rm zeus-bso.db*`` under a running server: its connections would keep writing to the
    unlinked file and answer 200 for writes a restart loses. It answers 503 instead, and says
    why in its log and in /readyz."""
    path = tmp_path / "bso.db"
    server = ServerProcess(sqlite_url(path), cwd=tmp_path)
    try:
        with server.client() as http:
            assert http.post("/jobs", json=job_body(unique_id())).status_code == 201
            for leftover in tmp_path.glob("bso.db*"):
                leftover.unlink()
            if how == "replaced":
                sqlite3.connect(path).close()  # another, empty database at the same path
            refused = http.post("/jobs", json=job_body(unique_id()))
            assert refused.status_code == 503, refused.text
            assert http.get("/readyz").status_code == 503
            assert http.get("/healthz").status_code == 200
            metrics = http.get("/metrics")  # still answers: without the fleet's totals
            assert metrics.status_code == 200
            assert "zeus_bso_fleet_up 0.0" in metrics.text
            assert "zeus_bso_http_requests_total" in metrics.text
            assert "zeus_bso_energy_saved_joules" not in metrics.text
        assert f"the SQLite database {path}" in server.log()
        assert "deleted" in server.log() if how == "deleted" else "replaced" in server.log()
    finally:
        server.stop()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB filesystem of its own (tmpfs; mounting needs root)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def test_readiness_says_no_while_the_sqlite_disk_is_full(small_disk: Path) -> None:
    server = ServerProcess(sqlite_url(small_disk / "bso.db"), cwd=small_disk.parent)
    try:
        with server.client() as http:
            assert http.post("/jobs", json=job_body(unique_id())).status_code == 201
            assert http.get("/readyz").status_code == 200
            filler = small_disk / "filler"
            with filler.open("wb") as out, contextlib.suppress(OSError):
                while True:  # until the disk is full
                    out.write(b"\0" * 65536)
                    out.flush()
            not_ready = http.get("/readyz")
            assert not_ready.status_code == 503
            assert "full" in not_ready.json()["message"]
            assert http.post("/jobs", json=job_body(unique_id())).status_code == 503
            filler.unlink()
            assert http.get("/readyz").status_code == 200
            assert http.post("/jobs", json=job_body(unique_id())).status_code == 201
    finally:
        server.stop()


def test_a_sqlite_write_runs_on_the_loop_unless_another_holds_the_lock(tmp_path: Path) -> None:
    """A SQLite write that gets the lock at once runs on the event loop's thread (no hop to a
    worker thread and back); one that finds another connection's lock waits in a worker thread,
    and the loop goes on meanwhile."""
    path = tmp_path / "bso.db"
    db = Database(to_engine_url(sqlite_url(path)))

    def where(_: Connection) -> int:
        return threading.get_ident()

    async def scenario() -> tuple[int, int, int, float]:
        await migrate.upgrade(db)
        loop_thread = threading.get_ident()
        free = await db.write(where)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        ticks: list[float] = []

        async def tick() -> None:
            for _ in range(5):
                ticks.append(time.monotonic())
                await asyncio.sleep(0.05)

        async def release() -> None:
            await asyncio.sleep(0.4)
            holder.execute("COMMIT")
            holder.close()

        began = time.monotonic()
        locked, *_ = await asyncio.gather(db.write(where), tick(), release())
        return loop_thread, free, locked, ticks[-1] - began

    try:
        loop_thread, free, locked, ticking = asyncio.run(scenario())
    finally:
        db.dispose()
    assert free == loop_thread
    assert locked != loop_thread
    assert ticking < 0.4  # the loop ticked on while the write waited for the lock


def test_a_servers_sqlite_log_is_checkpointed_in_the_background(tmp_path: Path) -> None:
    """The server's connections never checkpoint in a request: `Database.checkpoint` copies
    the log into the database (PASSIVE), and the log starts over at the next write; past the
    bound it waits for the writers (RESTART)."""
    path = tmp_path / "bso.db"
    db = Database(to_engine_url(sqlite_url(path)), background_checkpoints=True)

    def insert(conn: Connection) -> None:
        conn.exec_driver_sql("INSERT INTO x VALUES (randomblob(3000))")

    async def scenario() -> list[tuple[int, int]]:
        await db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE x (a)"))
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
        for _ in range(50):
            await db.write(insert)
        seen = [db.checkpoint()]
        await db.write(insert)
        seen.append(db.checkpoint())
        for _ in range(50):
            await db.write(insert)
        seen.append(db.checkpoint(max_wal_frames=10))
        await db.write(insert)
        seen.append(db.checkpoint())
        return seen

    try:
        (many, restarted, bounded, after) = asyncio.run(scenario())
    finally:
        db.dispose()
    assert many[0] == many[1] >= 50  # every frame copied
    assert restarted[0] < 10  # the log started over at the next write
    assert bounded[0] == bounded[1]
    assert after[0] < 10


RACE = """
import multiprocessing
import sys

from sqlalchemy import text
from sqlalchemy.engine import make_url

from zeus_bso_server.store.database import Database


def first_connection(url, barrier):
    engine = Database(make_url(url)).engine
    barrier.wait()
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


if __name__ == "__main__":
    folder, rounds, processes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    multiprocessing.set_start_method("fork")
    failed = 0
    for n in range(rounds):
        barrier = multiprocessing.Barrier(processes)
        url = f"sqlite:///{folder}/race-{n}.db"
        children = [
            multiprocessing.Process(target=first_connection, args=(url, barrier))
            for _ in range(processes)
        ]
        for child in children:
            child.start()
        for child in children:
            child.join()
        failed += any(child.exitcode != 0 for child in children)
    print(failed)
"""


def test_processes_that_open_a_new_sqlite_database_at_once_all_connect(tmp_path: Path) -> None:
    """Each connection switches the database to WAL; on a new file, those that switch it at
    once race for its write lock, and SQLite answered the losers "database is locked" without
    waiting: replicas, or `db upgrade` init containers, that start together on a fresh SQLite
    file. 80 rounds of 4 processes forked at once, each process's first connection to a fresh
    file: before they tried again, 1-9 rounds failed in each of eight runs."""
    script = tmp_path / "race.py"
    script.write_text(RACE)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "80", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["0"], done.stderr[-3000:]
