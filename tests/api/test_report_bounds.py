"""Reports and registrations that would store a non-finite or impossible cost are refused."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import job_body, unique_id


def _job_with_trial(http: httpx.Client, **overrides: object) -> dict[str, object]:
    job_id = unique_id()
    assert http.post("/jobs", json=job_body(job_id, **overrides)).status_code == 201
    trial = http.get("/jobs/batch_size", params={"job_id": job_id})
    assert trial.status_code == 200
    return dict(trial.json())


def test_overflowing_power_time_or_energy_is_refused_naming_the_field(http: httpx.Client) -> None:
    refused = http.post("/jobs", json=job_body(unique_id(), max_power=1e308))
    assert refused.status_code == 422
    assert "max_power" in refused.text
    trial = _job_with_trial(http)
    for field in ("time", "energy"):
        report = trial | {"time": 10.0, "energy": 100.0, "metric": 0.9, "current_epoch": 1}
        answer = http.post("/report", json=report | {field: 1.7e308})
        assert answer.status_code == 422, answer.text
        assert field in answer.text
    state = http.get(f"/api/jobs/{trial['job_id']}").json()
    assert state["trials"][0]["status"] == "dispatched"  # nothing stored
    assert state["best_cost"] is None


@pytest.mark.parametrize("field", ["time", "energy"])
def test_cumulative_time_or_energy_going_down_is_refused(http: httpx.Client, field: str) -> None:
    trial = _job_with_trial(http)
    report = trial | {"time": 30.0, "energy": 300.0, "metric": 0.1, "current_epoch": 3}
    assert http.post("/report", json=report).status_code == 200
    lower = report | {"current_epoch": 4, "metric": 0.99, field: 0.0}
    refused = http.post("/report", json=lower)
    assert refused.status_code == 409
    assert f"{field} 0 is below" in refused.json()["message"]
    state = http.get(f"/api/jobs/{trial['job_id']}").json()
    assert state["best_cost"] is None  # the job's best did not become 0
    assert state["trials"][0]["status"] == "dispatched"
    # The same report, cumulative, is accepted and ends the run.
    accepted = http.post("/report", json=report | {"current_epoch": 4, "metric": 0.99})
    assert accepted.status_code == 200
    assert accepted.json()["stop_train"]


@pytest.mark.parametrize(
    ("eta", "time", "measured"),
    [
        (0.5, 0.0, "no time and no energy"),
        (1.0, 30.0, "no energy, and the job's cost is its energy alone"),
    ],
)
def test_a_report_that_measured_nothing_is_refused_and_nothing_stored(
    http: httpx.Client, eta: float, time: float, measured: str
) -> None:
    """Recorded, an epoch that cost nothing would make its batch size free, and the job would
    settle on it: a meter that reads 0 is said, not learned from. A report of time alone is
    taken where the cost counts time (eta_knob below 1)."""
    trial = _job_with_trial(http, eta_knob=eta)
    report = trial | {"time": time, "energy": 0.0, "metric": 0.99, "current_epoch": 1}
    refused = http.post("/report", json=report)
    assert refused.status_code == 422, refused.text
    message = refused.json()["message"]
    assert f"reported {measured}" in message
    assert "after epoch 1" in message
    assert "nothing was recorded" in message
    state = http.get(f"/api/jobs/{trial['job_id']}").json()
    assert state["trials"][0]["status"] == "dispatched"
    assert state["best_cost"] is None
    accepted = http.post("/report", json=report | {"time": 30.0, "energy": 300.0})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["stop_train"]


def test_time_alone_is_a_cost_where_the_job_counts_time(http: httpx.Client) -> None:
    trial = _job_with_trial(http, eta_knob=0.0)
    report = trial | {"time": 30.0, "energy": 0.0, "metric": 0.99, "current_epoch": 1}
    assert http.post("/report", json=report).status_code == 200
    timeless = _job_with_trial(http, eta_knob=0.0)
    refused = http.post("/report", json=timeless | report | {"time": 0.0, "energy": 300.0})
    assert refused.status_code == 422
    assert "no time, and the job's cost is its time alone" in refused.json()["message"]
