"""Hardware profiles over HTTP: a job registered again on other GPUs keeps its history, runs are
attributed to the GPUs they train on, and costs are shown in the current profile's units. Real
server process on each backend."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from tests.helpers import ServerProcess, job_body, unique_id
from zeus_bso.policy.profiles import MAX_PROFILES, count_by_profile
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store import repository as repo

A100 = {"gpu_model": "NVIDIA A100-SXM4-40GB", "number_of_gpus": 1, "max_power": 300.0}
A100_KEY = "1xNVIDIA A100-SXM4-40GB@300W"
FOUR_A40 = {"gpu_model": "A40", "number_of_gpus": 4, "max_power": 1200.0}
FOUR_A40_KEY = "4xA40@1200W"


def register(http: httpx.Client, job_id: str, gpus: dict[str, Any], expect: int) -> Any:
    response = http.post("/jobs", json=job_body(job_id, **gpus))
    assert response.status_code == expect, response.text
    return response.json()


def ask(http: httpx.Client, job_id: str, **params: Any) -> dict[str, Any]:
    response = http.get("/jobs/batch_size", params={"job_id": job_id, **params})
    assert response.status_code == 200, response.text
    return dict(response.json())


def run(http: httpx.Client, trial: dict[str, Any], epochs: int, power: float = 1.0) -> Any:
    """Report epochs until the run stops; it reaches the target at epoch ``epochs``. An epoch
    takes 10 s and 1000 J times ``power``."""
    for epoch in range(1, 20):
        answer = http.post(
            "/report",
            json={
                **trial,
                "time": 10.0 * epoch,
                "energy": 1000.0 * power * epoch,
                "metric": 0.9 if epoch >= epochs else 0.1,
                "current_epoch": epoch,
            },
        ).json()
        if answer["stop_train"]:
            return answer
    raise AssertionError("the run never stopped")


def view(http: httpx.Client, job_id: str) -> Any:
    return http.get(f"/api/jobs/{job_id}").json()


def test_registering_on_other_gpus_changes_the_profile_and_keeps_the_job(
    http: httpx.Client,
) -> None:
    job_id = unique_id("hw")
    register(http, job_id, A100, 201)
    trial = ask(http, job_id)
    run(http, trial, 3)

    moved = register(http, job_id, FOUR_A40, 200)
    assert {k: moved[k] for k in FOUR_A40} == FOUR_A40  # the current profile now
    state = view(http, job_id)
    assert state["profiles"] == [A100_KEY, FOUR_A40_KEY]
    assert state["trial_count"] == 1  # the history is the job's still
    assert register(http, job_id, A100, 200)["gpu_model"] == A100["gpu_model"]  # and back
    assert view(http, job_id)["profiles"] == [A100_KEY, FOUR_A40_KEY]
    listed = http.get("/api/jobs", params={"prefix": job_id}).json()
    assert listed[0]["profiles"] == [A100_KEY, FOUR_A40_KEY]
    # The dashboard lists them too: on the job's page, and as a count in the job list.
    page = http.get("/dashboard/jobs/" + quote(job_id, safe="")).text
    assert re.search(r'id="profiles">[^<]*' + re.escape(f"{A100_KEY}, {FOUR_A40_KEY}"), page)
    listing = http.get("/dashboard", params={"prefix": job_id}).text
    assert "(+1 other profile)" in listing

    # Anything but the GPUs is still another job.
    other = http.post("/jobs", json=job_body(job_id, **FOUR_A40, eta_knob=0.2))
    assert other.status_code == 409
    assert "eta_knob: 0.5 registered, 0.2 sent" in other.json()["message"]
    assert "may change only its GPUs" in other.json()["message"]
    assert view(http, job_id)["job"]["gpu_model"] == A100["gpu_model"]  # nothing written


def test_runs_belong_to_the_gpus_they_name_or_else_to_the_last_registered(
    http: httpx.Client,
) -> None:
    job_id = unique_id("hw")
    register(http, job_id, A100, 201)
    plain = ask(http, job_id)
    named = ask(http, job_id, **FOUR_A40)  # a run on other GPUs, never registered there
    profiles = {t["trial_number"]: t["profile"] for t in view(http, job_id)["trials"]}
    assert profiles == {plain["trial_number"]: A100_KEY, named["trial_number"]: FOUR_A40_KEY}
    assert view(http, job_id)["profiles"] == [A100_KEY, FOUR_A40_KEY]
    assert view(http, job_id)["job"]["gpu_model"] == A100["gpu_model"]  # still the current

    partial = http.get(
        "/jobs/batch_size", params={"job_id": job_id, "gpu_model": "A40", "max_power": 300}
    )
    assert partial.status_code == 422
    assert "number_of_gpus" in partial.json()["message"]
    bad = http.get("/jobs/batch_size", params={"job_id": job_id, **FOUR_A40, "max_power": -1})
    assert bad.status_code == 422
    huge = http.get(
        "/jobs/batch_size", params={"job_id": job_id, **FOUR_A40, "number_of_gpus": 2**100}
    )
    assert huge.status_code == 422
    assert "number_of_gpus" in huge.json()["message"]
    assert view(http, job_id)["trial_count"] == 2  # none started a trial


def test_costs_convert_between_profiles(http: httpx.Client) -> None:
    # One batch size; on the A100 an epoch costs c, on four A40s (4 x the power, the same time)
    # 4c. A run on the A40s that needs the same 3 epochs converges: judged in A100 units it would
    # be stopped at epoch 2 (2 x 4c > beta 2 x 3c).
    job_id = unique_id("hw")
    http.post("/jobs", json=job_body(job_id, **A100, batch_sizes=[64], default_batch_size=64))
    for _ in range(2):
        assert run(http, ask(http, job_id), 3)["converged"] is True
    a100_best = view(http, job_id)["best_cost"]
    assert a100_best == pytest.approx(3 * (0.5 * 1000.0 + 0.5 * 300.0 * 10.0))

    body = job_body(job_id, **FOUR_A40, batch_sizes=[64], default_batch_size=64)
    assert http.post("/jobs", json=body).status_code == 200
    answer = run(http, ask(http, job_id), 3, power=4.0)  # 4 x the energy; max_power 4 x too
    assert answer["converged"] is True
    assert answer["cost"] == pytest.approx(4 * a100_best)
    state = view(http, job_id)
    # Shown in the current profile's units: everything it learned on the A100, times 4.
    assert state["best_cost"] == pytest.approx(4 * a100_best)
    (sizes,) = state["batch_sizes"]
    assert sizes["reports"] == 3
    assert sizes["mean_cost"] == pytest.approx(4 * a100_best)
    # Each trial's own cost, in its own profile's units (newest first).
    assert [t["cost"] for t in state["trials"]] == pytest.approx([4 * a100_best] + 2 * [a100_best])


def test_a_batch_size_that_fails_on_the_new_gpus_fails_as_on_any(http: httpx.Client) -> None:
    job_id = unique_id("hw")
    register(http, job_id, A100, 201)
    run(http, ask(http, job_id), 3)
    before = view(http, job_id)["batch_sizes"]
    register(http, job_id, FOUR_A40, 200)
    trial = ask(http, job_id)
    assert http.patch("/trials", json=trial).status_code == 200  # out of memory: ended
    state = view(http, job_id)
    assert {t["trial_number"]: t["status"] for t in state["trials"]}[trial["trial_number"]] == (
        "failed"
    )
    assert [s["reports"] for s in state["batch_sizes"]] == [s["reports"] for s in before]
    assert ask(http, job_id)["trial_number"] == trial["trial_number"] + 1


def test_simultaneous_registrations_on_new_gpus_lose_no_profile(server: ServerProcess) -> None:
    job_id = unique_id("hw")
    with server.client() as http:
        register(http, job_id, A100, 201)
    gpus = [FOUR_A40, {**FOUR_A40, "number_of_gpus": 2, "max_power": 600.0}] * 4
    barrier = threading.Barrier(len(gpus))

    def again(gpu: dict[str, Any]) -> int:
        with server.client() as http:
            barrier.wait()
            return http.post("/jobs", json=job_body(job_id, **gpu)).status_code

    with ThreadPoolExecutor(len(gpus)) as pool:
        codes = list(pool.map(again, gpus))
    assert codes == [200] * len(gpus)
    with server.client() as http:
        profiles = view(http, job_id)["profiles"]
    assert profiles[0] == A100_KEY
    assert sorted(profiles[1:]) == ["2xA40@600W", FOUR_A40_KEY]


def test_a_job_has_at_most_max_profiles_and_one_more_is_refused(http: httpx.Client) -> None:
    job_id = unique_id("hw")
    register(http, job_id, A100, 201)
    for watts in range(1, MAX_PROFILES):  # a client whose max_power changes with every run
        register(http, job_id, {**A100, "max_power": 300.0 + watts}, 200)
    refused = http.post("/jobs", json=job_body(job_id, **{**A100, "max_power": 999.0}))
    assert refused.status_code == 409
    assert "hardware profiles already" in refused.json()["message"]
    asked = http.get("/jobs/batch_size", params={"job_id": job_id, **A100, "max_power": 998.0})
    assert asked.status_code == 409
    state = view(http, job_id)
    assert len(state["profiles"]) == MAX_PROFILES  # nothing written
    assert state["job"]["max_power"] == 300.0 + MAX_PROFILES - 1
    assert state["trial_count"] == 0
    assert register(http, job_id, A100, 200)["max_power"] == 300.0  # known ones still are


def test_a_near_zero_reading_on_new_gpus_stores_only_finite_numbers(http: httpx.Client) -> None:
    # The first run on the new GPUs measures an epoch at 1e-300 of the old GPUs' cost; a
    # later run there reports a real cost. Converted by that ratio it was inf: stored as
    # Infinity/NaN on SQLite, a 500 on every retry on PostgreSQL.
    job_id = unique_id("tiny")
    register(http, job_id, A100 | {"batch_sizes": [64], "default_batch_size": 64}, 201)
    run(http, ask(http, job_id), epochs=1)
    register(http, job_id, FOUR_A40 | {"batch_sizes": [64], "default_batch_size": 64}, 200)
    for power in (1e-300, 1.0):
        trial = ask(http, job_id)
        answer = http.post(
            "/report",
            json=trial
            | {"time": 10.0 * power, "energy": 1000.0 * power, "metric": 0.9, "current_epoch": 1},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["stop_train"]
    size = view(http, job_id)["batch_sizes"][0]
    assert size["reports"] == 3
    assert size["converged"] == 3
    assert size["mean_cost"] is not None  # a non-finite mean is shown as null
    assert size["mean_cost"] > 0


def test_a_run_resumed_by_its_run_key_on_other_gpus_goes_on_there(http: httpx.Client) -> None:
    """Restarted on other GPUs, a run continues its trial: the job learns those GPUs, and the
    run is priced at their power and ends on their profile."""
    job_id = unique_id("moved")
    register(http, job_id, A100, 201)
    first = ask(http, job_id, run_key="run-1", **A100)
    report = {**first, "time": 10.0, "energy": 1000.0, "metric": 0.1, "current_epoch": 1}
    assert http.post("/report", json=report).status_code == 200
    again = ask(http, job_id, run_key="run-1", **FOUR_A40)
    assert again["resumed"] is True
    assert again["trial_number"] == first["trial_number"]
    assert view(http, job_id)["profiles"] == [A100_KEY, FOUR_A40_KEY]
    final = {**report, "time": 20.0, "energy": 2000.0, "metric": 0.9, "current_epoch": 2}
    answer = http.post("/report", json=final).json()
    eta = 0.5  # job_body's default eta_knob
    assert answer["cost"] == pytest.approx(eta * 2000.0 + (1 - eta) * FOUR_A40["max_power"] * 20)
    (trial,) = view(http, job_id)["trials"]
    assert trial["profile"] == FOUR_A40_KEY


def test_a_profile_with_the_longest_model_name_is_stored_on_every_backend(
    http: httpx.Client,
) -> None:
    """Its name would be longer than an id (a trial stores it): shortened, and told apart."""
    job_id = unique_id("longname")
    register(http, job_id, A100, 201)
    longest = {"gpu_model": "G" * 255, "number_of_gpus": 2147483647, "max_power": 5e-324}
    other = longest | {"gpu_model": "G" * 254 + "H"}
    first = ask(http, job_id, run_key="run-long", **longest)
    again = ask(http, job_id, run_key="run-long", **other)  # resumed, moved to the other
    assert again["trial_number"] == first["trial_number"]
    profiles = view(http, job_id)["profiles"]
    assert len(profiles) == 3
    assert all(len(name) <= 255 for name in profiles)
    (trial,) = view(http, job_id)["trials"]
    assert trial["profile"] == profiles[2]


def kept_and_recounted(server: ServerProcess, job_id: str) -> tuple[Any, Any]:
    """The job's counts by profile as the server kept them (on its row) and as its trials give
    them counted afresh."""
    engine = sa.create_engine(to_engine_url(server.db_url))
    try:
        with engine.connect() as conn:
            stored = repo.get_job(conn, job_id)
            assert stored is not None
            state = stored.state
            trials = repo.trials_of(conn, job_id)
    finally:
        engine.dispose()
    if not state.profiles:
        return state.by_profile, None
    return state.by_profile, count_by_profile(trials, next(iter(state.profiles)))


def test_a_two_profile_job_keeps_its_counts_by_profile_as_its_trials_give_them(
    server: ServerProcess, http: httpx.Client
) -> None:
    """Every request of a job on two profiles reads its counts by profile from the job row
    instead of all its trials: they are kept with every dispatch, report and move to other GPUs,
    and stay what a count of the trials gives."""
    job_id = unique_id("kept")
    register(http, job_id, A100, 201)
    run(http, ask(http, job_id), epochs=2)
    assert kept_and_recounted(server, job_id)[0] is None  # one profile: nothing kept
    register(http, job_id, FOUR_A40, 200)
    for number in range(8):
        gpus = A100 if number % 2 else FOUR_A40
        run(http, ask(http, job_id, **gpus), epochs=2 + number % 3, power=1.5 if number % 2 else 1)
    # A run that reported on the A40s and goes on, restarted, on the A100.
    moving = ask(http, job_id, run_key="moving", **FOUR_A40)
    report = {**moving, "time": 10.0, "energy": 900.0, "metric": 0.1, "current_epoch": 1}
    assert http.post("/report", json=report).status_code == 200
    assert ask(http, job_id, run_key="moving", **A100)["resumed"] is True
    kept, recounted = kept_and_recounted(server, job_id)
    assert kept is not None
    assert kept.bandit_trials == recounted.bandit_trials
    assert kept.epochs.keys() == recounted.epochs.keys()
    for key, sums in kept.epochs.items():
        again = recounted.epochs[key]
        assert sums.trials == again.trials, key
        assert (sums.energy, sums.time) == pytest.approx((again.energy, again.time)), key
    moved_epoch = (A100_KEY, moving["batch_size"])
    assert kept.epochs[moved_epoch].trials >= 1  # the moved run's epoch counts on the A100
