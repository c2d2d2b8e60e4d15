"""Crash-safe relaunch: a run that names itself (``run_key``) and asks again continues its open
trial, with what it reported; a finished trial's key starts a new one. Real server process."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import ServerProcess, age_leases, job_body, unique_id


def register(http: httpx.Client) -> str:
    job_id = unique_id("run")
    assert http.post("/jobs", json=job_body(job_id)).status_code == 201
    return job_id


def ask(http: httpx.Client, job_id: str, run_key: str | None = None) -> dict[str, Any]:
    params = {"job_id": job_id} if run_key is None else {"job_id": job_id, "run_key": run_key}
    response = http.get("/jobs/batch_size", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def report(http: httpx.Client, trial: dict[str, Any], epoch: int, metric: float) -> Any:
    ids = {k: trial[k] for k in ("job_id", "batch_size", "trial_number")}
    body = {**ids, "time": 10.0 * epoch, "energy": 1000.0 * epoch, "metric": metric}
    response = http.post("/report", json={**body, "current_epoch": epoch})
    assert response.status_code == 200, response.text
    return response.json()


def statuses(http: httpx.Client, job_id: str) -> dict[int, str]:
    trials = http.get(f"/api/jobs/{job_id}").json()["trials"]
    return {t["trial_number"]: t["status"] for t in trials}


def test_a_restarted_run_continues_its_trial(http: httpx.Client) -> None:
    job_id = register(http)
    first = ask(http, job_id, "attempt-of-run-1")
    assert set(first) == {"job_id", "batch_size", "trial_number"}  # upstream's answer exactly
    report(http, first, 1, 0.1)
    report(http, first, 2, 0.2)

    again = ask(http, job_id, "attempt-of-run-1")
    assert again == {
        **first,
        "resumed": True,
        "current_epoch": 2,
        "time": 20.0,
        "energy": 2000.0,
    }
    # Another run, or one without a key, gets a trial of its own.
    other = ask(http, job_id, "run-2")
    plain = ask(http, job_id)
    assert len({first["trial_number"], other["trial_number"], plain["trial_number"]}) == 3
    # The resumed run reports on from where it was.
    assert report(http, again, 3, 0.3)["stop_train"] is False


def test_an_abandoned_trial_is_revived_and_a_finished_one_is_not_resumed(
    server: ServerProcess, http: httpx.Client
) -> None:
    job_id = register(http)
    first = ask(http, job_id, "k")
    assert server.db_url is not None
    age_leases(server.db_url, job_id, 10 * 24 * 3600.0)
    ask(http, job_id)  # a dispatch expires the lease: the trial is abandoned
    assert statuses(http, job_id)[first["trial_number"]] == "abandoned"
    revived = ask(http, job_id, "k")
    assert revived["trial_number"] == first["trial_number"]
    assert revived["resumed"] is True
    assert statuses(http, job_id)[first["trial_number"]] == "dispatched"

    report(http, first, 1, 0.99)  # the target: the trial is over
    fresh = ask(http, job_id, "k")
    assert "resumed" not in fresh
    assert fresh["trial_number"] != first["trial_number"]
    # Ended by its client (failed): the key's next run starts anew as well.
    ended = http.patch("/trials", json=fresh)
    assert ended.status_code == 200
    after_failure = ask(http, job_id, "k")
    assert "resumed" not in after_failure
    assert after_failure["trial_number"] not in (first["trial_number"], fresh["trial_number"])


def test_two_processes_with_one_run_key_are_told_they_share_a_trial(http: httpx.Client) -> None:
    """Two live processes with one name (a fixed run key in a sweep) get one trial; the report
    that contradicts the other's says so and names the key, where it said only that time is
    cumulative. A run without a key is not told of keys."""
    job_id = register(http)
    first = ask(http, job_id, "sweep")
    report(http, first, 2, 0.2)
    second = ask(http, job_id, "sweep")  # another process, not a restart: it starts at epoch 1
    assert second["trial_number"] == first["trial_number"]
    ids = {k: second[k] for k in ("job_id", "batch_size", "trial_number")}
    body = {**ids, "time": 10.0, "energy": 1000.0, "metric": 0.1, "current_epoch": 1}
    refused = http.post("/report", json=body)
    assert refused.status_code == 409, refused.text
    message = refused.json()["message"]
    assert "current_epoch 1 is below the 2 epochs already reported" in message
    assert "The trial belongs to the run named 'sweep'" in message
    assert "give each run its own name" in message
    plain = ask(http, job_id)
    report(http, plain, 2, 0.2)
    ids = {k: plain[k] for k in ("job_id", "batch_size", "trial_number")}
    unnamed = http.post("/report", json={**body, **ids})
    assert unnamed.status_code == 409
    assert "run named" not in unnamed.json()["message"]


@pytest.mark.parametrize("run_key", ["", "a\x00b", "tab\there", "x" * 256])
def test_bad_run_keys_are_refused(http: httpx.Client, run_key: str) -> None:
    job_id = register(http)
    response = http.get("/jobs/batch_size", params={"job_id": job_id, "run_key": run_key})
    assert response.status_code == 422, response.text
    assert "run_key" in response.json()["message"]
    assert statuses(http, job_id) == {}  # nothing was dispatched
