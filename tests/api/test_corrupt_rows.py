"""One job whose stored state cannot be read (a row corrupted outside the server: a bad
restore, a hand edit) harms only itself, on each backend: its own view and requests say what is
wrong and what to do; lists, the other jobs of its prefix (their views name their siblings), the
fleet summary and the dashboard go on without it, and say so; it can still be deleted."""

from __future__ import annotations

import httpx
from sqlalchemy import create_engine, update
from typer.testing import CliRunner

from tests.helpers import ServerProcess, dispatch, job_body, unique_id
from zeus_bso.cli.main import app
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store.tables import JobRow


def corrupt(server: ServerProcess, job_id: str) -> None:
    """Statistics that are JSON, but not statistics, in the job's row."""
    assert server.db_url is not None
    engine = create_engine(to_engine_url(server.db_url))
    try:
        with engine.begin() as conn:
            table = JobRow.__table__
            done = conn.execute(
                update(table).where(table.c.job_id == job_id).values(stats={"64": "garbage"})
            )
            assert done.rowcount == 1
    finally:
        engine.dispose()


def test_a_corrupt_job_row_harms_only_its_own_job(
    http: httpx.Client, server: ServerProcess
) -> None:
    prefix = unique_id("corrupt").replace("-", "")
    bad, good = f"{prefix}-bad", f"{prefix}-good"
    for job_id in (bad, good):
        assert http.post("/jobs", json=job_body(job_id, prefix=prefix)).status_code == 201
    corrupt(server, bad)

    own = http.get(f"/api/jobs/{bad}")
    assert own.status_code == 500
    assert f"job {bad}'s stored state cannot be read" in own.json()["message"]
    assert "delete the job" in own.json()["message"]
    refused = http.get("/jobs/batch_size", params={"job_id": bad})
    assert refused.status_code == 500
    assert "cannot be read" in refused.json()["message"]
    page = http.get(f"/dashboard/jobs/{bad}")
    assert page.status_code == 500
    assert "cannot be read" in page.text

    neighbour = http.get(f"/api/jobs/{good}")
    assert neighbour.status_code == 200, neighbour.text
    assert neighbour.json()["siblings"] == []  # the unreadable one left out
    assert dispatch(http, good)["batch_size"] == 64
    assert http.get(f"/dashboard/jobs/{good}").status_code == 200
    listed = http.get("/api/jobs", params={"prefix": prefix})
    assert listed.status_code == 200
    assert [j["job_id"] for j in listed.json()] == [good]
    assert listed.headers["Zeus-BSO-Unreadable-Jobs"] == bad
    assert http.get("/api/summary", params={"prefix": prefix}).status_code == 200
    board = http.get("/dashboard", params={"prefix": prefix})
    assert board.status_code == 200
    assert 'id="unreadable"' in board.text
    assert bad in board.text
    listing = CliRunner().invoke(app, ["jobs", "list", "--server", server.url, "--prefix", prefix])
    assert listing.exit_code == 0, listing.output
    assert good in listing.output
    assert f"left out: 1 job(s) whose stored state the server cannot read ({bad})" in (
        listing.output
    )

    assert http.delete("/jobs", params={"job_id": bad}).status_code == 200
    listed = http.get("/api/jobs", params={"prefix": prefix})
    assert "Zeus-BSO-Unreadable-Jobs" not in listed.headers
    assert [j["job_id"] for j in listed.json()] == [good]
