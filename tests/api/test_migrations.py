"""Schema migrations keep stored data, both ways, on every backend (through the CLI)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import JSON, bindparam, text
from sqlalchemy.engine import Connection

from tests.api.test_cli_and_schema import run_cli
from tests.conftest import BACKENDS, ServerProcess, database_url, job_body, unique_id
from zeus_bso.spec import CreatedJob
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store.database import Database

# Batch size -> reports, mean cost, m2, converged runs, their cost sum, cheapest converged cost.
STATS_0001: dict[int, tuple[Any, ...]] = {
    32: (0, 0.0, 0.0, 0, 0.0, None),
    64: (2, 110.0, 200.0, 2, 220.0, 100.0),
    128: (1, 90.0, 0.0, 0, 0.0, None),
}


def _run_sql(url: str, work: Any) -> Any:
    async def run() -> Any:
        db = Database(to_engine_url(url))
        try:
            return await db.write(work)
        finally:
            await db.dispose()

    return asyncio.run(run())


def _store_0001_job(conn: Connection, job_id: str) -> None:
    body = job_body(job_id) | {"batch_sizes": sorted(STATS_0001)}
    config = CreatedJob.model_validate(body).model_dump(mode="json")
    conn.execute(
        text(
            "INSERT INTO jobs (job_id, job_id_prefix, config, stage, next_trial_number,"
            " best_batch_size, best_cost) VALUES (:j, :p, :c, 'pruning', 4, 64, 100)"
        ).bindparams(bindparam("c", type_=JSON())),
        {"j": job_id, "p": body["job_id_prefix"], "c": config},
    )
    for size, values in STATS_0001.items():
        names = ("j", "b", "r", "m", "m2", "c", "cs", "best")
        conn.execute(
            text("INSERT INTO batch_size_stats VALUES (:j, :b, :r, :m, :m2, :c, :cs, :best)"),
            dict(zip(names, (job_id, size, *values), strict=True)),
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_statistics_survive_the_move_onto_the_job_row_and_back(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = database_url(backend, tmp_path, request)
    job_id = unique_id("migrated")
    assert run_cli("db", "upgrade", "--db", url, cwd=tmp_path).returncode == 0
    down = run_cli("db", "downgrade", "0001", "--db", url, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert "-> 0001" in down.stdout
    _run_sql(url, lambda conn: _store_0001_job(conn, job_id))

    proc = ServerProcess(url, cwd=tmp_path)  # upgrades the schema as it starts
    try:
        answer = httpx.get(f"{proc.url}/api/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        state = answer.json()
        by_size = {b["batch_size"]: b for b in state["batch_sizes"]}
        assert sorted(by_size) == [32, 64, 128]
        assert by_size[64]["reports"] == 2
        assert by_size[64]["mean_cost"] == 110.0
        assert by_size[64]["converged"] == 2
        assert by_size[64]["best_converged_cost"] == 100.0
        assert by_size[128]["reports"] == 1
        assert by_size[128]["converged"] == 0
        assert by_size[32]["reports"] == 0
        assert state["best_batch_size"] == 64
        # The job goes on where it was.
        trial = httpx.get(f"{proc.url}/jobs/batch_size", params={"job_id": job_id}).json()
        assert trial["trial_number"] == 4
    finally:
        proc.stop()

    down = run_cli("db", "downgrade", "0001", "--db", url, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    rows = _run_sql(
        url,
        lambda conn: conn.execute(
            text(
                "SELECT batch_size, reports, mean_cost, best_converged_cost FROM"
                " batch_size_stats WHERE job_id = :j"
            ),
            {"j": job_id},
        ).all(),
    )
    assert sorted(tuple(r) for r in rows) == [
        (32, 0, 0.0, None),
        (64, 2, 110.0, 100.0),
        (128, 1, 90.0, None),
    ]


def test_downgrade_to_an_unknown_revision_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert run_cli("db", "upgrade", "--db", url, cwd=tmp_path).returncode == 0
    result = run_cli("db", "downgrade", "nope", "--db", url, cwd=tmp_path)
    assert result.returncode == 2
    assert "nope" in result.stderr
    assert "Traceback" not in result.stderr
