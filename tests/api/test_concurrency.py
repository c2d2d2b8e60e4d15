"""Several server processes on one database, many clients at once; and a negative control."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ServerProcess, database_url, job_body, metric, unique_id

CLIENTS = 32
WORKERS = {"sqlite": 2, "postgresql": 4, "mysql": 2}


@pytest.fixture(scope="module", params=list(WORKERS))
def workers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """Two server processes on one SQLite file, four on one PostgreSQL database, two on MySQL."""
    tmp = tmp_path_factory.mktemp(request.param)
    url = database_url(request.param, tmp, request)
    proc = ServerProcess(url, cwd=tmp, workers=WORKERS[request.param])
    yield proc
    proc.stop()


def hammer(server: ServerProcess, job_ids: list[str], recurrences: int) -> list[int]:
    """CLIENTS clients, spread over the jobs, each running ``recurrences`` recurrences at once:
    ask, renew the lease and read the job, report per epoch until told to stop, repeat the
    final report, end. Returns statuses."""
    barrier = threading.Barrier(CLIENTS)
    statuses: list[int] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        job_id = job_ids[index % len(job_ids)]
        codes = []
        with server.client() as http:
            barrier.wait()
            for _ in range(recurrences):
                got = http.get("/jobs/batch_size", params={"job_id": job_id})
                codes.append(got.status_code)
                if got.status_code != 200:
                    continue
                trial = got.json()
                # The heartbeat and a reader of the job, between the writes.
                codes.append(http.post("/api/trials/heartbeat", json=trial).status_code)
                codes.append(http.get(f"/api/jobs/{job_id}", params={"limit": 5}).status_code)
                result: dict[str, Any] = {}
                for epoch in range(1, 6):
                    result = {
                        **trial,
                        "time": 5.0 * epoch,
                        "energy": 100.0 * epoch * (1 + trial["batch_size"] / 64 + index % 3),
                        "metric": 0.15 * epoch,
                        "current_epoch": epoch,
                    }
                    answer = http.post("/report", json=result)
                    codes.append(answer.status_code)
                    if answer.status_code != 200 or answer.json()["stop_train"]:
                        break
                codes.append(http.post("/report", json=result).status_code)  # a retried final
                codes.append(http.patch("/trials", json=trial).status_code)
        with lock:
            statuses.extend(codes)

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(client, range(CLIENTS)))
    return statuses


def violations(server: ServerProcess, job_ids: list[str]) -> list[str]:
    """Every broken invariant of the stored jobs, in words."""
    found = []
    with server.client() as http:
        for job_id in job_ids:
            state = http.get(f"/api/jobs/{job_id}", params={"limit": 1000}).json()
            trials = sorted(state["trials"], key=lambda t: t["trial_number"])
            numbers = [t["trial_number"] for t in trials]
            if numbers != list(range(1, state["trial_count"] + 1)):
                found.append(f"{job_id}: trial numbers {numbers} are not 1..{state['trial_count']}")
            explorations = [t for t in trials if t["kind"] == "exploration"]
            for before, after in itertools.pairwise(explorations):
                if after["created_at"] < before["updated_at"]:
                    found.append(
                        f"{job_id}: explorations {before['trial_number']} and "
                        f"{after['trial_number']} overlapped"
                    )
            reported = Counter(t["batch_size"] for t in trials if t["status"] == "reported")
            stored = {b["batch_size"]: b["reports"] for b in state["batch_sizes"]}
            if any(stored.get(b, 0) != n for b, n in reported.items()) or sum(
                stored.values()
            ) != sum(reported.values()):
                found.append(f"{job_id}: statistics count {stored}, trials say {dict(reported)}")
            # The early-stop reference (best_mean): the lowest mean of a size's converged runs.
            by_size: dict[int, list[float]] = {}
            for t in trials:
                if t["status"] == "reported" and t["converged"]:
                    by_size.setdefault(t["batch_size"], []).append(t["cost"])
            means = [sum(costs) / len(costs) for costs in by_size.values()]
            if means and state["best_cost"] != pytest.approx(min(means)):
                found.append(f"{job_id}: best cost {state['best_cost']} != {min(means)}")
    return found


def test_simultaneous_registrations_of_one_job(workers: ServerProcess) -> None:
    job_id = unique_id("reg")
    barrier = threading.Barrier(8)

    def register(_: int) -> int:
        with workers.client() as http:
            barrier.wait()
            return http.post("/jobs", json=job_body(job_id)).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = sorted(pool.map(register, range(8)))
    assert codes == [200] * 7 + [201]


@pytest.mark.parametrize("jobs", [1, 8], ids=["one-job", "eight-jobs"])
def test_many_clients(workers: ServerProcess, jobs: int) -> None:
    job_ids = [unique_id("load") for _ in range(jobs)]
    with workers.client() as http:
        for job_id in job_ids:
            assert http.post("/jobs", json=job_body(job_id, max_epochs=5)).status_code == 201
        before = http.get("/metrics").text
    statuses = hammer(workers, job_ids, recurrences=3)
    with workers.client() as http:  # the job list, after the load
        assert http.get("/api/jobs", params={"prefix": "load"}).status_code == 200
    assert Counter(statuses) == {200: len(statuses)}
    assert violations(workers, job_ids) == []
    with workers.client() as http:
        # /metrics, answered by any worker, adds up every worker's counts.
        for _ in range(4):
            after = http.get("/metrics").text
            grown = metric(after, "zeus_bso_decisions_total") - metric(
                before, "zeus_bso_decisions_total"
            )
            assert grown == CLIENTS * 3


def test_negative_control_without_the_job_lock(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The same load with the job lock taken away (patched into the server processes at start):
    the checks above must notice."""
    backend = "sqlite"
    patch = tmp_path / "patch"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(UNLOCK)
    server = ServerProcess(
        database_url(backend, tmp_path, request),
        cwd=tmp_path,
        workers=2,
        env={"PYTHONPATH": str(patch)},
    )
    try:
        job_ids = [unique_id("race")]
        with server.client() as http:
            assert http.post("/jobs", json=job_body(job_ids[0], max_epochs=5)).status_code == 201
        statuses = hammer(server, job_ids, recurrences=3)
        broken = violations(server, job_ids)
    finally:
        server.stop()
    errors = [s for s in statuses if s != 200]
    assert errors or broken, "the race went unnoticed"
    print(f"without the lock: {Counter(errors)} of {len(statuses)} requests failed, {broken}")


UNLOCK = '''
"""Test-only patch: write transactions start with a plain BEGIN and take no row lock. So that
the race cannot pass by chance, a process no longer queues its own requests on one job (it
would serialise them all when every client's connection lands on one worker, as can happen on a
loaded machine while the second worker is still starting), and every read of the job that would
have locked it waits a moment before the first write (otherwise a window of microseconds)."""
import contextlib
import time

from sqlalchemy import event

import zeus_bso_server.service as service
import zeus_bso_server.store.repository as repository
import zeus_bso_server.store.repository.jobs as job_rows
from zeus_bso_server.store.dialects import DIALECTS

job_rows._JOB_FOR_UPDATE = job_rows._JOB
_get_job = job_rows.get_job


def _get_job_and_wait(conn, job_id, *, lock=False):
    job = _get_job(conn, job_id, lock=lock)
    if lock:
        time.sleep(0.02)
    return job


repository.get_job = job_rows.get_job = _get_job_and_wait


@contextlib.asynccontextmanager
async def _no_queue(self, job_id):
    yield


service.BatchSizeService._queue = _no_queue
sqlite = type(DIALECTS["sqlite"])
_original = sqlite.install_hooks


def _without_immediate(self, engine, *timeouts):
    _original(self, engine, *timeouts)
    for listener in list(engine.dispatch.begin):
        event.remove(engine, "begin", listener)
    event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN"))


sqlite.install_hooks = _without_immediate
'''
