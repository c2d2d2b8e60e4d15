"""Faults with real processes: a client killed mid-trial, the server killed mid-request, a locked
database."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Connection, create_engine, text

from tests.api.test_concurrency import violations
from tests.helpers import (
    BACKENDS,
    SERVERS,
    ServerProcess,
    age_leases,
    database_url,
    job_body,
    needs_driver,
    serving_a_job,
    sqlite_url,
    unique_id,
)
from tests.mariadb import MariaDBServer
from tests.ports import dropping_port
from tests.postgres import PostgresServer
from tests.proxy import ReverseProxy
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.client import ServerClient, outbox
from zeus_bso.energy import EstimateMeter
from zeus_bso.errors import ServerRejectedError
from zeus_bso.spec import UPSTREAM_OPTIONS, JobSpecFromClient, TrialId
from zeus_bso_server.settings import to_engine_url

REPO = Path(__file__).resolve().parents[2]

CLIENT_SCRIPT = """
import sys, time
from zeus_bso.client import ServerClient
from zeus_bso.spec import TrainingResult
client = ServerClient(sys.argv[1])
trial = client.dispatch(sys.argv[2]).trial
client.report(TrainingResult(**trial.model_dump(), time=0.2, energy=50.0, metric=0.1,
                             current_epoch=1))
print(trial.model_dump_json(), flush=True)
time.sleep(600)  # training... until killed
"""


def test_killed_client_is_abandoned_and_exploration_moves_on(tmp_path: Path) -> None:
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path)
    try:
        job_id = unique_id()
        with server.client() as http:
            body = job_body(job_id, **UPSTREAM_OPTIONS)
            assert http.post("/jobs", json=body).status_code == 201
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT_SCRIPT, server.url, job_id],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdout is not None
        trial = httpx.Response(200, content=client.stdout.readline()).json()
        client.send_signal(signal.SIGKILL)
        client.wait()
        with server.client() as http:
            # While the lease runs, exploration waits: the next run is a concurrent one.
            waiting = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
            # Time passes with no word from the killed client: its lease (renewed by its report
            # for max(lease, 3 epoch times)) runs out.
            age_leases(sqlite_url(tmp_path / "bso.db"), job_id, 10 * 24 * 3600.0)
            retry = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
            state = http.get(f"/api/jobs/{job_id}").json()
            by_number = {t["trial_number"]: t for t in state["trials"]}
            assert by_number[trial["trial_number"]]["status"] == "abandoned"
            assert by_number[waiting["trial_number"]]["kind"] == "concurrent"
            assert by_number[retry["trial_number"]]["kind"] == "exploration"
            assert retry["batch_size"] == trial["batch_size"]
            # The killed client's node comes back and sends its final report: it is stored.
            late = {**trial, "time": 10.0, "energy": 100.0, "metric": 0.9, "current_epoch": 2}
            assert http.post("/report", json=late).json()["converged"] is True
            state = http.get(f"/api/jobs/{job_id}").json()
            by_number = {t["trial_number"]: t for t in state["trials"]}
            assert by_number[trial["trial_number"]]["status"] == "reported"
    finally:
        server.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_server_killed_mid_request_loses_nothing_committed(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = database_url(backend, tmp_path, request)
    server = ServerProcess(url, cwd=tmp_path, workers=2)
    job_ids = [unique_id("kill") for _ in range(4)]
    with server.client() as http:
        for job_id in job_ids:
            assert http.post("/jobs", json=job_body(job_id, max_epochs=4)).status_code == 201
    stop = threading.Event()
    seen: list[dict[str, object]] = []

    def load(index: int) -> None:
        with server.client() as http:
            while not stop.is_set():
                try:
                    trial = http.get(
                        "/jobs/batch_size", params={"job_id": job_ids[index % 4]}
                    ).json()
                    for epoch in range(1, 5):
                        result = {
                            **trial,
                            "time": 1.0 * epoch,
                            "energy": 10.0 * epoch,
                            "metric": 0.2 * epoch,
                            "current_epoch": epoch,
                        }
                        answer = http.post("/report", json=result).json()
                        if answer["stop_train"]:
                            seen.append(trial)
                            break
                except (httpx.TransportError, ValueError, KeyError):
                    return

    threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    # Killed once some runs have finished, while the others are mid-request: waiting for those
    # runs rather than a fixed time keeps the test meaningful on a busy machine.
    deadline = time.monotonic() + 60
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    server.kill()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    server.stop()

    restarted = ServerProcess(url, cwd=tmp_path)
    try:
        assert seen, "no run finished before the kill"
        assert violations(restarted, job_ids) == []
        with restarted.client() as http:
            for trial in seen:  # every answered final report is there
                state = http.get(f"/api/jobs/{trial['job_id']}", params={"limit": 1000}).json()
                stored = {t["trial_number"]: t for t in state["trials"]}
                assert stored[trial["trial_number"]]["status"] == "reported"
            assert http.get("/jobs/batch_size", params={"job_id": job_ids[0]}).status_code == 200
    finally:
        restarted.stop()


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_database_outage_answers_503_and_the_server_recovers(backend: str, tmp_path: Path) -> None:
    """A database server of its own, stopped and started again under a running server."""
    needs_driver(backend)
    try:
        db_server = PostgresServer() if backend == "postgresql" else MariaDBServer()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    with serving_a_job(db_server, tmp_path) as (server, job_id, _), server.client() as http:
        db_server.pause()
        down = http.get("/jobs/batch_size", params={"job_id": job_id})
        assert down.status_code == 503
        assert "nothing was written" in down.json()["message"]
        assert http.get("/readyz").status_code == 503
        assert http.get("/healthz").status_code == 200
        db_server.resume()
        with ServerClient(server.url, retry_seconds=20) as client:
            assert client.dispatch(job_id).trial_number == 1
        assert http.get("/readyz").status_code == 200


@pytest.fixture
def lockable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ServerProcess, Path]]:
    """A server on a SQLite file of this test's (which `locked` holds), that waits 200 ms for
    its lock; the client's files (the outbox) in this test's folder."""
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    db = tmp_path / "bso.db"
    server = ServerProcess(
        sqlite_url(db), cwd=tmp_path, env={"ZEUS_BSO_SQLITE_BUSY_TIMEOUT_MS": "200"}
    )
    yield server, db
    server.stop()


def test_locked_database_answers_503_and_the_client_retries(
    lockable: tuple[ServerProcess, Path],
) -> None:
    server, db = lockable
    job_id = unique_id()
    with server.client() as http:
        assert http.post("/jobs", json=job_body(job_id)).status_code == 201
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with server.client() as http:
            busy = http.get("/jobs/batch_size", params={"job_id": job_id})
        assert busy.status_code == 503
        assert busy.headers["retry-after"] == "1"
        assert "nothing was written" in busy.json()["message"]
        with ServerClient(server.url, retry_seconds=0.5) as impatient:
            with pytest.raises(ServerRejectedError) as info:
                impatient.dispatch(job_id)
            assert info.value.status == 503
        timer = threading.Timer(1.0, holder.execute, args=("COMMIT",))
        timer.start()
        with ServerClient(server.url, retry_seconds=20) as patient:
            trial = patient.dispatch(job_id)
        timer.join()
    finally:
        holder.close()
    assert trial.trial_number == 1  # the refused attempts left nothing behind
    with server.client() as http:
        assert http.get(f"/api/jobs/{job_id}").json()["trial_count"] == 1


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_job_row_a_stalled_process_holds_answers_503_after_the_lock_timeout(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Another server process that stalled inside a request (paused, or cut off from the
    database) holds its job's row lock: a request on that job waits `ZEUS_BSO_LOCK_TIMEOUT_MS`
    (here 1 s), then answers 503 with nothing written, which the client retries. It waited as
    long as the lock was held (PostgreSQL's default; MySQL's 50 s), past the client's timeout.
    Once the lock is released the job answers, its trial numbers unbroken."""
    needs_driver(backend)
    url = database_url(backend, tmp_path, request)
    server = ServerProcess(url, cwd=tmp_path, env={"ZEUS_BSO_LOCK_TIMEOUT_MS": "1000"})
    engine = create_engine(to_engine_url(url))
    try:
        job_id = unique_id("stalled")
        with server.client() as http:
            assert http.post("/jobs", json=job_body(job_id)).status_code == 201
        with engine.connect() as stalled:
            held = text("SELECT job_id FROM jobs WHERE job_id = :job_id FOR UPDATE")
            assert stalled.execute(held, {"job_id": job_id}).scalar_one() == job_id
            started = time.monotonic()
            with httpx.Client(base_url=server.url, timeout=20.0) as http:
                busy = http.get("/jobs/batch_size", params={"job_id": job_id})
            waited = time.monotonic() - started
            stalled.rollback()
        assert busy.status_code == 503, busy.text
        assert "nothing was written" in busy.json()["message"]
        assert waited < 10.0
        with ServerClient(server.url, retry_seconds=5) as client:
            assert client.dispatch(job_id).trial_number == 1
    finally:
        engine.dispose()
        server.stop()


def test_a_postgresql_host_that_drops_connections_answers_503_at_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A database host that is down, or a network that drops its packets, answers a new
    connection with nothing: the server gives up on it at `CONNECT_TIMEOUT_S` (1 s here) and
    answers 503, where libpq waited as long as the operating system does (two minutes on Linux)
    while the request waited. Its stand-in: a listening socket whose backlog is full."""
    from zeus_bso_server.errors import DatabaseUnavailableError
    from zeus_bso_server.store import dialects
    from zeus_bso_server.store.database import Database

    needs_driver("postgresql")
    monkeypatch.setattr(dialects, "CONNECT_TIMEOUT_S", 1)
    with dropping_port() as port:
        db = Database(to_engine_url(f"postgresql://zeus:secret@127.0.0.1:{port}/bso"))
        started = time.monotonic()
        try:
            with pytest.raises(DatabaseUnavailableError, match="nothing was written"):
                db.run(lambda conn: conn.execute(text("SELECT 1")), write=True)
        finally:
            waited = time.monotonic() - started
            db.dispose()
    assert waited < 10.0


@pytest.mark.skipif(os.geteuid() != 0, reason="drops packets in a network namespace: needs root")
@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("unshare", "iptables", "ip")),
    reason="drops packets in a network namespace: needs unshare, iptables and ip",
)
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_database_host_that_dies_under_pooled_connections_answers_503_in_seconds(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A database host that dies (a failover, a node lost) acknowledges nothing on the
    server's open connections: the driver waited for the operating system's retransmissions,
    about fifteen minutes, while the request (the ping of its idle connection, first) waited,
    and the client gave up at its timeout; the request then went through when the host came
    back, a trial the client never heard of. Now the connection is given up at
    `TCP_USER_TIMEOUT_MS` and the request answers 503, nothing written. Real packets dropped by
    iptables, in a network namespace of the test's own (`tests.api.dead_database_host`)."""
    needs_driver(backend)
    url = database_url(backend, tmp_path, request)
    db_server: PostgresServer | MariaDBServer = request.getfixturevalue(SERVERS[backend])
    database_socket = (
        db_server.root / f".s.PGSQL.{db_server.port}"
        if isinstance(db_server, PostgresServer)
        else db_server.root / "sock"
    )
    command = [sys.executable, "-m", "tests.api.dead_database_host"]
    done = subprocess.run(
        ["unshare", "--net", *command, url, str(database_socket), str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    logs = "".join(log.read_text() for log in tmp_path.glob("server-*.log"))
    assert done.returncode == 0, done.stderr + logs
    answer = json.loads(done.stdout)
    assert answer["status"] == 503, answer
    assert "nothing was written" in answer["message"]
    assert answer["waited"] < 25.0  # the ping's 10 s and, at most, the connect timeout's 10
    assert answer["after"] == 1, answer  # the request that failed left no trial behind


def refused_and_not_ready(http: httpx.Client, job_id: str) -> None:
    """A write on ``job_id`` answers 503, nothing written, and `/readyz` says why."""
    refused = http.get("/jobs/batch_size", params={"job_id": job_id})
    assert refused.status_code == 503, refused.text
    assert "nothing was written" in refused.json()["message"]
    ready = http.get("/readyz")
    assert ready.status_code == 503
    assert "takes no writes" in ready.json()["message"]


def test_a_postgresql_that_takes_no_writes_answers_503_and_is_left_once_it_does(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The server's connections land on a database that takes no writes (a standby after a
    failover, or a database set read-only): a write answered 500 with a traceback in the log,
    `/readyz` said ready, and the connections kept failing so after the database took writes
    again. Now a write answers 503, nothing written, `/readyz` says why, and the refused
    write drops the pool's connections: the next ones, opened once the database takes writes,
    serve."""
    needs_driver("postgresql")
    postgres: PostgresServer = request.getfixturevalue("postgres")
    url = database_url("postgresql", tmp_path, request)
    database = url.rsplit("/", 1)[1]

    def read_only(on: bool) -> None:
        setting = "SET default_transaction_read_only = on" if on else "RESET ALL"
        postgres.sql(f"ALTER DATABASE {database} {setting}")
        if on:  # the server's connections opened now take the setting
            postgres.end_sessions(database)

    server = ServerProcess(url, cwd=tmp_path)
    try:
        job_id = unique_id("readonly")
        with server.client() as http:
            assert http.post("/jobs", json=job_body(job_id)).status_code == 201
            read_only(True)
            time.sleep(1.5)  # idle past the ping's threshold: the ping replaces what was ended
            refused_and_not_ready(http, job_id)
            read_only(False)
            assert http.get("/readyz").status_code == 200  # before any write drops them
            with ServerClient(server.url, retry_seconds=10) as client:
                assert client.dispatch(job_id).trial_number == 1
        assert "Traceback" not in server.log()
    finally:
        server.stop()


def test_a_mysql_that_takes_no_writes_answers_503_and_is_left_once_it_does(
    tmp_path: Path,
) -> None:
    """A MySQL primary demoted by a failover stays up, read-only, and the server kept its
    connections to it: each write answered 503, and so on for good, the idle ping finding them
    alive, and `/readyz` said ready. A write refused as read-only now drops the pool's
    connections, and the next ones, opened where writes are taken (here: once the database takes
    them again), serve; `/readyz` says why it is not ready meanwhile. A MariaDB of the test's
    own: read-only is a setting of the whole server."""
    needs_driver("mysql")
    try:
        db_server = MariaDBServer()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    with (
        serving_a_job(db_server, tmp_path, "readonly") as (server, job_id, database),
        server.client() as http,
    ):
        db_server.sql("SET GLOBAL tx_read_only = 1")  # sessions opened from now on
        db_server.end_sessions(database)
        time.sleep(1.5)  # idle past the ping's threshold: the ping replaces what was killed
        refused_and_not_ready(http, job_id)
        db_server.sql("SET GLOBAL tx_read_only = 0")
        assert http.get("/readyz").status_code == 200  # before any write drops them
        with ServerClient(server.url, retry_seconds=10) as client:
            assert client.dispatch(job_id).trial_number == 1


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_session_idle_in_a_transaction_is_ended_by_the_database(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The server's PostgreSQL sessions carry the lock timeout and an idle-in-transaction
    timeout (a stalled process's transaction is ended, and its locks released, in a minute
    rather than when TCP gives up on it); a migration's transaction lifts both (it waits its
    turn, however long)."""
    from zeus_bso_server.store.database import Database
    from zeus_bso_server.store.dialects import DIALECTS, IDLE_IN_TRANSACTION_MS

    needs_driver(backend)
    db = Database(to_engine_url(database_url(backend, tmp_path, request)), lock_timeout_ms=1500)
    shown = text(
        "SELECT setting FROM pg_settings WHERE name IN "
        "('lock_timeout', 'idle_in_transaction_session_timeout') ORDER BY name"
    )  # in milliseconds: idle_in_transaction_session_timeout, then lock_timeout

    def settings(conn: Connection, *, lifted: bool = False) -> list[int]:
        if lifted:
            DIALECTS[backend].without_time_limits(conn)
        return [int(value) for value in conn.execute(shown).scalars()]

    try:
        assert db.run(settings, write=False) == [IDLE_IN_TRANSACTION_MS, 1500]
        assert db.run(lambda conn: settings(conn, lifted=True), write=False) == [0, 0]
        # Only for that transaction: the next has the session's limits again.
        assert db.run(settings, write=False) == [IDLE_IN_TRANSACTION_MS, 1500]
    finally:
        db.dispose()


@contextlib.contextmanager
def locked(db: Path) -> Iterator[None]:
    """Another process holds the SQLite file's write lock meanwhile: a database outage."""
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("COMMIT")
        holder.close()


def training_run(url: str, prefix: str, **options: Any) -> tuple[JobSpec, BatchSizeOptimizer]:
    """A run of a new job on the server at ``url`` that trains (retrying 503s for half a
    second; ``options``: the optimizer's)."""
    spec = JobSpec(
        job_id=unique_id(prefix),
        job_id_prefix=prefix,
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=0.8,
        max_epochs=5,
    )
    bso = next_run(url, spec, retry_seconds=0.5, **options)
    bso.get_batch_size()
    bso.on_train_begin()
    return spec, bso


def next_run(url: str, spec: JobSpec, **options: Any) -> BatchSizeOptimizer:
    """A run of ``spec``'s job on the server at ``url`` (``options``: the optimizer's), before
    it asks for its batch size."""
    return BatchSizeOptimizer(url, spec, energy_meter=EstimateMeter(100), show=None, **options)


def ends_converged(bso: BatchSizeOptimizer, server: ServerProcess, epochs: int) -> None:
    """``bso``'s run ends converged, and the server holds its job's one trial as reported,
    converged after ``epochs`` epochs."""
    bso.end()
    assert bso.outcome is not None
    assert bso.outcome.converged
    with server.client() as http:
        (trial,) = http.get(f"/api/jobs/{bso.job_id}").json()["trials"]
    assert (trial["status"], trial["converged"], trial["epochs"]) == ("reported", True, epochs)


def test_a_database_outage_mid_run_does_not_stop_training(
    lockable: tuple[ServerProcess, Path],
) -> None:
    """The database stays locked past the client's retries: each report is kept and training
    goes on, judged here by the job's target (0.8): a report below it goes on, one at it stops
    the run, as the server would have said (it trained on to max_epochs). The last report is
    delivered at the end, when the database is back."""
    server, db = lockable
    _, bso = training_run(server.url, "outage")
    with locked(db):
        assert bso.on_evaluate(0.5).stop_train is False  # 503 past the retries: goes on
        answer = bso.on_evaluate(0.9)  # at the target, judged here
        assert (answer.stop_train, answer.converged) == (True, True)
    ends_converged(bso, server, epochs=2)


def test_a_proxys_bad_gateway_mid_run_does_not_stop_training(
    sqlite_server: ServerProcess,
) -> None:
    """Every 5xx is kept like a 503: a report answered 502 by a reverse proxy (the server behind
    it restarting) does not raise into the training loop and is delivered at the end."""
    proxy = ReverseProxy(sqlite_server.url)
    try:
        _, bso = training_run(proxy.url, "gateway")
        proxy.down.set()
        assert bso.on_evaluate(0.5).stop_train is False  # 502: kept, training goes on
        assert bso.on_evaluate(0.9).stop_train is True  # its target, judged here
        proxy.down.clear()
        ends_converged(bso, sqlite_server, epochs=2)
    finally:
        proxy.close()


def test_a_runs_waits_on_the_server_are_not_its_time_or_energy(
    sqlite_server: ServerProcess,
) -> None:
    """A server slow to answer (each report held a second behind a proxy: a busy database, a
    congested network) is no part of the batch size's cost: the run's time and energy leave out
    its waits on the server. They had counted them: three epochs of 0.2 s reported as 2.6 s,
    and a run whose reports waited on a hung server for the client's 30 s timeout each was
    charged 2 minutes for 6 s of training."""
    proxy = ReverseProxy(sqlite_server.url)
    try:
        _, bso = training_run(proxy.url, "waits")
        proxy.delay = 1.0
        for metric in (0.3, 0.5, 0.9):
            time.sleep(0.2)
            answer = bso.on_evaluate(metric)
        assert answer.stop_train
        proxy.delay = 0.0
        bso.end()
        with sqlite_server.client() as http:
            (trial,) = http.get(f"/api/jobs/{bso.job_id}").json()["trials"]
        assert 0.6 <= trial["time"] < 1.6  # three epochs of 0.2 s, and none of the 3 s of waits
        assert trial["energy"] == pytest.approx(100.0 * trial["time"], rel=0.05)  # 100 W
    finally:
        proxy.close()


def test_a_report_after_one_the_server_did_not_take_waits_on_it_briefly(
    sqlite_server: ServerProcess,
) -> None:
    """After a report the server did not take (a proxy's 502), the next waits on the server
    at most `AWAY_PATIENCE`, not the client's 30 s timeout: a server that hangs held every
    validation of the run that long. The run is judged here meanwhile, and its last report
    is delivered at the end."""
    from zeus_bso.client.server_away import AWAY_PATIENCE

    proxy = ReverseProxy(sqlite_server.url)
    try:
        _, bso = training_run(proxy.url, "patience")
        proxy.down.set()
        assert bso.on_evaluate(0.5).stop_train is False  # 502: kept
        proxy.down.clear()
        proxy.delay = 60.0  # now it hangs
        started = time.monotonic()
        assert bso.on_evaluate(0.6).stop_train is False  # timed out: kept, training goes on
        assert time.monotonic() - started < AWAY_PATIENCE + 10.0  # not the 30 s timeout
        proxy.delay = 0.0
        answer = bso.on_evaluate(0.9)  # the server is back: it answers
        assert (answer.stop_train, answer.converged) == (True, True)
        ends_converged(bso, sqlite_server, epochs=3)
    finally:
        proxy.close()


def test_a_run_that_ends_on_a_hung_server_waits_on_it_briefly(
    sqlite_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the server did not take a run's report, what the run says as it ends (its last
    report, the end of its trial, the question of what the next run gets) waits on the server
    at most `AWAY_PATIENCE` each, as its reports did, not the client's 30 s timeout and its
    retries: a script on a server that hangs ends in seconds (it took over a minute), and what
    it could not say is kept for the next run, which delivers it."""
    from zeus_bso.client import conversation

    monkeypatch.setattr(conversation, "AWAY_PATIENCE", 1.0)
    proxy = ReverseProxy(sqlite_server.url, down_on="/")
    try:
        spec, bso = training_run(proxy.url, "endhung")
        proxy.down.set()
        assert bso.on_evaluate(0.5).stop_train is False  # a 502: kept, training goes on
        proxy.down.clear()
        proxy.delay = 60.0  # now it hangs
        started = time.monotonic()
        bso.end()
        assert time.monotonic() - started < 10.0  # over 60 s waiting the client's timeouts
        proxy.delay = 0.0
        again = next_run(proxy.url, spec, retry_seconds=0.5)
        again.get_batch_size()  # delivers the first run's last report and end first
        with sqlite_server.client() as http:
            trials = http.get(f"/api/jobs/{spec.job_id}").json()["trials"]
        first = next(t for t in trials if t["trial_number"] == 1)
        assert first["status"] != "dispatched"
        assert first["epochs"] == 1
        again.end()
    finally:
        proxy.close()


def test_a_run_interrupted_on_a_hung_server_releases_its_trial_in_seconds(
    sqlite_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run interrupted from outside (a preemption's SIGTERM, whose grace period is often 30 s)
    releases its trial waiting on the server at most `AWAY_PATIENCE`, and leaves the rest of the
    grace period to the script's own ending (its checkpoint): a server that hangs held it for
    the client's 30 s timeout. The release is kept, and the next run delivers it."""
    from zeus_bso.client import conversation

    monkeypatch.setattr(conversation, "AWAY_PATIENCE", 1.0)
    proxy = ReverseProxy(sqlite_server.url, down_on="/")
    try:
        spec, bso = training_run(proxy.url, "sigtermhung")
        proxy.delay = 60.0  # the server hangs
        started = time.monotonic()
        bso.end_interrupted("SIGTERM")
        assert time.monotonic() - started < 10.0  # over 30 s waiting the client's timeout
        proxy.delay = 0.0
        again = next_run(proxy.url, spec, retry_seconds=0.5)
        assert again.get_batch_size() == 32  # the release delivered first: 32 is tried again
        with sqlite_server.client() as http:
            trials = http.get(f"/api/jobs/{spec.job_id}").json()["trials"]
        ended = sorted((t["trial_number"], t["status"]) for t in trials)
        assert ended == [(1, "released"), (2, "dispatched")]
        again.end_interrupted("done")
    finally:
        proxy.close()


class OutOfMemoryError(RuntimeError):
    """An accelerator's out of memory, as the client knows one (by its class's name: torch's)."""


def test_an_out_of_memory_mark_waits_on_a_hung_server_briefly(
    sqlite_server: ServerProcess,
) -> None:
    """A run that ran out of memory marks its trial infeasible as it ends, while the run's
    other processes, which ran out too, wait for it to start the next attempt together (30 s,
    `zeus_bso.client.every_rank`): on a server that hangs, the mark waits at most
    `AWAY_PATIENCE` (it waited the client's 30 s timeout, and the others gave up on it), is
    kept, and the next run delivers it before it asks for its batch size, which then fits."""
    from zeus_bso.client.server_away import AWAY_PATIENCE

    proxy = ReverseProxy(sqlite_server.url, down_on="/api/trials/infeasible")
    try:
        spec, bso = training_run(proxy.url, "oomhung")
        assert bso.batch_size == 32
        proxy.delay = 60.0  # the server hangs on the mark
        started = time.monotonic()
        bso.failed(OutOfMemoryError("CUDA out of memory. Tried to allocate 2 MiB"))
        assert time.monotonic() - started < AWAY_PATIENCE + 10.0  # not the 30 s timeout
        assert bso.outcome is not None
        assert bso.outcome.reason == "out_of_memory"
        proxy.delay = 0.0
        again = next_run(proxy.url, spec, retry_seconds=0.5)
        assert again.get_batch_size() == 16  # the mark delivered first: 32 does not fit
        again.on_train_begin()
        assert again.on_evaluate(0.9).stop_train
        again.end()
        with sqlite_server.client() as http:
            trials = http.get(f"/api/jobs/{spec.job_id}").json()["trials"]
        ended = sorted((t["trial_number"], t["batch_size"], t["status"]) for t in trials)
        assert ended == [(1, 32, "infeasible"), (2, 16, "reported")]
    finally:
        proxy.close()


def test_a_proxys_not_found_page_mid_run_does_not_stop_training(
    sqlite_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A report answered by a reverse proxy's own 404 page (its routes changed under a run that
    reached the server through it) is kept like an outage's: it does not raise into the
    training loop, the run is judged here meanwhile, and its last report is delivered at the
    end, once the route is back. (The report route is upstream's protocol: every server a run
    started on has it.)"""
    proxy = ReverseProxy(sqlite_server.url, down_on="/report", status=404)
    try:
        _, bso = training_run(proxy.url, "proxy404")
        proxy.down.set()
        assert bso.on_evaluate(0.5).stop_train is False  # the proxy's 404: kept, goes on
        assert "report of epoch 1 not delivered" in caplog.text
        assert "answered 404: an HTML page, not a zeus-bso server" in caplog.text
        assert bso.on_evaluate(0.9).stop_train is True  # its target, judged here
        proxy.down.clear()
        ends_converged(bso, sqlite_server, epochs=2)
    finally:
        proxy.close()


@pytest.mark.parametrize("from_the_start", [False, True])
def test_heartbeats_go_on_past_a_proxys_not_found_page(
    sqlite_server: ServerProcess, caplog: pytest.LogCaptureFixture, from_the_start: bool
) -> None:
    """A heartbeat answered by a reverse proxy's own 404 page, after heartbeats went through or
    from the first (the server declared the heartbeat route at dispatch), is a failed
    heartbeat (warned of once), not a server without the route: the heartbeats go on once the
    proxy's routes are back. (The heartbeat thread stopped for the rest of the run, saying the
    server had no heartbeat route, as it does for upstream's server.)"""
    proxy = ReverseProxy(sqlite_server.url, down_on="/api/trials/heartbeat", status=404)
    beats = "/api/trials/heartbeat"

    def heard(answered: bool) -> int:
        return sum(1 for path, ok in list(proxy.answered) if path == beats and ok is answered)

    def wait_for(count: Callable[[], int], at_least: int) -> None:
        deadline = time.monotonic() + 10.0
        while count() < at_least and time.monotonic() < deadline:
            time.sleep(0.02)
        assert count() >= at_least

    try:
        if from_the_start:
            proxy.down.set()
        _, bso = training_run(proxy.url, "beat404", heartbeat_seconds=0.05)
        if not from_the_start:
            wait_for(lambda: heard(True), 1)
            proxy.down.set()
        wait_for(lambda: heard(False), 3)
        proxy.down.clear()
        after = heard(True)
        wait_for(lambda: heard(True), after + 2)  # the heartbeats went on
        assert "no heartbeat route" not in caplog.text
        assert "heartbeat failed (training goes on)" in caplog.text
        assert bso.on_evaluate(0.9).stop_train is True
        ends_converged(bso, sqlite_server, epochs=1)
    finally:
        proxy.close()


def test_a_proxys_bad_gateway_at_start_trains_at_the_default(
    sqlite_server: ServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Behind a reverse proxy, a server that is down at start answers 502 (the proxy's): the run
    trains at the default batch size without the server, as when it cannot be reached, rather
    than failing (a 502 raised into the script)."""
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    proxy = ReverseProxy(sqlite_server.url, down_on="/")
    proxy.down.set()
    try:
        spec, bso = training_run(proxy.url, "gatewaystart")
        assert (bso.offline, bso.batch_size) == (True, spec.default_batch_size)
        assert "the server could not be reached at start (POST /jobs answered 502" in caplog.text
        assert bso.on_evaluate(0.9).stop_train  # judged here, at the target
        bso.end()
        assert bso.outcome is not None
        assert (bso.outcome.converged, bso.outcome.offline) == (True, True)
    finally:
        proxy.close()
    with sqlite_server.client() as http:  # nothing reached the server
        assert http.get(f"/api/jobs/{spec.job_id}").status_code == 404


def test_a_run_that_ends_during_an_outage_is_delivered_by_the_next_run(
    lockable: tuple[ServerProcess, Path],
) -> None:
    """The database stays locked past the end of a run: its last report and the end of its
    trial are kept on this machine, and the next run of any job on that server delivers them
    before it asks for its batch size; the first run's result arrives, converged."""
    server, db = lockable
    spec, bso = training_run(server.url, "longoutage")
    with locked(db):
        assert bso.on_evaluate(0.9).stop_train is True  # kept; at its target, judged here
        bso.end()  # still down: kept on this machine
    assert len(outbox_files(db.parent)) == 1
    with server.client() as http:
        (trial,) = http.get(f"/api/jobs/{spec.job_id}").json()["trials"]
    assert (trial["status"], trial["epochs"]) == ("dispatched", None)
    # The next run (here, of the same job) delivers it first.
    later = next_run(server.url, spec)
    later.get_batch_size()
    later.release("not trained in this test")
    assert outbox_files(db.parent) == []
    with server.client() as http:
        trials = http.get(f"/api/jobs/{spec.job_id}").json()["trials"]
    first = next(t for t in trials if t["trial_number"] == 1)
    assert (first["status"], first["converged"], first["epochs"]) == ("reported", True, 1)


def test_a_token_rotated_under_a_run_does_not_stop_its_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The server restarts with a new token while a run trains: its next report was refused
    (401) and the error stopped the training. Now the run trains on, saying why, and its last
    report is kept on this machine; the next run, with the new token, delivers it."""
    from tests import helpers

    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    db = tmp_path / "bso.db"
    before = ServerProcess(sqlite_url(db), cwd=tmp_path, env={"ZEUS_BSO_TOKEN": "token-old"})
    spec, bso = training_run(before.url, "rotated", token="token-old")
    before.stop()
    monkeypatch.setattr(helpers, "free_port", lambda: before.port)  # the same address
    after = ServerProcess(sqlite_url(db), cwd=tmp_path, env={"ZEUS_BSO_TOKEN": "token-new"})
    try:
        with caplog.at_level(logging.WARNING, logger="zeus_bso"):
            assert bso.on_evaluate(0.5).stop_train is False  # refused: training goes on
            assert bso.on_evaluate(0.9).stop_train is True  # at its target, judged here
        said = " ".join(caplog.text.split())
        assert "the server refuses the token it took when this run started" in said
        assert "ZEUS_BSO_PREVIOUS_TOKEN" in said
        bso.end()
        assert len(outbox_files(tmp_path)) == 1
        later = next_run(after.url, spec, token="token-new")
        later.get_batch_size()
        later.release("not trained in this test")
        assert outbox_files(tmp_path) == []
        with ServerClient(after.url, token="token-new") as client:
            first = next(t for t in client.trials(spec.job_id) if t.trial_number == 1)
        assert (first.status, first.converged, first.epochs) == ("reported", True, 2)
    finally:
        after.stop()


@pytest.mark.parametrize("registered_again", [False, True])
def test_a_job_deleted_under_a_run_does_not_stop_its_training(
    lockable: tuple[ServerProcess, Path],
    caplog: pytest.LogCaptureFixture,
    registered_again: bool,
) -> None:
    """``zeus-bso jobs delete`` while a run trains: its next report was refused (the job, or
    its trial once the job is registered anew, is unknown) and the error stopped the training.
    Now the run trains on without the server, saying why, judged by the job's target and
    max_epochs, and nothing of it is kept or sent again (the job stays as it is)."""
    server, db = lockable
    spec, bso = training_run(server.url, "deleted")
    assert bso.on_evaluate(0.1).stop_train is False
    with ServerClient(server.url) as client:
        registered = client.job(spec.job_id, limit=0).job
        client.delete_job(spec.job_id)
        if registered_again:  # as another run of the job would, after the deletion
            fields = registered.model_dump(include=set(JobSpecFromClient.model_fields))
            client.register_job(JobSpecFromClient.model_validate(fields))
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        assert bso.on_evaluate(0.5).stop_train is False  # trains on
    said = " ".join(caplog.text.split())
    assert f"trial 1 of job {spec.job_id} is no longer on the server (the job was deleted" in said
    answer = bso.on_evaluate(0.9)  # the job's target (0.8), judged here
    assert (answer.stop_train, answer.converged) == (True, True)
    bso.end()
    assert bso.outcome is not None
    assert (bso.outcome.converged, bso.outcome.offline, bso.outcome.epochs) == (True, True, 3)
    assert outbox_files(db.parent) == []
    with server.client() as http:  # nothing of the run reached it
        view = http.get(f"/api/jobs/{spec.job_id}")
    if registered_again:
        assert view.json()["trials"] == []
    else:
        assert view.status_code == 404


@pytest.mark.parametrize("away", ["database locked", "a proxy's 404 page"])
def test_out_of_memory_while_the_server_is_away_is_delivered_by_the_next_run(
    lockable: tuple[ServerProcess, Path], away: str
) -> None:
    """A run's batch size runs out of memory while the database is locked, or while a reverse
    proxy answers the mark with its own 404 page (the server declared the route at dispatch):
    the mark is kept on this machine (the trial is not ended, which would lose it), and the
    next run delivers it before it asks for its batch size, which then fits. (Behind the proxy
    the trial was ended as failed, taken for upstream's server without the route: the mark was
    lost, and the next run got the size that ran out again.)"""
    server, db = lockable
    proxy = ReverseProxy(server.url, down_on="/api/trials/infeasible", status=404)
    url = proxy.url if "proxy" in away else server.url

    @contextlib.contextmanager
    def server_away() -> Iterator[None]:
        if "proxy" not in away:
            with locked(db):
                yield
            return
        proxy.down.set()
        try:
            yield
        finally:
            proxy.down.clear()

    try:
        spec, bso = training_run(url, "oomaway")
        assert bso.batch_size == 32
        with server_away():
            bso.end_out_of_memory("CUDA out of memory")
        (kept,) = outbox_files(db.parent)
        assert json.loads(kept.read_text())["infeasible"] is True
        later = next_run(url, spec)
        assert later.get_batch_size() == 16
        later.release("not trained in this test")
    finally:
        proxy.close()
    assert outbox_files(db.parent) == []
    with server.client() as http:
        trials = http.get(f"/api/jobs/{spec.job_id}").json()["trials"]
    first = next(t for t in trials if t["trial_number"] == 1)
    assert (first["batch_size"], first["status"]) == (32, "infeasible")


def test_a_release_during_an_outage_is_delivered_by_the_next_run(
    lockable: tuple[ServerProcess, Path],
) -> None:
    """A run released before it trained (a refused script, an interruption) while the database
    is locked: the release is kept on this machine, and the next run delivers it, so that the
    trial is released, counting nothing against its batch size. (It was left to its lease,
    then abandoned without a report: a failure of its batch size.)"""
    server, db = lockable
    spec, bso = training_run(server.url, "releaseoutage")
    with locked(db):
        bso.release("refused before it trained")
    (kept,) = outbox_files(db.parent)
    assert json.loads(kept.read_text())["release"] == "refused before it trained"
    assert bso.outcome is not None
    assert "left to its lease" not in bso.outcome.why
    later = next_run(server.url, spec)
    later.get_batch_size()
    later.release("not trained in this test")
    assert outbox_files(db.parent) == []
    with server.client() as http:
        trials = http.get(f"/api/jobs/{spec.job_id}").json()["trials"]
    first = next(t for t in trials if t["trial_number"] == 1)
    assert (first["status"], first["message"]) == ("released", "refused before it trained")


def test_a_size_that_trained_running_out_during_an_outage_is_in_doubt_once_delivered(
    lockable: tuple[ServerProcess, Path],
) -> None:
    """A size that trained on these GPUs runs out of memory while it trains, the database
    locked: its release is kept with what it says (out of memory), and once the next run
    delivers it, the size's fit is in doubt there, so that run is told to try it first."""
    server, db = lockable
    spec, bso = training_run(server.url, "grewoutage")
    assert bso.on_evaluate(0.9).converged  # 32 trained on these GPUs
    bso.end()
    with server.client() as http:
        assert http.put(f"/api/jobs/{spec.job_id}/pin", json={"batch_size": 32}).is_success
    again = next_run(server.url, spec)
    assert again.get_batch_size() == 32
    assert not again.memory_unknown
    again.on_train_begin()
    with locked(db):
        again.end_out_of_memory("CUDA out of memory")
    (kept,) = outbox_files(db.parent)
    assert json.loads(kept.read_text())["release_out_of_memory"] is True
    later = next_run(server.url, spec)
    assert later.get_batch_size() == 32
    assert outbox_files(db.parent) == []
    assert later.memory_unknown  # tried first
    later.release("not trained in this test")
    with server.client() as http:
        view = http.get(f"/api/jobs/{spec.job_id}").json()
    assert list(view["memory_doubts"].values()) == [32]


def test_micro_batches_that_run_out_of_memory_during_an_outage_are_delivered_later(
    lockable: tuple[ServerProcess, Path],
) -> None:
    """A run that accumulates (32 as two micro-batches of 16) runs out of memory at 16 while
    the database is locked: the mark is kept on this machine, the run goes on at 8, and the
    next run delivers it: these GPUs' memory cap comes down to 16."""
    server, db = lockable
    spec, bso = training_run(server.url, "microoutage", max_micro_batch_size=16)
    assert (bso.batch_size, bso.micro_batch_size) == (32, 16)
    with locked(db):
        assert bso.micro_batch_out_of_memory("CUDA out of memory") == 8
    (kept,) = outbox_files(db.parent)
    assert json.loads(kept.read_text())["micro_batch_size"] == 16
    bso.release("not trained in this test")
    with server.client() as http:
        assert http.get(f"/api/jobs/{spec.job_id}").json()["memory_caps"] == {}
    later = next_run(server.url, spec, max_micro_batch_size=16)
    later.get_batch_size()
    assert outbox_files(db.parent) == []
    with server.client() as http:
        assert list(http.get(f"/api/jobs/{spec.job_id}").json()["memory_caps"].values()) == [16]
    later.release("not trained in this test")


def test_a_run_that_cannot_reach_the_server_does_not_fall_back_to_a_size_that_ran_out(
    lockable: tuple[ServerProcess, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The default, 32, ran out of memory on this machine; the next run starts while the server
    is down: it trains without it at 16, not at the default, and says why."""
    server, _ = lockable
    spec, bso = training_run(server.url, "oomaway")
    assert bso.batch_size == 32
    bso.end_out_of_memory("CUDA out of memory")
    server.stop()
    later = next_run(server.url, spec, retry_seconds=0.5)
    with caplog.at_level(logging.WARNING):
        assert later.get_batch_size() == 16
    assert later.offline
    assert (
        "training at batch size 16, the largest below 32, which ran out of memory on this "
        "machine, without the server" in caplog.text
    )


def test_what_is_kept_for_a_server_no_run_reaches_is_dropped_after_kept_days(
    sqlite_server: ServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run delivers what is kept for its own server; an entry for another one (the server
    moved) stays until it is `outbox.KEPT_DAYS` old, then the delivering run drops it and
    says which trial of which job it was."""
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    moved = "http://bso.moved.example:8000"
    old, recent = (TrialId(job_id="gone-1", trial_number=n, batch_size=64) for n in (3, 4))
    assert outbox.keep(moved, old, None, end=True)
    assert outbox.keep(moved, recent, None, end=True)
    kept = {json.loads(p.read_text())["trial"]["trial_number"]: p for p in outbox_files(tmp_path)}
    month_ago = time.time() - (outbox.KEPT_DAYS + 1) * 86400
    os.utime(kept[3], (month_ago, month_ago))
    with ServerClient(sqlite_server.url) as client, caplog.at_level(logging.WARNING):
        assert outbox.deliver(client) == 0
    assert outbox_files(tmp_path) == [kept[4]]
    assert "trial 3 of job gone-1" in caplog.text
    assert moved in caplog.text


def outbox_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "outbox").glob("*.json"))
