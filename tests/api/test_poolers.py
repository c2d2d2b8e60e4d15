"""The server behind a connection pooler: PgBouncer in transaction mode, which gives each
transaction whichever of its server connections is free (platform teams put one in front of a
database many processes share; many managed databases have one built in)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, job_body, needs_driver, unique_id
from tests.pgbouncer import PgBouncer
from tests.postgres import PostgresServer
from zeus_bso.client import ServerClient
from zeus_bso.spec import TrainingResult


@pytest.fixture
def bouncer(postgres: PostgresServer) -> Iterator[PgBouncer]:
    needs_driver("postgresql")
    try:
        pooler = PgBouncer(postgres, pool_mode="transaction", pool_size=2)
    except FileNotFoundError as err:
        pytest.skip(str(err))
    yield pooler
    pooler.stop()


def test_a_server_behind_pgbouncer_in_transaction_mode_answers_every_request(
    bouncer: PgBouncer, postgres: PostgresServer, tmp_path: Path
) -> None:
    """Eight runs at once, fifteen recurrences each. psycopg prepares on the server a statement
    run five times on a connection; the pooler then ran it on another server connection, where
    it does not exist, or another of its name does: requests failed with 500 ("prepared
    statement "_pg3_0" does not exist"). Nothing is prepared now."""
    server = ServerProcess(bouncer.url(postgres.new_database()), cwd=tmp_path)
    failures: list[str] = []
    numbers: dict[str, list[int]] = {}

    def recurrences(job_id: str) -> None:
        with ServerClient(server.url, retry_seconds=0) as client:
            numbers[job_id] = []
            for _ in range(15):
                try:
                    trial = client.dispatch(job_id).trial
                    result = TrainingResult(
                        **trial.model_dump(), time=1.0, energy=10.0, metric=0.9, current_epoch=1
                    )
                    client.report(result)
                    numbers[job_id].append(trial.trial_number)
                except Exception as err:  # each failed request, whatever the client makes of it
                    failures.append(f"{type(err).__name__}: {err}")

    try:
        jobs = [unique_id("pooled") for _ in range(8)]
        with server.client() as http:
            for job_id in jobs:
                assert http.post("/jobs", json=job_body(job_id)).status_code == 201
        runs = [threading.Thread(target=recurrences, args=(job_id,)) for job_id in jobs]
        for run in runs:
            run.start()
        for run in runs:
            run.join(timeout=120)
        assert failures == []
        assert all(numbers[job_id] == list(range(1, 16)) for job_id in jobs), numbers
        assert "unexpected error" not in server.log()
    finally:
        server.stop()
