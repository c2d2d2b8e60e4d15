"""Property-based API testing with schemathesis against the server's own OpenAPI schema.

Two of schemathesis' checks are excluded on purpose, because the protocol requires what they
flag: ``positive_data_acceptance`` (upstream answers 400 for an unknown job, and the schema cannot
express that ``default_batch_size`` must be one of ``batch_sizes``), and
``negative_data_rejection`` (upstream clients rely on lax coercion: "5" and 5.0 are accepted as
5, and 0/1 as booleans). Every other check runs, ``not_a_server_error`` among them.

SQLite gets all four of schemathesis' phases. PostgreSQL and MariaDB get the two whose inputs are
what a database backend can get wrong: the schema's own examples, and the coverage phase's values
at and just past the bounds of each field of each operation (the largest numbers, the longest
strings). The random fuzzing and stateful phases exercise the server's logic, which is the same
on every backend. The bearer-token run is about authentication: its examples and fuzzing phases
send every operation with and without the token.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import BACKENDS, ServerProcess, serve_backend, sqlite_url

SCHEMATHESIS = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
OPERATIONS = sum(len(path) for path in json.loads(SCHEMA.read_text())["paths"].values())
"""Every operation of the server's schema (the committed copy, which a test holds to it)."""


def run_schemathesis(
    url: str, cwd: Path, examples: int, seed: int, *options: str
) -> subprocess.CompletedProcess[str]:
    """schemathesis over the server at ``url`` with every check but the two excluded above."""
    if not Path(SCHEMATHESIS).exists():
        pytest.skip("schemathesis is not installed (it is in the dev dependency group)")
    return subprocess.run(
        [SCHEMATHESIS, "--no-color", "run", url + "/openapi.json", *options]
        + ["--checks", "all"]
        + ["--exclude-checks", "positive_data_acceptance,negative_data_rejection"]
        + ["--max-examples", str(examples), "--seed", str(seed), "--generation-deterministic"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server of its own on each backend: schemathesis makes jobs of any ids it likes, which
    the tests sharing `tests.conftest.server` should never meet."""
    yield from serve_backend(request, tmp_path_factory)


ALL_PHASES = "examples,coverage,fuzzing,stateful"
BACKEND_PHASES = "examples,coverage"
"""The phases on PostgreSQL and MariaDB (all of them on SQLite)."""


def test_schemathesis_finds_no_failure(server: ServerProcess, tmp_path: Path) -> None:
    phases = ALL_PHASES if (server.db_url or "").startswith("sqlite") else BACKEND_PHASES
    result = run_schemathesis(server.url, tmp_path, 40, 20261122, "--phases", phases)
    assert result.returncode == 0, result.stdout[-6000:]
    assert "[500]" not in result.stdout
    assert f"Tested: {OPERATIONS}" in result.stdout, result.stdout[-3000:]  # every operation


TOKEN = "schemathesis-secret-token"


def test_schemathesis_with_a_token_finds_no_failure(tmp_path: Path) -> None:
    """The whole API behind a bearer token: every request carries it, and schemathesis'
    ``ignored_auth`` check also sends requests without it, which must be refused."""
    if not Path(SCHEMATHESIS).exists():
        pytest.skip("schemathesis is not installed (it is in the dev dependency group)")
    server = ServerProcess(
        sqlite_url(tmp_path / "bso.db"), cwd=tmp_path, env={"ZEUS_BSO_TOKEN": TOKEN}
    )
    try:
        header = f"Authorization: Bearer {TOKEN}"
        # Ten examples an operation: each is sent with the token and without it; the search
        # for the server's failures is the SQLite run's (25 here took 7 s more of a worker).
        result = run_schemathesis(
            server.url, tmp_path, 10, 20261123, "--header", header, "--phases", "examples,fuzzing"
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stdout[-6000:]
    assert "[500]" not in result.stdout
    # Requests got past the token: no operation was answered 401 over and over.
    assert "401" not in result.stdout.split("SUMMARY")[0].split("WARNINGS")[-1], result.stdout
    assert f"Tested: {OPERATIONS}" in result.stdout, result.stdout[-3000:]
