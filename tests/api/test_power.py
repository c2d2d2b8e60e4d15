"""Power limits over HTTP, on each backend: a run that opts in (``power_limits=true``, naming
its GPUs) profiles a batch size's limits once per hardware profile
(``POST /api/trials/power_profile``), and every later run of that size there is told the limit
whose epoch costs least at the job's ``eta_knob``; never with ``eta_knob`` 0 or when the job
turned profiling off. Upstream clients see none of it. Real server process."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import dispatch, job_body, trial_id, unique_id
from zeus_bso.policy import zeus_cost

A100 = {"gpu_model": "NVIDIA A100-SXM4-40GB", "number_of_gpus": 1, "max_power": 300.0}
A100_KEY = "1xNVIDIA A100-SXM4-40GB@300W"
H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "number_of_gpus": 1, "max_power": 700.0}

# An epoch at each limit: lower limits are slower and use less energy.
MEASURED = [
    {"power_limit": 150.0, "time_per_epoch": 20.0, "energy_per_epoch": 2400.0},
    {"power_limit": 200.0, "time_per_epoch": 12.0, "energy_per_epoch": 2100.0},
    {"power_limit": 300.0, "time_per_epoch": 10.0, "energy_per_epoch": 2800.0},
]


def best(eta: float, max_power: float) -> float:
    """The limit the job's cost makes cheapest, worked out here from the cost's definition."""
    costs = {
        m["power_limit"]: zeus_cost(m["energy_per_epoch"], m["time_per_epoch"], eta, max_power)
        for m in MEASURED
    }
    return min(costs, key=lambda limit: (costs[limit], -limit))


def register(http: httpx.Client, job_id: str, **options: Any) -> None:
    body = job_body(job_id, batch_sizes=[128], default_batch_size=128, **options)
    assert http.post("/jobs", json=body).status_code == 201


def release(http: httpx.Client, trial: dict[str, Any]) -> None:
    assert http.post("/api/trials/release", json=trial_id(trial)).is_success


@pytest.mark.parametrize("eta", [0.5, 1.0])
def test_a_batch_size_is_profiled_once_per_hardware_profile(http: httpx.Client, eta: float) -> None:
    job_id = unique_id("power")
    register(http, job_id, eta_knob=eta)
    upstream = dispatch(http, job_id)
    assert set(upstream) == {"job_id", "batch_size", "trial_number"}
    release(http, upstream)
    not_opted = dispatch(http, job_id, **A100)
    assert {"power_profiling", "power_limit"}.isdisjoint(not_opted)
    release(http, not_opted)

    first = dispatch(http, job_id, power_limits="true", **A100)
    twin = dispatch(http, job_id, power_limits="true", **A100)  # before the first sent it
    assert first["power_profiling"] is twin["power_profiling"] is True
    assert "power_limit" not in first
    answer = http.post(
        "/api/trials/power_profile", json={**trial_id(first), "measurements": MEASURED[::-1]}
    )
    assert answer.status_code == 200, answer.text
    chosen = answer.json()
    assert chosen["power_limit"] == best(eta, 300.0)
    assert (chosen["profile"], chosen["batch_size"]) == (A100_KEY, 128)
    assert [m["power_limit"] for m in chosen["measurements"]] == [150.0, 200.0, 300.0]
    release(http, first)

    # A second profile of the same size there changes nothing: the first stays.
    other = [{**m, "energy_per_epoch": 1.0} if m["power_limit"] == 300.0 else m for m in MEASURED]
    again = http.post("/api/trials/power_profile", json={**trial_id(twin), "measurements": other})
    assert again.json()["power_limit"] == best(eta, 300.0)
    assert again.json()["trial_number"] == first["trial_number"]
    release(http, twin)
    later = dispatch(http, job_id, power_limits="true", **A100)
    assert later["power_limit"] == best(eta, 300.0)
    assert later["power_profiling"] is False  # said, to a run that opted in
    release(http, later)

    # Other GPUs profile anew, and their maximum power prices their time.
    h100 = dispatch(http, job_id, power_limits="true", **H100)
    assert h100["power_profiling"] is True
    answer = http.post(
        "/api/trials/power_profile", json={**trial_id(h100), "measurements": MEASURED}
    )
    assert answer.json()["power_limit"] == best(eta, 700.0)

    view = http.get(f"/api/jobs/{job_id}").json()
    assert [(p["profile"], p["power_limit"]) for p in view["power_profiles"]] == sorted(
        [(A100_KEY, best(eta, 300.0)), ("1xNVIDIA H100 80GB HBM3@700W", best(eta, 700.0))]
    )
    page = http.get(f"/dashboard/jobs/{job_id}")
    assert 'id="power-limits"' in page.text
    assert f"trains at <strong>{best(eta, 300.0):g} W" in page.text


def test_the_cost_chooses_the_limit() -> None:
    """The figures above make energy and time disagree, so each eta tests a different limit."""
    assert best(1.0, 300.0) == 200.0  # least energy
    assert best(0.5, 300.0) == 200.0
    assert best(0.5, 700.0) == 300.0  # dear time: the fastest
    assert best(0.0, 300.0) == 300.0


@pytest.mark.parametrize(("slowdown", "chosen"), [(1.1, 300.0), (1.2, 200.0), (2.0, 200.0)])
def test_a_slowdown_bound_leaves_out_the_slower_limits(
    http: httpx.Client, slowdown: float, chosen: float
) -> None:
    """At eta 1, 200 W costs least, and its epoch is 20% slower than at 300 W (150 W: 100%):
    a bound of 1.1 keeps only 300 W, one of 1.2 admits 200 W. The profile's answer, later
    dispatches and the job view say the same limit."""
    job_id = unique_id("slowpower")
    register(http, job_id, eta_knob=1.0, power_max_slowdown=slowdown)
    assert http.get(f"/api/jobs/{job_id}").json()["job"]["power_max_slowdown"] == slowdown
    first = dispatch(http, job_id, power_limits="true", **A100)
    answer = http.post(
        "/api/trials/power_profile", json={**trial_id(first), "measurements": MEASURED}
    )
    assert answer.json()["power_limit"] == chosen
    release(http, first)
    assert dispatch(http, job_id, power_limits="true", **A100)["power_limit"] == chosen
    (profile,) = http.get(f"/api/jobs/{job_id}").json()["power_profiles"]
    assert profile["power_limit"] == chosen
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert f"takes at most {slowdown:g}\u00d7 the highest limit's" in page
    assert f"trains at <strong>{chosen:g} W" in page


def test_registering_again_with_other_power_settings_changes_them_and_keeps_the_job(
    http: httpx.Client,
) -> None:
    """A bound set later (or profiling turned off) is the same job: its profiles and trials
    stay, and the limit its runs are told follows the new bound at once. A client that does
    not send the settings changes nothing; any other setting is still another job."""
    job_id = unique_id("repower")
    register(http, job_id, eta_knob=1.0)
    first = dispatch(http, job_id, power_limits="true", **A100)
    http.post("/api/trials/power_profile", json={**trial_id(first), "measurements": MEASURED})
    release(http, first)
    assert dispatch(http, job_id, power_limits="true", **A100)["power_limit"] == 200.0

    body = job_body(job_id, batch_sizes=[128], default_batch_size=128, eta_knob=1.0)
    again = http.post("/jobs", json={**body, "power_max_slowdown": 1.1})
    assert again.status_code == 200, again.text
    assert again.json()["power_max_slowdown"] == 1.1
    state = http.get(f"/api/jobs/{job_id}").json()
    assert state["job"]["power_max_slowdown"] == 1.1
    assert state["trial_count"] == 2  # the history is the job's still
    assert [p["power_limit"] for p in state["power_profiles"]] == [300.0]  # 200 W: 20% slower
    assert dispatch(http, job_id, power_limits="true", **A100)["power_limit"] == 300.0

    assert http.post("/jobs", json=body).status_code == 200  # the settings not sent: kept
    assert http.get(f"/api/jobs/{job_id}").json()["job"]["power_max_slowdown"] == 1.1
    off = http.post("/jobs", json={**body, "power_profiling": False, "power_max_slowdown": None})
    assert off.status_code == 200, off.text
    assert "power_limit" not in dispatch(http, job_id, power_limits="true", **A100)
    other = http.post("/jobs", json={**body, "eta_knob": 0.5})
    assert other.status_code == 409
    assert "power_profiling, power_max_slowdown" in other.json()["message"]


@pytest.mark.parametrize("slowdown", [0.9, 0, -1, "fast", 101])
def test_a_slowdown_bound_below_1_is_refused(http: httpx.Client, slowdown: Any) -> None:
    job_id = unique_id("badslow")
    body = job_body(job_id, batch_sizes=[128], default_batch_size=128)
    refused = http.post("/jobs", json={**body, "power_max_slowdown": slowdown})
    assert refused.status_code == 422
    assert "power_max_slowdown" in refused.text
    assert http.get(f"/api/jobs/{job_id}").status_code == 404


@pytest.mark.parametrize("options", [{"eta_knob": 0.0}, {"power_profiling": False}])
def test_no_profiling_at_eta_0_or_when_the_job_says_so(
    http: httpx.Client, options: dict[str, Any]
) -> None:
    job_id = unique_id("nopower")
    register(http, job_id, **options)
    trial = dispatch(http, job_id, power_limits="true", **A100)
    assert "power_limit" not in trial
    assert trial["power_profiling"] is False  # said: this server chooses, and does not profile
    refused = http.post(
        "/api/trials/power_profile", json={**trial_id(trial), "measurements": MEASURED}
    )
    assert refused.status_code == 409
    assert "does not profile power limits" in refused.text
    assert http.get(f"/api/jobs/{job_id}").json()["power_profiles"] == []


def test_bad_profiles_are_refused_and_store_nothing(http: httpx.Client) -> None:
    job_id = unique_id("badpower")
    register(http, job_id)
    trial = dispatch(http, job_id, power_limits="true", **A100)
    path = "/api/trials/power_profile"
    for measurements in ([], [MEASURED[0], MEASURED[0]], [{**MEASURED[0], "time_per_epoch": 0}]):
        answer = http.post(path, json={**trial_id(trial), "measurements": measurements})
        assert answer.status_code == 422, answer.text
    missing = http.post(
        path, json={**trial_id(trial), "trial_number": 99, "measurements": MEASURED}
    )
    assert missing.status_code == 404
    assert http.get(f"/api/jobs/{job_id}").json()["power_profiles"] == []
    # Deleting the job deletes its profiles: the id registered again profiles anew.
    answer = http.post(path, json={**trial_id(trial), "measurements": MEASURED})
    assert answer.status_code == 200
    assert http.delete("/jobs", params={"job_id": job_id}).status_code == 200
    register(http, job_id)
    assert dispatch(http, job_id, power_limits="true", **A100)["power_profiling"] is True


def profile_once(http: httpx.Client, job_id: str, gpus: dict[str, Any]) -> None:
    """A run on ``gpus`` that profiles the job's batch size, then is released."""
    trial = dispatch(http, job_id, power_limits="true", **gpus)
    assert trial["power_profiling"] is True
    answer = http.post(
        "/api/trials/power_profile", json={**trial_id(trial), "measurements": MEASURED}
    )
    assert answer.status_code == 200, answer.text
    release(http, trial)


def test_forgotten_profiles_are_measured_again_on_their_gpus_alone(http: httpx.Client) -> None:
    """``DELETE /api/jobs/{id}/power_profiles``: by hardware profile and batch size, or all;
    the next run there profiles again, other GPUs keep their limit."""
    job_id = unique_id("reprofile")
    register(http, job_id, eta_knob=1.0)
    profile_once(http, job_id, A100)
    profile_once(http, job_id, H100)
    path = f"/api/jobs/{job_id}/power_profiles"

    none = http.delete(path, params={"profile": A100_KEY, "batch_size": 256})
    assert none.json() == {"job_id": job_id, "forgotten": []}  # no such batch size there
    one = http.delete(path, params={"profile": A100_KEY, "batch_size": 128})
    assert one.status_code == 200, one.text
    assert one.json()["forgotten"] == [{"profile": A100_KEY, "batch_size": 128}]
    view = http.get(f"/api/jobs/{job_id}").json()
    assert [p["profile"] for p in view["power_profiles"]] == ["1xNVIDIA H100 80GB HBM3@700W"]
    again = dispatch(http, job_id, power_limits="true", **A100)
    assert again["power_profiling"] is True  # measured anew
    release(http, again)
    kept = dispatch(http, job_id, power_limits="true", **H100)
    assert kept["power_limit"] == best(1.0, 700.0)
    release(http, kept)

    every = http.delete(path)
    assert every.json()["forgotten"] == [
        {"profile": "1xNVIDIA H100 80GB HBM3@700W", "batch_size": 128}
    ]
    assert http.get(f"/api/jobs/{job_id}").json()["power_profiles"] == []


@pytest.mark.parametrize(
    ("job", "params", "status"),
    [
        ("nosuchjob", {}, 404),
        (None, {"batch_size": 0}, 422),
        (None, {"batch_size": 2**63}, 422),  # too large for the database: it answered 500
        (None, {"profile": ""}, 422),
    ],
)
def test_forgetting_profiles_of_no_job_or_with_bad_filters_is_refused(
    http: httpx.Client, job: str | None, params: dict[str, Any], status: int
) -> None:
    job_id = job or unique_id("reprofilebad")
    if job is None:
        register(http, job_id, eta_knob=1.0)
        profile_once(http, job_id, A100)
    answer = http.delete(f"/api/jobs/{job_id}/power_profiles", params=params)
    assert answer.status_code == status, answer.text
    assert answer.json()["message"]  # what to change
    if job is None:  # nothing lost
        assert len(http.get(f"/api/jobs/{job_id}").json()["power_profiles"]) == 1


def test_a_power_profile_is_taken_only_from_its_run_while_it_runs(http: httpx.Client) -> None:
    """Any limit from any trial was stored, the first for good: a profile now comes from a
    trial still running, once (the same again, a client's retry, is answered alike), at limits
    within the GPUs' range that the run sends and no higher than the trial's hardware profile's
    power; nothing refused is stored."""
    job_id = unique_id("powercheck")
    register(http, job_id, eta_knob=1.0)
    trial = dispatch(http, job_id, power_limits="true", **A100)
    url = "/api/trials/power_profile"

    outside = {**trial_id(trial), "measurements": MEASURED, "limit_range_w": [175.0, 300.0]}
    refused = http.post(url, json=outside)
    assert refused.status_code == 422, refused.text
    assert "outside the GPUs' range, 175-300 W" in refused.json()["message"]
    too_high = [*MEASURED, {"power_limit": 1e6, "time_per_epoch": 1.0, "energy_per_epoch": 1.0}]
    refused = http.post(url, json={**trial_id(trial), "measurements": too_high})
    assert refused.status_code == 409, refused.text
    assert "above the 300 W of the trial's hardware profile" in refused.json()["message"]
    assert http.get(f"/api/jobs/{job_id}").json()["power_profiles"] == []

    body = {**trial_id(trial), "measurements": MEASURED, "limit_range_w": [150.0, 300.0]}
    assert http.post(url, json=body).status_code == 200
    assert http.post(url, json=body).json()["power_limit"] == best(1.0, 300.0)  # a retry
    other = [{**m, "energy_per_epoch": 1.0} for m in MEASURED]
    refused = http.post(url, json={**trial_id(trial), "measurements": other})
    assert refused.status_code == 409
    assert "sent its power profile already" in refused.json()["message"]

    report = {**trial_id(trial), "time": 10.0, "energy": 2000.0, "metric": 0.99, "current_epoch": 1}
    assert http.post("/report", json=report).json()["stop_train"]  # ended: it converged
    refused = http.post(url, json={**trial_id(trial), "measurements": MEASURED})
    assert refused.status_code == 409
    assert "ended (reported)" in refused.json()["message"]

    # Only a run told to profile sends one: not a run that did not opt in, nor one told the
    # limit (its batch size's profile was known).
    other_job = unique_id("powerunasked")
    register(http, other_job, eta_knob=1.0)
    not_opted = dispatch(http, other_job, **A100)
    profile_once(http, other_job, A100)
    told_the_limit = dispatch(http, other_job, power_limits="true", **A100)
    assert told_the_limit["power_limit"] == best(1.0, 300.0)
    for unasked in (not_opted, told_the_limit):
        refused = http.post(url, json={**trial_id(unasked), "measurements": MEASURED})
        assert refused.status_code == 409, refused.text
        assert "was not told to profile power limits" in refused.json()["message"]
    (kept,) = http.get(f"/api/jobs/{other_job}").json()["power_profiles"]
    assert kept["trial_number"] == not_opted["trial_number"] + 1


def test_every_dispatch_answer_declares_the_servers_extensions(http: httpx.Client) -> None:
    """A client told this server from upstream's by the fields it saw (``power_profiling`` in
    an answer to a run that opted in): every dispatch answer now declares what the server
    speaks in a header, its body upstream's as before, and the client reads the declaration."""
    from zeus_bso.client import JobConversation, ServerClient
    from zeus_bso.spec import (
        EXTENSIONS_HEADER,
        Extension,
        JobSpecFromClient,
        declared_extensions,
    )

    job_id = unique_id("declared")
    register(http, job_id)
    every = {extension.value for extension in Extension}
    for params in ({}, A100, {**A100, "power_limits": "true"}):
        answer = http.get("/jobs/batch_size", params={"job_id": job_id, **params})
        assert answer.status_code == 200, answer.text
        assert declared_extensions(answer.headers.get(EXTENSIONS_HEADER)) == every
        if not params:
            assert set(answer.json()) == {"job_id", "batch_size", "trial_number"}
        release(http, answer.json())

    body = job_body(job_id, batch_sizes=[128], default_batch_size=128)
    spec = JobSpecFromClient(**{**body, **A100})
    with ServerClient(str(http.base_url)) as client:
        link = JobConversation(
            client,
            spec,
            run_key=None,
            on_server_unavailable="raise",
            id_from_settings=False,
            heartbeat_seconds=0,
        )
        dispatched = link.dispatch(accumulate=False, power_limits=False, deliver=False)
        assert dispatched is not None
        assert Extension.POWER_LIMITS in client.extensions
        assert link.server_chooses_power  # declared, though this run did not opt in
        release(http, dispatched.trial.model_dump())
