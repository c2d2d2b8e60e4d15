"""Schema migrations keep stored data, both ways, on every backend (through the CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import JSON, bindparam, text
from sqlalchemy.engine import Connection
from typer.testing import CliRunner

from tests import forkserver
from tests.helpers import (
    BACKENDS,
    SERVER_BIN,
    ServerProcess,
    database_url,
    environment_without_settings,
    job_body,
    run_recurrences,
    unique_id,
)
from zeus_bso.spec import CreatedJob
from zeus_bso_server.cli import app
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.dialects import SCHEMA_LOCK_NAME
from zeus_bso_server.store.migrate import head_revision, upgrade
from zeus_bso_server.store.schema import HEAD

# Batch size -> reports, mean cost, m2, converged runs, their cost sum, cheapest converged cost.
STATS_0001: dict[int, tuple[Any, ...]] = {
    32: (0, 0.0, 0.0, 0, 0.0, None),
    64: (2, 110.0, 200.0, 2, 220.0, 100.0),
    128: (1, 90.0, 0.0, 0, 0.0, None),
}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``zeus-bso-server`` with ``args``, run in this process (``tests/api/test_cli_and_schema``
    runs the command as its own process): the same code, commands and output, without starting
    a Python process that imports SQLAlchemy and Alembic for each of a round trip's steps.
    ``cwd`` is where the command runs."""
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ZEUS_BSO_")}
    with contextlib.chdir(cwd):
        result = CliRunner().invoke(app, list(args), env=unset, catch_exceptions=False)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _run_sql(url: str, work: Any) -> Any:
    async def run() -> Any:
        db = Database(to_engine_url(url))
        try:
            return await db.write(work)
        finally:
            db.dispose()

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
    conn.execute(
        text(
            "INSERT INTO trials (job_id, trial_number, batch_size, kind, status)"
            " VALUES (:j, 3, 64, 'exploration', 'reported')"
        ),
        {"j": job_id},
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
        assert by_size[64]["cost_std"] == pytest.approx(10.0)  # 100 and 120
        assert by_size[128]["reports"] == 1
        assert by_size[128]["cost_std"] is None  # one report has no spread (it said 0.0)
        assert by_size[128]["converged"] == 0
        assert by_size[32]["reports"] == 0
        assert state["best_batch_size"] == 64
        # 0005: a trial from before profiles is on the job's one profile.
        assert [t["profile"] for t in state["trials"]] == ["1xNVIDIA A100-SXM4-40GB@300W"]
        # 0006: it has no stored learning curve.
        assert [t["curve"] for t in state["trials"]] == [None]
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


def test_the_server_needs_the_newest_migration_s_revision() -> None:
    # The check at start reads HEAD without loading the scripts: a new migration moves both.
    assert head_revision() == HEAD


def test_downgrade_to_an_unknown_revision_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert run_cli("db", "upgrade", "--db", url, cwd=tmp_path).returncode == 0
    result = run_cli("db", "downgrade", "nope", "--db", url, cwd=tmp_path)
    assert result.returncode == 2
    assert "nope" in result.stderr
    assert "Traceback" not in result.stderr


def test_mysql_tables_become_utf8mb4_and_double_precision_keeping_their_rows(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    mariadb = request.getfixturevalue("mariadb")
    url = mariadb.new_database()  # latin1 and case-insensitive: the test server's defaults
    database = url.rsplit("/", 1)[1]

    async def upgrade_to_0002() -> None:
        db = Database(to_engine_url(url))
        try:
            await upgrade(db, "0002")
        finally:
            db.dispose()

    asyncio.run(upgrade_to_0002())
    old_id = unique_id("jöb") + "-case"
    when = 1_800_000_000.25

    def store(conn: Connection) -> Any:
        config = CreatedJob.model_validate(job_body(old_id)).model_dump(mode="json")
        conn.execute(
            text(
                "INSERT INTO jobs (job_id, job_id_prefix, config, stage, next_trial_number)"
                " VALUES (:j, 'jöb', :c, 'pruning', 2)"
            ).bindparams(bindparam("c", type_=JSON())),
            {"j": old_id, "c": config},
        )
        conn.execute(
            text(
                "INSERT INTO trials (job_id, trial_number, batch_size, kind, status,"
                " lease_expires_at) VALUES (:j, 1, 64, 'exploration', 'dispatched', :t)"
            ),
            {"j": old_id, "t": when},
        )
        return conn.execute(text("SELECT lease_expires_at FROM trials")).scalar_one()

    assert _run_sql(url, store) != when  # FLOAT: single precision

    result = run_cli("db", "upgrade", "--db", url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"0002 -> {head_revision()}" in result.stdout

    def columns(conn: Connection) -> Any:
        return conn.execute(
            text(
                "SELECT table_name, column_name, data_type, collation_name"
                " FROM information_schema.columns WHERE table_schema = :s"
            ),
            {"s": database},
        ).all()

    described = {(t.lower(), c.lower()): (d, coll) for t, c, d, coll in _run_sql(url, columns)}
    reals = [key for key, (kind, _) in described.items() if kind in ("float", "double")]
    assert len(reals) == 14  # 10 in jobs and trials, 4 in power_profiles (0012)
    assert all(described[key][0] == "double" for key in reals)
    for table in ("jobs", "trials", "power_profiles"):
        assert described[(table, "job_id")][1] == "utf8mb4_nopad_bin"
    assert described[("power_profiles", "profile")][1] == "utf8mb4_nopad_bin"

    proc = ServerProcess(url, cwd=tmp_path)
    try:
        with proc.client() as http:
            kept = http.get("/api/jobs/" + old_id)  # the latin1 row, converted
            assert kept.status_code == 200, kept.text
            assert kept.json()["job"]["job_id"] == old_id
            assert kept.json()["trials"][0]["trial_number"] == 1
            # 0005: the trials from before profiles are on the job's one profile.
            assert kept.json()["trials"][0]["profile"] == "1xNVIDIA A100-SXM4-40GB@300W"
            for new_id in (old_id[:-4] + "CASE", old_id + " ", old_id + "-😀"):
                created = http.post("/jobs", json=job_body(new_id, prefix="jöb"))
                assert created.status_code == 201, (new_id, created.text)
            # The foreign key came back: deleting the job takes its trials along.
            assert http.delete("/jobs", params={"job_id": old_id}).status_code == 200
    finally:
        proc.stop()
    count = _run_sql(url, lambda conn: conn.execute(text("SELECT count(*) FROM trials")).scalar())
    assert count == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_upgrades_of_a_fresh_database_all_succeed(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Replicas that each migrate as they start (an init container per pod, `serve` without
    --no-upgrade) race on a fresh database: one migrates, the others wait and find it done."""
    url = database_url(backend, tmp_path, request)
    env = environment_without_settings()
    command = [SERVER_BIN, "db", "upgrade", "--db", url]
    # Four processes at once, forked where a started one would run the same (tests.forkserver):
    # they reach the database within milliseconds of each other.
    with ThreadPoolExecutor(4) as pool:
        done = list(
            pool.map(
                lambda _: forkserver.run(command, env=env, cwd=tmp_path, timeout=120), range(4)
            )
        )
    assert [d.returncode for d in done] == [0] * 4, [d.stdout + d.stderr for d in done]
    current = run_cli("db", "current", "--db", url, cwd=tmp_path).stdout
    revision = current.split()[1]
    assert current.split()[-1] == revision, current


def test_the_next_to_take_mysqls_schema_lock_finds_the_migration_committed(
    request: pytest.FixtureRequest,
) -> None:
    """MySQL's schema lock belongs to the session: released before the migration's transaction
    committed, the next replica to take it read the revision before the last step (its version
    row not yet committed) and ran that step again: "Table 'power_profiles' already exists" (a
    concurrent start of four replicas failed so in CI). A session that waits on the lock
    while a fresh database is upgraded must, once it holds it, read the head revision."""
    url = request.getfixturevalue("mariadb").new_database()
    engine = Database(to_engine_url(url)).engine
    lock = {"name": SCHEMA_LOCK_NAME, "wait": 60}
    seen: list[Any] = []
    with engine.connect() as waiting:
        taken = threading.Event()

        def wait_then_read() -> None:
            taken.set()
            assert waiting.execute(text("SELECT GET_LOCK(:name, :wait)"), lock).scalar() == 1
            seen.append(waiting.execute(text("SELECT version_num FROM alembic_version")).all())
            waiting.execute(text("SELECT RELEASE_LOCK(:name)"), lock)

        async def migrate() -> None:
            db = Database(to_engine_url(url))
            try:
                await upgrade(db)
            finally:
                db.dispose()

        # The migration first: it takes the lock, then the waiting session asks for it.
        with engine.connect() as holder:
            assert holder.execute(text("SELECT GET_LOCK(:name, :wait)"), lock).scalar() == 1
            reader = threading.Thread(target=wait_then_read)
            migration = threading.Thread(target=lambda: asyncio.run(migrate()))
            migration.start()
            time.sleep(0.5)  # the migration waits on the lock first
            reader.start()
            taken.wait()
            time.sleep(0.5)  # and the reader behind it
            holder.execute(text("SELECT RELEASE_LOCK(:name)"), lock)
            migration.join(120)
            reader.join(120)
    engine.dispose()
    assert seen == [[(head_revision(),)]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_downgrading_below_curves_drops_them_and_leaves_a_job_the_older_server_reads(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = database_url(backend, tmp_path, request)
    job_id = unique_id("curved")
    proc = ServerProcess(url, cwd=tmp_path)
    try:
        with proc.client() as http:
            body = job_body(job_id, batch_sizes=[64], default_batch_size=64)
            body |= {"learning_curve_stop": True, "target_metric": 0.5}
            assert http.post("/jobs", json=body).status_code == 201
            trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
            for epoch, metric in ((1, 0.3), (2, 0.5)):
                report = trial | {"time": 1.0 * epoch, "energy": 10.0 * epoch, "metric": metric}
                http.post("/report", json=report | {"current_epoch": epoch})
    finally:
        proc.stop()

    def stats(conn: Connection) -> Any:
        found = conn.execute(text("SELECT stats FROM jobs WHERE job_id = :j"), {"j": job_id})
        value = found.scalar_one()
        return json.loads(value) if isinstance(value, str) else value

    assert _run_sql(url, stats)["64"]["curves"] == [[[1, 0.3], [2, 0.5]]]
    down = run_cli("db", "downgrade", "0005", "--db", url, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    kept = _run_sql(url, stats)["64"]
    assert "curves" not in kept  # what the server of 0005 reads: BatchSizeStats(**entry)
    assert kept["reports"] == 1
    assert kept["converged_count"] == 1


A40_PROFILE = {"gpu_model": "A40", "number_of_gpus": 2, "max_power": 600.0}


@contextlib.contextmanager
def _served(url: str, tmp_path: Path) -> Iterator[httpx.Client]:
    """A client of a server on ``url``, which is stopped afterwards."""
    proc = ServerProcess(url, cwd=tmp_path)
    try:
        with proc.client() as http:
            yield http
    finally:
        proc.stop()


def _fill_at_head(http: httpx.Client) -> dict[str, str]:
    """Jobs as a server at head leaves them: reported and converged runs with curves, an open
    trial with a run key, (``two``) a job that ran on two hardware profiles, and (``long``) one
    whose GPU model is so long that its profile's name is shortened."""
    ids = {name: unique_id(f"trip{name}") for name in ("curves", "plain", "two", "long")}
    for name, job_id in ids.items():
        body = job_body(job_id, batch_sizes=[32, 64, 128], default_batch_size=64)
        if name == "long":
            body["gpu_model"] = "NVIDIA " + "X" * 243  # 250 characters
        body |= {"target_metric": 0.5, "learning_curve_stop": name == "curves"}
        assert http.post("/jobs", json=body).status_code == 201
        for recurrence in range(3):
            if name == "two" and recurrence == 2:  # the last run on other GPUs
                again = http.post("/jobs", json=body | A40_PROFILE)
                assert again.status_code == 200, again.text
            trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
            for epoch, metric in ((1, 0.3), (2, 0.5 if recurrence != 1 else 0.4)):
                seconds = 10.0 * epoch * (1 + recurrence)
                report = trial | {"time": seconds, "energy": 30.0 * seconds}
                answer = http.post(
                    "/report", json=report | {"metric": metric, "current_epoch": epoch}
                )
                assert answer.status_code == 200, answer.text
            http.request("PATCH", "/trials", json=trial)
    params = {"job_id": ids["plain"], "run_key": "relaunch-7"}
    assert http.get("/jobs/batch_size", params=params).status_code == 200
    return ids


TRIAL_IDENTITY = ("trial_number", "batch_size", "kind", "status", "epochs", "converged", "profile")


def _views(http: httpx.Client, ids: dict[str, str]) -> dict[str, dict[str, Any]]:
    """What the read API shows of each job that counts for a decision (curves excepted)."""
    shown = {}
    for name, job_id in ids.items():
        view = http.get(f"/api/jobs/{job_id}")
        assert view.status_code == 200, view.text
        state = view.json()
        recommended = state["recommended"]
        shown[name] = {
            "recommended": recommended and recommended["batch_size"],
            "expected_cost": recommended and pytest.approx(recommended["expected_cost"]),
            "best": (state["best_batch_size"], pytest.approx(state["best_cost"])),
            "profiles": state["profiles"],
            "trial_count": state["trial_count"],
            "by_status": state["trials_by_status"],
            "sizes": [
                {k: v for k, v in size.items() if k != "curves"} for size in state["batch_sizes"]
            ],
            # Below 0003, MySQL keeps times and metrics in single precision.
            "trials": [
                {k: t[k] for k in TRIAL_IDENTITY} | {"cost": pytest.approx(t["cost"])}
                for t in state["trials"]
            ],
        }
    return shown


def _counts(url: str) -> tuple[int, int]:
    def count(conn: Connection) -> tuple[int, int]:
        jobs = conn.execute(text("SELECT count(*) FROM jobs")).scalar_one()
        trials = conn.execute(text("SELECT count(*) FROM trials")).scalar_one()
        return jobs, trials

    return _run_sql(url, count)  # type: ignore[no-any-return]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_round_trip_down_to_the_first_revision_and_back_loses_no_job_or_trial(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = database_url(backend, tmp_path, request)
    with _served(url, tmp_path) as http:
        ids = _fill_at_head(http)
        before = _views(http, ids)
    counts = _counts(url)
    assert counts[1] >= 10

    # A job on two hardware profiles cannot go below 0005: refused, before anything changes.
    refused = run_cli("db", "downgrade", "0001", "--db", url, cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "below revision 0005" in refused.stderr
    assert ids["two"] in refused.stderr
    assert "nothing was changed" in refused.stderr
    assert "Traceback" not in refused.stderr
    current = run_cli("db", "current", "--db", url, cwd=tmp_path)
    assert f"current: {head_revision()}" in current.stdout
    assert _counts(url) == counts
    with _served(url, tmp_path) as http:
        assert _views(http, ids) == before
        # Without it, every revision down to the first, one at a time, and back up.
        gone = http.delete("/jobs", params={"job_id": ids.pop("two")})
        assert gone.status_code == 200, gone.text
    del before["two"]
    counts = _counts(url)
    revision = head_revision()
    while revision != "0001":
        lower = f"{int(revision) - 1:04d}"
        down = run_cli("db", "downgrade", lower, "--db", url, cwd=tmp_path)
        assert down.returncode == 0, down.stderr
        if lower == "0002" and backend == "mysql":  # converts, and says so
            assert "note: below revision 0003: MySQL and MariaDB store single" in down.stderr
        elif lower == "0003":  # the open trial of run "relaunch-7" loses its key, and says so
            assert "note: below revision 0004: 1 open trial(s) lose their run key" in down.stderr
        else:
            assert "note:" not in down.stderr
        assert _counts(url) == counts, f"rows lost going down to {lower}"
        revision = lower
    up = run_cli("db", "upgrade", "--db", url, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert _counts(url) == counts
    with _served(url, tmp_path) as http:
        assert _views(http, ids) == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_upgrade_says_where_the_database_is_left_and_what_to_do(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Revision 0005 adds ``jobs.profiles``; a column of that name added by hand makes it fail.
    PostgreSQL and SQLite roll the whole upgrade back; MySQL and MariaDB cannot, and the
    message says so. Without the column, the same command finishes the upgrade."""
    url = database_url(backend, tmp_path, request)

    async def upgrade_to_0004() -> None:
        db = Database(to_engine_url(url))
        try:
            await upgrade(db, "0004")
        finally:
            db.dispose()

    asyncio.run(upgrade_to_0004())
    _run_sql(url, lambda conn: conn.execute(text("ALTER TABLE jobs ADD COLUMN profiles TEXT")))
    failed = run_cli("db", "upgrade", "--db", url, cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    assert "the schema upgrade from revision 0004 failed:" in failed.stderr
    assert "Traceback" not in failed.stderr
    if backend == "mysql":
        assert "perhaps partly applied: restore the backup" in failed.stderr
    else:
        assert "nothing was changed (the database is still at revision 0004" in failed.stderr
    current = run_cli("db", "current", "--db", url, cwd=tmp_path)
    assert "current: 0004" in current.stdout
    _run_sql(url, lambda conn: conn.execute(text("ALTER TABLE jobs DROP COLUMN profiles")))
    done = run_cli("db", "upgrade", "--db", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with _served(url, tmp_path) as http:
        assert http.post("/jobs", json=job_body(unique_id("afterfail"))).status_code == 201


@pytest.mark.parametrize("backend", BACKENDS)
def test_below_0011_the_stage_column_comes_back_from_the_arms(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """0011 drops ``jobs.stage`` (the arms say it); a downgrade computes it back."""
    url = database_url(backend, tmp_path, request)
    ids = {"bandit": unique_id("stagebandit"), "pruning": unique_id("stagepruning")}
    with _served(url, tmp_path) as http:
        for job_id in ids.values():
            assert http.post("/jobs", json=job_body(job_id, max_epochs=3)).status_code == 201
        run_recurrences(http, ids["bandit"], 12)
        assert http.get(f"/api/jobs/{ids['bandit']}").json()["stage"] == "bandit"
    down = run_cli("db", "downgrade", "0010", "--db", url, cwd=tmp_path)
    assert down.returncode == 0, down.stderr

    def stages(conn: Connection) -> dict[str, str]:
        rows = conn.execute(text("SELECT job_id, stage FROM jobs")).all()
        return {job_id: stage for job_id, stage in rows}

    stored = _run_sql(url, stages)
    assert {name: stored[job_id] for name, job_id in ids.items()} == {
        "bandit": "bandit",
        "pruning": "pruning",
    }
    up = run_cli("db", "upgrade", "--db", url, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
