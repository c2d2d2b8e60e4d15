"""``zeus-bso-server db copy``: a SQLite server's whole history moves into an empty database
(PostgreSQL, MySQL, another SQLite file), and a server on the copy says and decides exactly
what the original does. Real server processes and real databases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_migrations import run_cli
from tests.helpers import ServerProcess, dispatch, job_body, run_one, sqlite_url, trial_id
from tests.postgres import PostgresServer

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "number_of_gpus": 1, "max_power": 700.0}
MEASURED = [
    {"power_limit": 200.0, "time_per_epoch": 12.0, "energy_per_epoch": 2100.0},
    {"power_limit": 300.0, "time_per_epoch": 10.0, "energy_per_epoch": 2800.0},
]
JOBS = ("learned-1", "pinned-1")


def populate(http: httpx.Client) -> None:
    """Two jobs with what a server keeps: reported, early-stopped, running and infeasible
    trials, two hardware profiles, a power profile, a pin."""
    body = job_body("learned-1", mab_seed=7, learning_curve_stop=False, prune_cost_ratio=None)
    assert http.post("/jobs", json=body).status_code == 201
    metrics = {32: 0.9, 64: 0.9, 128: 0.9, 256: 0.2}
    for _ in range(6):
        run_one(http, "learned-1", metrics, energy=1000.0)
    dispatch(http, "learned-1")  # a run that is still training
    body = job_body("pinned-1", batch_sizes=[32, 64], default_batch_size=64)
    assert http.post("/jobs", json=body).status_code == 201
    assert http.post("/jobs", json={**body, **H100}).status_code == 200  # a second profile
    too_big = dispatch(http, "pinned-1", **H100)  # 64: it does not fit there
    assert http.post("/api/trials/infeasible", json=trial_id(too_big)).is_success
    profiled = dispatch(http, "pinned-1", power_limits="true", **H100)
    answer = http.post(
        "/api/trials/power_profile", json={**trial_id(profiled), "measurements": MEASURED}
    )
    assert answer.is_success, answer.text
    assert http.put("/api/jobs/pinned-1/pin", json={"batch_size": 32}).is_success


def views(http: httpx.Client) -> dict[str, Any]:
    """Everything the read API says of the jobs."""
    return {
        "list": http.get("/api/jobs").json(),
        **{job: http.get(f"/api/jobs/{job}", params={"limit": 1000}).json() for job in JOBS},
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """A SQLite database a real server filled, and what that server's read API said of it."""
    root = tmp_path_factory.mktemp("source")
    url = sqlite_url(root / "zeus-bso.db")
    server = ServerProcess(url, cwd=root)
    try:
        with server.client() as http:
            populate(http)
            said = views(http)
    finally:
        server.stop()
    return url, said


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def empty_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "copy.db")
    database_server: PostgresServer = request.getfixturevalue(
        "postgres" if request.param == "postgresql" else "mariadb"
    )
    return database_server.new_database()


def test_a_copy_serves_and_decides_as_the_original(
    source: tuple[str, dict[str, Any]], empty_target: str, tmp_path: Path
) -> None:
    url, said = source
    copied = run_cli("db", "copy", "--db", url, "--to", empty_target, cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    trials = sum(said[job]["trial_count"] for job in JOBS)
    limits = sum(len(p["measurements"]) for job in JOBS for p in said[job]["power_profiles"])
    assert (trials, limits) == (9, 2)  # what populate made (six runs and three)
    counts = f"copied 2 jobs, {limits} power_profiles, {trials} trials"
    assert copied.stdout.strip().endswith(counts)
    # populate's running trial, and the profiling one that never reported
    assert "note: 2 trials still running in the copy (learned-1 (1), pinned-1 (1))" in (
        " ".join(copied.stderr.split())
    )
    if not empty_target.startswith("sqlite"):  # and back, from a database server's snapshot
        back = sqlite_url(tmp_path / "back.db")
        returned = run_cli("db", "copy", "--db", empty_target, "--to", back, cwd=tmp_path)
        assert returned.returncode == 0, returned.stderr
        assert returned.stdout.strip().endswith(counts)
        served = ServerProcess(back, cwd=tmp_path, extra_args=["--no-upgrade"])
        try:
            with served.client() as http:
                assert views(http) == said
        finally:
            served.stop()
    server = ServerProcess(empty_target, cwd=tmp_path, extra_args=["--no-upgrade"])
    try:
        with server.client() as http:
            assert views(http) == said
            # The next decisions: the bandit's draws depend on the seed and the trial's number.
            assert dispatch(http, "learned-1")["batch_size"] == next_size(url, tmp_path)
            assert dispatch(http, "pinned-1")["batch_size"] == 32
    finally:
        server.stop()


def next_size(url: str, tmp_path: Path) -> int:
    """The original's next batch size for ``learned-1``, asked of a copy of its file (the
    original stays as it was for the other targets)."""
    again = sqlite_url(tmp_path / "again.db")
    assert run_cli("db", "copy", "--db", url, "--to", again, cwd=tmp_path).returncode == 0
    server = ServerProcess(again, cwd=tmp_path)
    try:
        with server.client() as http:
            return int(dispatch(http, "learned-1")["batch_size"])
    finally:
        server.stop()


def test_a_copy_is_refused_where_it_would_lose_or_merge_something(
    source: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, _ = source
    target = sqlite_url(tmp_path / "target.db")
    assert run_cli("db", "copy", "--db", url, "--to", target, cwd=tmp_path).returncode == 0
    again = run_cli("db", "copy", "--db", url, "--to", target, cwd=tmp_path)
    assert (again.returncode, again.stderr.strip()) == (
        2,
        "error: the target database holds 2 jobs: copy into an empty database (a copy does "
        "not merge two servers' histories)",
    )
    itself = run_cli("db", "copy", "--db", url, "--to", url, cwd=tmp_path)
    assert itself.returncode == 2
    assert "--to names the source database" in itself.stderr
    missing = tmp_path / "missing.db"
    absent = run_cli(
        "db", "copy", "--db", sqlite_url(missing), "--to", sqlite_url(tmp_path / "new.db"),
        cwd=tmp_path,
    )  # fmt: skip
    assert absent.returncode == 2
    assert f"no database to copy: {missing} does not exist" in absent.stderr
    assert not missing.exists()
    assert not (tmp_path / "new.db").exists()
    nowhere = run_cli(
        "db", "copy", "--db", url, "--to", sqlite_url(tmp_path / "no" / "dir.db"), cwd=tmp_path
    )
    assert nowhere.returncode == 1
    assert "cannot use the target database" in nowhere.stderr
    assert "; nothing was copied" in nowhere.stderr
    unknown = run_cli("db", "copy", "--db", url, "--to", "oracle://x/y", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "--to: database driver 'oracle' is not supported" in unknown.stderr
    # A source at an older schema is not read: it is upgraded first, by the user.
    older = sqlite_url(tmp_path / "older.db")
    assert run_cli("db", "copy", "--db", url, "--to", older, cwd=tmp_path).returncode == 0
    assert run_cli("db", "downgrade", "0011", "--db", older, cwd=tmp_path).returncode == 0
    stale = run_cli(
        "db", "copy", "--db", older, "--to", sqlite_url(tmp_path / "n.db"), cwd=tmp_path
    )
    assert stale.returncode == 2
    assert "the source database's schema is at revision 0011" in stale.stderr
    assert "zeus-bso-server db upgrade --db SOURCE" in stale.stderr
