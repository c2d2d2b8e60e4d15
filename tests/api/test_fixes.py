"""One test per deliberate fix of upstream behaviour (SPEC 4.4), against a real server process."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.helpers import ServerProcess, age_leases, job_body, unique_id
from zeus_bso.spec import UPSTREAM_OPTIONS

PAST_ANY_LEASE = 10 * 24 * 3600.0
"""How far the tests move a job's leases into the past: beyond the longest lease a trial gets."""


def let_leases_run_out(server: ServerProcess, job_id: str) -> None:
    """Every lease of the job runs out now (no sleeping: the leases are moved into the past)."""
    assert server.db_url is not None
    age_leases(server.db_url, job_id, PAST_ANY_LEASE)


def register(http: httpx.Client, **overrides: Any) -> str:
    """Register a job with upstream's policy options: each test shows a fix against upstream."""
    job_id = unique_id()
    response = http.post("/jobs", json=job_body(job_id, **{**UPSTREAM_OPTIONS, **overrides}))
    assert response.status_code == 201, response.text
    return job_id


def next_trial(http: httpx.Client, job_id: str) -> dict[str, Any]:
    response = http.get("/jobs/batch_size", params={"job_id": job_id})
    assert response.status_code == 200, response.text
    return dict(response.json())


def report(
    http: httpx.Client, trial: dict[str, Any], epoch: int, metric: float, cost_unit: float = 1.0
) -> dict[str, Any]:
    body = {
        **trial,
        "time": 10.0 * epoch * cost_unit,
        "energy": 1000.0 * epoch * cost_unit,
        "metric": metric,
        "current_epoch": epoch,
    }
    response = http.post("/report", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def state(http: httpx.Client, job_id: str) -> dict[str, Any]:
    response = http.get(f"/api/jobs/{job_id}", params={"limit": 1000})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_best_cost_counts_converged_runs_only(http: httpx.Client) -> None:
    # The default (32) fails cheaply at max_epochs; upstream would then early-stop 64 at once
    # because its cost exceeds beta x that failed run's cost.
    job_id = register(http, batch_sizes=[32, 64], default_batch_size=32, max_epochs=2)
    first = next_trial(http, job_id)
    assert first["batch_size"] == 32
    report(http, first, 1, 0.1, cost_unit=0.1)
    failed = report(http, first, 2, 0.1, cost_unit=0.1)
    assert (failed["stop_train"], failed["converged"]) == (True, False)
    second = next_trial(http, job_id)
    assert second["batch_size"] == 64
    decision = report(http, second, 1, 0.2, cost_unit=10.0)
    assert decision["stop_train"] is False
    assert state(http, job_id)["best_cost"] is None


def test_expired_lease_is_abandoned_and_frees_exploration(server: ServerProcess) -> None:
    with server.client() as http:
        job_id = register(http)
        dead = next_trial(http, job_id)
        assert dead["batch_size"] == 64
        concurrent = next_trial(http, job_id)
        assert state(http, job_id)["trials"][0]["kind"] == "concurrent"
        still = next_trial(http, job_id)  # the leases still run: one more concurrent run
        assert state(http, job_id)["trials"][0]["kind"] == "concurrent"
        let_leases_run_out(server, job_id)
        retry = next_trial(http, job_id)
        trials = {t["trial_number"]: t for t in state(http, job_id)["trials"]}
        assert trials[dead["trial_number"]]["status"] == "abandoned"
        assert trials[concurrent["trial_number"]]["status"] == "abandoned"
        assert trials[still["trial_number"]]["status"] == "abandoned"
        assert retry["batch_size"] == 64
        assert trials[retry["trial_number"]]["kind"] == "exploration"

        # The vanished client comes back: its late report is stored, nothing is dropped.
        late = report(http, dead, 1, 0.9)
        assert (late["stop_train"], late["converged"]) == (True, True)
        trials = {t["trial_number"]: t for t in state(http, job_id)["trials"]}
        assert trials[dead["trial_number"]]["status"] == "reported"
        assert trials[dead["trial_number"]]["cost"] is not None


def test_a_batch_size_whose_runs_die_unreported_is_not_dispatched_forever(
    server: ServerProcess,
) -> None:
    """Runs killed after dispatch (OOM: no report, no PATCH) count as failures once their lease
    runs out; one that reported before it vanished does not."""
    with server.client() as http:
        job_id = register(http, max_unreported_failures=2)
        first = next_trial(http, job_id)
        assert first["batch_size"] == 64
        report(http, first, 1, 0.1, cost_unit=0.01)  # a short epoch reported, then it vanishes
        let_leases_run_out(server, job_id)
        second = next_trial(http, job_id)
        assert second["batch_size"] == 64  # an abandon after a report says nothing bad
        let_leases_run_out(server, job_id)
        third = next_trial(http, job_id)
        assert third["batch_size"] == 64  # one silent abandon: under the limit of 2
        let_leases_run_out(server, job_id)
        # Two runs of 64 died before their first report: 64 does not converge in this round.
        fourth = next_trial(http, job_id)
        assert fourth["batch_size"] != 64
        trials = {t["trial_number"]: t for t in state(http, job_id)["trials"]}
        assert [trials[t["trial_number"]]["status"] for t in (first, second, third)] == [
            "abandoned"
        ] * 3


def test_heartbeat_keeps_a_trial_alive(server: ServerProcess) -> None:
    with server.client() as http:
        job_id = register(http)
        alive = next_trial(http, job_id)
        for _ in range(2):
            let_leases_run_out(server, job_id)  # then a heartbeat comes: a lease from now on
            beat = http.post("/api/trials/heartbeat", json=alive)
            assert beat.status_code == 200
            assert beat.json()["status"] == "dispatched"
        follower = next_trial(http, job_id)
        kinds = {t["trial_number"]: t["kind"] for t in state(http, job_id)["trials"]}
        assert kinds[follower["trial_number"]] == "concurrent"
        unknown = http.post("/api/trials/heartbeat", json={**alive, "trial_number": 999})
        assert unknown.status_code == 404


def test_batch_size_that_keeps_crashing_is_not_dispatched_forever(http: httpx.Client) -> None:
    job_id = register(http, max_unreported_failures=2)
    for _ in range(2):
        trial = next_trial(http, job_id)
        assert trial["batch_size"] == 64
        assert http.patch("/trials", json=trial).status_code == 200
    # 64 counts as not converging now: the down direction stops, the up direction starts.
    assert next_trial(http, job_id)["batch_size"] == 128


def test_concurrent_trial_reported_after_bandit_stage_is_recorded(http: httpx.Client) -> None:
    job_id = register(http, batch_sizes=[32, 64], default_batch_size=32, num_pruning_rounds=1)
    exploration = next_trial(http, job_id)
    concurrent = next_trial(http, job_id)
    assert concurrent["batch_size"] == 32
    report(http, exploration, 1, 0.9)
    second = next_trial(http, job_id)
    assert second["batch_size"] == 64
    report(http, second, 1, 0.9)
    bandit = next_trial(http, job_id)
    job = state(http, job_id)
    assert job["stage"] == "bandit"
    assert bandit["batch_size"] in job["arms"]
    late = report(http, concurrent, 1, 0.9, cost_unit=1.5)
    assert late["converged"] is True
    stats = {b["batch_size"]: b for b in state(http, job_id)["batch_sizes"]}
    assert stats[32]["reports"] == 2


def test_a_job_whose_next_run_is_the_bandits_shows_the_bandit_stage(http: httpx.Client) -> None:
    """Pruning ends with its last exploration's report; the job moves on at its next dispatch.
    Until then its page said "stage pruning" beside "next run: the bandit draws it": the stage
    shown is the next run's (the view, the list and the dashboard read it from one place)."""
    job_id = register(http, batch_sizes=[32, 64], default_batch_size=32, num_pruning_rounds=1)
    for _ in range(2):
        report(http, next_trial(http, job_id), 1, 0.9)
    job = state(http, job_id)
    assert job["next_run"]["kind"] == "bandit"
    assert job["stage"] == "bandit"
    (listed,) = http.get("/api/jobs", params={"prefix": job_id}).json()  # one of the server's
    assert listed["stage"] == "bandit"


def test_zero_pruning_rounds_start_the_bandit_at_once(http: httpx.Client) -> None:
    job_id = register(http, num_pruning_rounds=0, mab_seed=3)
    seen: list[int] = []
    for _ in range(8):
        trial = next_trial(http, job_id)
        seen.append(trial["batch_size"])
        report(http, trial, 1, 0.9)
    # Every arm is explored mab_num_explorations (2) times before sampling starts.
    assert sorted(seen) == [32, 32, 64, 64, 128, 128, 256, 256]
    assert state(http, job_id)["stage"] == "bandit"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"batch_sizes": [32, 32, 64], "default_batch_size": 32}, "batch_sizes"),
        ({"batch_sizes": [0, 64], "default_batch_size": 64}, "batch_sizes"),
        ({"batch_sizes": [-8, 64], "default_batch_size": 64}, "batch_sizes"),
        ({"job_id": "job-" + "x" * 300}, "job_id"),
        ({"job_id_prefix": "p" * 300, "job_id": None}, "job_id_prefix"),
        ({"gpu_model": "g" * 300}, "gpu_model"),
        ({"batch_sizes": [2**40, 64], "default_batch_size": 64}, "batch_sizes"),
    ],
)
def test_bad_job_specs_are_422_and_store_nothing(
    http: httpx.Client, overrides: dict[str, Any], field: str
) -> None:
    body = job_body(unique_id()) | overrides
    response = http.post("/jobs", json=body)
    assert response.status_code == 422, response.text
    assert field in response.json()["message"]
    if body.get("job_id") and len(body["job_id"]) <= 255:
        assert http.get(f"/api/jobs/{body['job_id']}").status_code == 404


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("time", "NaN"),
        ("energy", "Infinity"),
        ("energy", "-Infinity"),
        ("metric", "NaN"),
        ("time", "1e400"),
        ("time", "-1.0"),
        ("energy", "-5"),
    ],
)
def test_non_finite_or_negative_reports_are_422_and_store_nothing(
    http: httpx.Client, field: str, raw: str
) -> None:
    job_id = register(http)
    trial = next_trial(http, job_id)
    values = {"time": "10.0", "energy": "100.0", "metric": "0.1", "current_epoch": "1"}
    values[field] = raw
    body = (
        f'{{"job_id": "{job_id}", "batch_size": {trial["batch_size"]}, '
        f'"trial_number": {trial["trial_number"]}, '
        + ", ".join(f'"{k}": {v}' for k, v in values.items())
        + "}"
    )
    response = http.post("/report", content=body)
    assert response.status_code == 422, response.text
    assert field in response.json()["message"]
    assert raw not in response.text
    stored = state(http, job_id)["trials"][0]
    assert stored["epochs"] is None
    assert stored["status"] == "dispatched"


def test_no_converged_batch_size_is_a_clear_4xx(http: httpx.Client) -> None:
    job_id = register(http, batch_sizes=[32, 64], default_batch_size=32, max_epochs=1)
    for _ in range(2):
        trial = next_trial(http, job_id)
        assert report(http, trial, 1, 0.1)["converged"] is False
    response = http.get("/jobs/batch_size", params={"job_id": job_id})
    assert response.status_code == 409
    assert "No batch size converged" in response.json()["message"]
    assert state(http, job_id)["trial_count"] == 2  # nothing half-written


def test_report_with_wrong_batch_size_or_epochs_going_back(http: httpx.Client) -> None:
    job_id = register(http)
    trial = next_trial(http, job_id)
    report(http, trial, 2, 0.1)
    wrong = http.post(
        "/report",
        json={**trial, "batch_size": 32, "time": 1, "energy": 1, "metric": 0.1, "current_epoch": 3},
    )
    assert wrong.status_code == 400
    backwards = http.post(
        "/report", json={**trial, "time": 1, "energy": 1, "metric": 0.1, "current_epoch": 1}
    )
    assert backwards.status_code == 409
    assert state(http, job_id)["trials"][0]["epochs"] == 2


def test_oversized_and_malformed_bodies(http: httpx.Client) -> None:
    big = http.post("/jobs", content=b"{" + b" " * 2_000_000 + b"}")
    assert big.status_code == 413
    malformed = http.post("/report", content=b'{"job_id": ')
    assert malformed.status_code == 422
    assert "message" in malformed.json()
    not_object = http.post("/jobs", content=b"[1, 2]")
    assert not_object.status_code == 422


def test_missing_query_parameter_is_422(http: httpx.Client) -> None:
    response = http.get("/jobs/batch_size")
    assert response.status_code == 422
    assert "job_id" in response.json()["message"]
    too_long = http.get("/jobs/batch_size", params={"job_id": "x" * 300})
    assert too_long.status_code == 422


def test_foreign_finished_and_wrong_trials(http: httpx.Client) -> None:
    mine, other = register(http), register(http)
    trial = next_trial(http, mine)
    foreign = {**trial, "job_id": other, "time": 1, "energy": 1, "metric": 0.9, "current_epoch": 1}
    assert http.post("/report", json=foreign).status_code == 400
    assert http.patch("/trials", json={**trial, "job_id": other}).status_code == 404
    assert state(http, other)["trials"] == []
    final = report(http, trial, 1, 0.9)
    assert final["converged"] is True
    # Finished: ending it changes nothing, a repeated report gets the stored outcome.
    assert http.patch("/trials", json=trial).status_code == 200
    assert state(http, mine)["trials"][0]["status"] == "reported"
    again = report(http, trial, 3, 0.1)
    assert (again["stop_train"], again["converged"]) == (True, True)
    assert state(http, mine)["trials"][0]["epochs"] == 1
    wrong_size = http.post("/api/trials/heartbeat", json={**trial, "batch_size": 4096})
    assert wrong_size.status_code == 404


@pytest.mark.parametrize(
    "field",
    [
        "max_power",
        "eta_knob",
        "beta_knob",
        "target_metric",
        "mab_prior_mean",
        "mab_prior_precision",
        "prune_cost_ratio",
    ],
)
@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_in_every_job_float_field(
    http: httpx.Client, field: str, raw: str
) -> None:
    job_id = unique_id()
    text = json.dumps(job_body(job_id) | {field: 987654.321}).replace("987654.321", raw)
    response = http.post("/jobs", content=text)
    assert response.status_code == 422, response.text
    assert field in response.json()["message"]
    assert http.get(f"/api/jobs/{job_id}").status_code == 404
