"""After an unexpected error (a server bug, injected into a real server process), the client's
next request on the same keep-alive connection is answered, not reset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import ServerProcess, job_body, sqlite_url, unique_id

BUG = '''
"""Test-only patch: reading a job whose id starts with "bug" raises, as a server bug would."""
import zeus_bso_server.api.routes_jobs as routes

_original = routes.job_view


async def _buggy(db, job_id, *args, **kwargs):
    if job_id.startswith("bug"):
        raise RuntimeError("an injected bug")
    return await _original(db, job_id, *args, **kwargs)


routes.job_view = _buggy
'''


@pytest.fixture(scope="module")
def buggy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("bug")
    patch = tmp / "patch"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(BUG)
    proc = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp, env={"PYTHONPATH": str(patch)})
    yield proc
    proc.stop()


def test_a_500_closes_its_connection_and_the_next_request_is_answered(
    buggy: ServerProcess, tmp_path: Path
) -> None:
    with httpx.Client(base_url=buggy.url, timeout=30) as http:
        job_id = unique_id("fine")
        assert http.post("/jobs", json=job_body(job_id)).status_code == 201
        for _ in range(3):
            failed = http.get(f"/api/jobs/{unique_id('bug')}")
            assert failed.status_code == 500
            assert failed.json() == {"message": "Internal server error"}
            assert failed.headers["connection"] == "close"
            # The same client, the next request: a new connection, answered.
            assert http.get(f"/api/jobs/{job_id}").status_code == 200
    assert "an injected bug" in buggy.log()  # the traceback is logged, not sent
