"""Several server processes on one SQLite file, many clients at once on one job."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conftest import BACKENDS, ServerProcess, job_body, metric, serve_backend, unique_id

CLIENTS = 32


@pytest.fixture(scope="module", params=BACKENDS)
def two_workers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """Two server processes on one SQLite file, or on one PostgreSQL database."""
    yield from serve_backend(request, tmp_path_factory, workers=2)


def test_simultaneous_registrations_of_one_job(two_workers: ServerProcess) -> None:
    job_id = unique_id("reg")
    barrier = threading.Barrier(8)

    def register(_: int) -> int:
        with two_workers.client() as http:
            barrier.wait()
            return http.post("/jobs", json=job_body(job_id)).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = sorted(pool.map(register, range(8)))
    assert codes == [200] * 7 + [201]


def test_many_clients_on_one_job(two_workers: ServerProcess) -> None:
    job_id = unique_id("load")
    with two_workers.client() as http:
        assert http.post("/jobs", json=job_body(job_id, max_epochs=5)).status_code == 201
    barrier = threading.Barrier(CLIENTS)
    statuses: list[int] = []
    lock = threading.Lock()

    def one_run(index: int) -> dict[str, Any]:
        with two_workers.client() as http:
            barrier.wait()
            got = http.get("/jobs/batch_size", params={"job_id": job_id})
            codes = [got.status_code]
            trial = got.json()
            for epoch in range(1, 4):
                result = {
                    **trial,
                    "time": 5.0 * epoch,
                    "energy": 500.0 * epoch * (1 + index % 3),
                    "metric": 0.2 * epoch,
                    "current_epoch": epoch,
                }
                answer = http.post("/report", json=result)
                codes.append(answer.status_code)
                if answer.json().get("stop_train"):
                    break
            codes.append(http.patch("/trials", json=trial).status_code)
            with lock:
                statuses.extend(codes)
            return dict(trial)

    with ThreadPoolExecutor(CLIENTS) as pool:
        trials = list(pool.map(one_run, range(CLIENTS)))

    assert all(code < 500 for code in statuses), sorted(set(statuses))
    assert all(code == 200 for code in statuses), sorted(set(statuses))
    numbers = sorted(t["trial_number"] for t in trials)
    assert numbers == list(range(1, CLIENTS + 1))

    with two_workers.client() as http:
        state = http.get(f"/api/jobs/{job_id}", params={"limit": 1000}).json()
    assert state["trial_count"] == CLIENTS
    explorations = sorted(
        (t for t in state["trials"] if t["kind"] == "exploration"), key=lambda t: t["trial_number"]
    )
    assert explorations
    assert all(t["status"] in ("reported", "failed") for t in explorations)
    # Exploration is serial: each one started after the one before it had ended.
    for before, after in itertools.pairwise(explorations):
        assert after["created_at"] >= before["updated_at"], (before, after)
    assert sum(b["reports"] for b in state["batch_sizes"]) == sum(
        1 for t in state["trials"] if t["status"] == "reported"
    )
    # /metrics, answered by either worker, adds up both workers' counts.
    with two_workers.client() as http:
        for _ in range(4):
            text = http.get("/metrics").text
            assert metric(text, "zeus_bso_decisions_total") == CLIENTS
            assert metric(text, "zeus_bso_http_requests_total", route="/jobs/batch_size") == CLIENTS
