"""What the read API shows is what the policy decides with."""

from __future__ import annotations

import html
import math
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from tests.helpers import (
    ServerProcess,
    dispatch,
    job_body,
    jobs_show,
    run_one,
    run_recurrences,
    trial_id,
    unique_id,
)
from zeus_bso import policy
from zeus_bso.policy import CostStats
from zeus_bso.spec import CreatedJob


def test_the_posteriors_shown_are_the_ones_the_bandit_samples_from(http: httpx.Client) -> None:
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64, 128], default_batch_size=64)
    body |= {"num_pruning_rounds": 0, "mab_num_explorations": 1, "mab_seed": 3}
    assert http.post("/jobs", json=body).status_code == 201
    for i in range(4):  # one run of each arm, then one more: two arms have a single run
        trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
        time_s, energy = 10.0 + i, 1000.0 + 50.0 * trial["batch_size"] + 30.0 * i
        report = trial | {"time": time_s, "energy": energy, "metric": 0.9, "current_epoch": 1}
        answer = http.post("/report", json=report).json()
        assert answer["stop_train"]
        # The report's answer carries the cost the server stored (eta 0.5, max_power 300 W).
        assert answer["cost"] == pytest.approx(0.5 * energy + 0.5 * 300.0 * time_s)
        assert http.patch("/trials", json=trial).status_code == 200

    state = http.get(f"/api/jobs/{job_id}").json()
    costs: dict[int, list[float]] = defaultdict(list)
    for trial in sorted(state["trials"], key=lambda t: t["trial_number"]):
        costs[trial["batch_size"]].append(trial["cost"])
    arms = tuple(state["arms"])
    config = CreatedJob.model_validate(state["job"])
    assert config.bandit_noise == "pooled"
    expected = policy.arm_posteriors(config, arms, {b: CostStats.of(c) for b, c in costs.items()})
    shown = {view["batch_size"]: view for view in state["batch_sizes"]}
    for arm in arms:
        assert shown[arm]["posterior_mean_reward"] == pytest.approx(expected[arm].mean)
        assert shown[arm]["posterior_std"] == pytest.approx(expected[arm].std)
    single = [arm for arm in arms if len(costs[arm]) == 1]
    assert len(single) >= 2
    # The pooled noise model gives a single run its share of the noise, not certainty (± 0).
    assert all(
        shown[arm]["posterior_std"] > 0 and math.isfinite(shown[arm]["posterior_std"])
        for arm in single
    )


def _ran(http: httpx.Client, job_id: str) -> int:
    """One run that converges at its first report, its cost rising with its batch size."""
    trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    energy = 1000.0 + 50.0 * trial["batch_size"]
    report = trial | {"time": 10.0, "energy": energy, "metric": 0.9, "current_epoch": 1}
    assert http.post("/report", json=report).json()["converged"]
    assert http.patch("/trials", json=trial).status_code == 200
    return int(trial["batch_size"])


def test_the_next_run_names_its_arm_where_the_bandit_no_longer_draws(http: httpx.Client) -> None:
    """Before every arm ran, the bandit draws among them; once it exploits (after
    ``bandit_exploit_after`` bandit trials: 0 here) the view names the arm it settled on, and
    the next run gets it. On new GPUs the probe's arm is named too (not "draws")."""
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"num_pruning_rounds": 0, "mab_num_explorations": 1, "bandit_exploit_after": 0}
    assert http.post("/jobs", json=body).status_code == 201
    upcoming = http.get(f"/api/jobs/{job_id}").json()["next_run"]
    assert upcoming == {
        "batch_size": None,
        "kind": "bandit",
        "arms": [32, 64],
        "refused": False,
        "why": "the thompson bandit draws it among 32, 64",
    }
    assert sorted(_ran(http, job_id) for _ in range(2)) == [32, 64]  # each arm once
    upcoming = http.get(f"/api/jobs/{job_id}").json()["next_run"]
    assert (upcoming["batch_size"], upcoming["kind"]) == (32, "bandit")
    assert upcoming["why"] == "the thompson bandit settled on it among 32, 64: it no longer draws"
    assert _ran(http, job_id) == 32

    a40 = {"gpu_model": "A40", "number_of_gpus": 4, "max_power": 1200.0}
    assert http.post("/jobs", json=body | a40).status_code == 200
    first = _ran(http, job_id)  # the first run on the A40s: the arm cheapest so far
    upcoming = http.get(f"/api/jobs/{job_id}").json()["next_run"]
    probe = upcoming["batch_size"]
    assert probe == 64, upcoming
    assert probe != first
    assert upcoming["why"].startswith("on GPUs new to the job (4xA40@1200W), a second arm")
    assert _ran(http, job_id) == probe


def test_between_pruning_and_the_next_run_the_view_shows_the_arms_that_run_draws_from(
    http: httpx.Client,
) -> None:
    """Pruning ends with its last exploration's report; the job takes its arms at the next
    dispatch, which may be a day later for a daily job. Meanwhile its stage is "bandit", and its
    arms, their posteriors and the recommendation are the ones that dispatch uses: the same as
    the view once it has been made (a run in flight changes no statistics)."""
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64, 128], default_batch_size=64)
    body |= {"num_pruning_rounds": 1, "mab_seed": 7}
    assert http.post("/jobs", json=body).status_code == 201
    ran = [_ran(http, job_id) for _ in range(3)]
    assert sorted(ran) == [32, 64, 128]  # the one round explored every size

    before = http.get(f"/api/jobs/{job_id}").json()
    assert before["stage"] == "bandit"
    assert before["next_run"]["kind"] == "bandit"
    assert before["arms"] == before["next_run"]["arms"]
    assert before["recommended"]["basis"] == "posterior"
    arms = set(before["arms"])
    assert arms
    for row in before["batch_sizes"]:
        assert row["is_arm"] is (row["batch_size"] in arms)
        assert (row["posterior_mean_reward"] is not None) is (row["batch_size"] in arms)
    listed = http.get("/api/jobs", params={"prefix": job_id}).json()
    (summary,) = [j for j in listed if j["job_id"] == job_id]
    assert summary["recommended"] == before["recommended"]

    trial = dispatch(http, job_id)  # the bandit stage begins: its arms are the job's now
    assert trial["batch_size"] in arms
    after = http.get(f"/api/jobs/{job_id}").json()
    for key in ("stage", "arms", "recommended", "batch_sizes"):
        assert after[key] == before[key], key


def test_the_recommendation_and_savings_shown_follow_from_the_trials(http: httpx.Client) -> None:
    """The recommended batch size is the arm of lowest posterior mean cost; the savings are the
    default's mean energy and time per reported run times the runs, less every ended trial's
    energy and time (a failed trial's included)."""
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64, 128], default_batch_size=64)
    body |= {"num_pruning_rounds": 0, "mab_num_explorations": 2, "mab_seed": 5}
    assert http.post("/jobs", json=body).status_code == 201
    assert http.get(f"/api/jobs/{job_id}").json()["savings"] is None
    crashed = False
    for i in range(9):
        trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
        size = trial["batch_size"]
        time_s, energy = 100.0 - size / 4 + i, 9000.0 - 20.0 * size + 7.0 * i
        if size == 128 and not crashed:  # one run crashes after an unconverged epoch
            crashed = True
            report = trial | {"time": 5.0, "energy": 60.0, "metric": 0.1, "current_epoch": 1}
            assert not http.post("/report", json=report).json()["stop_train"]
            assert http.patch("/trials", json=trial).status_code == 200
            continue
        report = trial | {"time": time_s, "energy": energy, "metric": 0.9, "current_epoch": 1}
        assert http.post("/report", json=report).json()["stop_train"]
        assert http.patch("/trials", json=trial).status_code == 200

    state = http.get(f"/api/jobs/{job_id}").json()
    config = CreatedJob.model_validate(state["job"])
    trials = state["trials"]
    assert {t["status"] for t in trials} == {"reported", "failed"}
    reported = [t for t in trials if t["status"] == "reported"]
    defaults = [t for t in reported if t["batch_size"] == 64]
    assert defaults
    assert len(defaults) < len(reported)
    base_energy = len(reported) * sum(t["energy"] for t in defaults) / len(defaults)
    base_time = len(reported) * sum(t["time"] for t in defaults) / len(defaults)
    energy = base_energy - sum(t["energy"] for t in trials)
    time_saved = base_time - sum(t["time"] for t in trials)
    savings = state["savings"]
    assert savings["runs"] == len(reported)
    assert savings["default_runs"] == len(defaults)
    assert savings["energy"] == pytest.approx(energy)
    assert savings["time"] == pytest.approx(time_saved)
    cost = policy.zeus_cost(energy, time_saved, config.eta_knob, config.max_power)
    assert savings["cost"] == pytest.approx(cost)
    base_cost = policy.zeus_cost(base_energy, base_time, config.eta_knob, config.max_power)
    assert savings["fraction"] == pytest.approx(cost / base_cost)
    assert savings["energy"] > 0  # larger batch sizes cost less in this job

    costs: dict[int, list[float]] = defaultdict(list)
    for trial in sorted(reported, key=lambda t: t["trial_number"]):
        costs[trial["batch_size"]].append(trial["cost"])
    arms = tuple(state["arms"])
    posteriors = policy.arm_posteriors(config, arms, {b: CostStats.of(c) for b, c in costs.items()})
    best = max((a for a in arms if costs[a]), key=lambda a: posteriors[a].mean)
    assert state["recommended"] == {
        "batch_size": best,
        "expected_cost": pytest.approx(-posteriors[best].mean),
        "basis": "posterior",
    }
    listed = http.get("/api/jobs", params={"prefix": job_id}).json()
    (summary,) = [j for j in listed if j["job_id"] == job_id]
    assert summary["recommended"] == state["recommended"]
    assert summary["savings"] == pytest.approx(savings)

    # A run in progress is counted by its status, and its energy so far is not spent yet.
    running = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    progress = running | {"time": 3.0, "energy": 500.0, "metric": 0.1, "current_epoch": 1}
    assert not http.post("/report", json=progress).json()["stop_train"]
    after = http.get(f"/api/jobs/{job_id}").json()
    assert after["trials_by_status"] == {"reported": len(reported), "failed": 1, "dispatched": 1}
    assert after["savings"] == pytest.approx(savings)


def test_savings_count_only_delivered_models(http: httpx.Client) -> None:
    """An unconverged run spent energy and delivered nothing: against the default, which
    delivered its model, the job spent more (a negative figure, shown as "more cost")."""
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"target_metric": 0.8, "max_epochs": 2, "learning_curve_stop": False}
    assert http.post("/jobs", json=body).status_code == 201
    size, answer = run_one(http, job_id, {64: 0.9})
    assert (size, answer["converged"], answer["reason"]) == (64, True, "converged")
    assert "reached the target" in str(answer["why"])
    state = http.get(f"/api/jobs/{job_id}").json()
    assert state["savings"] is None
    assert "every run so far used the default batch size (64)" in state["savings_unknown"]
    size, answer = run_one(http, job_id, {64: 0.9}, energy=400.0)  # 32 never converges
    assert (size, answer["converged"]) == (32, False)
    assert answer["reason"] in ("max_epochs", "cost_bound")
    state = http.get(f"/api/jobs/{job_id}").json()
    savings = state["savings"]
    assert (savings["runs"], savings["ended_runs"], savings["default_runs"]) == (1, 2, 1)
    other = next(t for t in state["trials"] if t["batch_size"] == 32)
    assert savings["energy"] == pytest.approx(-other["energy"])  # one model, both runs paid
    assert savings["fraction"] < 0
    listed = http.get("/api/jobs", params={"prefix": job_id}).json()
    assert listed[0]["savings"] == pytest.approx(savings)


def test_a_default_that_never_converged_has_no_savings_figure(http: httpx.Client) -> None:
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"target_metric": 0.8, "max_epochs": 2, "learning_curve_stop": False}
    assert http.post("/jobs", json=body).status_code == 201
    sizes = [run_one(http, job_id, {32: 0.9})[0] for _ in range(2)]
    assert sizes == [64, 32]
    state = http.get(f"/api/jobs/{job_id}").json()
    assert state["savings"] is None
    assert "the default batch size (64) never converged in its 1 run" in state["savings_unknown"]


def test_a_job_no_batch_size_converges_on_is_blocked_and_says_what_to_change(
    http: httpx.Client,
) -> None:
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"target_metric": 0.8, "max_epochs": 2, "learning_curve_stop": False}
    assert http.post("/jobs", json=body).status_code == 201
    state = http.get(f"/api/jobs/{job_id}").json()
    assert state["stage"] == "pruning"
    assert state["next_run"] == {
        "batch_size": 64,
        "kind": "exploration",
        "arms": None,
        "refused": False,
        "why": "pruning round 1 explores it",
    }
    for _ in range(2):
        run_one(http, job_id, {})
    state = http.get(f"/api/jobs/{job_id}").json()
    assert state["stage"] == "blocked"
    assert state["next_run"]["refused"]
    why = state["next_run"]["why"]
    assert why.startswith("no batch size converged in pruning round 1 (tried [32, 64]); change")
    assert "lower target_metric" in why
    assert "refused" not in why  # the flag says it: shown as "refused: <why>"
    # The list of jobs, which the dashboard's list and `zeus-bso jobs list` show, says the same.
    listing = http.get("/api/jobs", params={"prefix": job_id}).json()  # a page of a shared server
    (listed,) = [j for j in listing if j["job_id"] == job_id]
    assert listed["stage"] == "blocked"
    assert http.get("/jobs/batch_size", params={"job_id": job_id}).status_code == 409
    # Reading the job decided nothing: no trial was added by the views.
    assert state["trial_count"] == 2


def test_a_page_of_jobs_says_what_each_jobs_view_says(http: httpx.Client) -> None:
    """The job list reads a page's pruning explorations together (one statement, not one per
    job): each job's stage, recommendation and best size in the list are its own view's, for
    jobs at every stage side by side (fresh, exploring, in the bandit, blocked, pinned)."""
    prefix = unique_id("page")
    made = []
    for name, recurrences in (("fresh", 0), ("two", 2), ("five", 5), ("bandit", 9)):
        made.append(f"{prefix}-{name}")
        assert http.post("/jobs", json=job_body(made[-1], prefix=prefix)).status_code == 201
        run_recurrences(http, made[-1], recurrences)
    blocked = f"{prefix}-blocked"
    body = job_body(blocked, prefix=prefix, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"target_metric": 0.8, "max_epochs": 2, "learning_curve_stop": False}
    assert http.post("/jobs", json=body).status_code == 201
    for _ in range(2):
        run_one(http, blocked, {})
    assert http.put(f"/api/jobs/{made[1]}/pin", json={"batch_size": 32}).status_code == 200
    listed = {job["job_id"]: job for job in http.get("/api/jobs", params={"prefix": prefix}).json()}
    assert sorted(listed) == sorted([*made, blocked])
    stages = set()
    for job_id, job in listed.items():
        view = http.get(f"/api/jobs/{job_id}").json()
        stages.add(view["stage"])
        assert job["stage"] == view["stage"], job_id
        assert job["recommended"] == view["recommended"], job_id
        assert job["best_batch_size"] == view["best_batch_size"], job_id
    assert {"pruning", "bandit", "blocked", "pinned"} <= stages


def test_a_pinned_job_gives_every_run_its_batch_size_until_unpinned(http: httpx.Client) -> None:
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"target_metric": 0.8, "max_epochs": 3, "learning_curve_stop": False}
    assert http.post("/jobs", json=body).status_code == 201
    refused = http.put(f"/api/jobs/{job_id}/pin", json={})
    assert refused.status_code == 409
    assert "no recommendation yet" in refused.json()["message"]
    assert http.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 48}).status_code == 409
    assert http.put("/api/jobs/nobody-x/pin", json={"batch_size": 32}).status_code == 404
    run_one(http, job_id, {64: 0.9})  # the default converges: the recommendation
    pinned = http.put(f"/api/jobs/{job_id}/pin", json={})
    assert pinned.json() == {"job_id": job_id, "batch_size": 64}
    assert http.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 32}).status_code == 200
    state = http.get(f"/api/jobs/{job_id}").json()
    assert (state["stage"], state["pinned"]) == ("pinned", 32)
    assert (state["next_run"]["batch_size"], state["next_run"]["kind"]) == (32, "pinned")
    # A pinned run is never stopped for its cost, only at its target or max_epochs, and still
    # reports: 100 times the default's energy goes on to epoch 3.
    trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    assert trial["batch_size"] == 32
    for epoch in (1, 2, 3):
        report = trial | {
            "time": 10.0 * epoch,
            "energy": 100_000.0 * epoch,
            "metric": 0.1,
            "current_epoch": epoch,
        }
        answer = http.post("/report", json=report).json()
        assert answer["stop_train"] is (epoch == 3)
    assert answer["reason"] == "max_epochs"
    assert http.patch("/trials", json=trial).status_code == 200
    state = http.get(f"/api/jobs/{job_id}").json()
    assert state["trials"][0]["kind"] == "pinned"
    assert state["trials"][0]["status"] == "reported"
    assert http.delete(f"/api/jobs/{job_id}/pin").status_code == 204
    state = http.get(f"/api/jobs/{job_id}").json()
    assert (state["stage"], state["pinned"]) == ("pruning", None)
    assert state["next_run"]["kind"] == "exploration"


def test_a_run_that_must_deliver_is_judged_by_its_target_alone(http: httpx.Client) -> None:
    """The last attempt of a recurrence (``deliver=true``) was stopped against the job's
    luckiest run (three stops at 2.3-2.9x "the cheapest run's" and no model that week): it is
    judged as a pinned run is, by the target and ``max_epochs``; a run that need not deliver is
    stopped on its cost as before. The trial says which it was."""
    job_id = unique_id("deliver")
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"target_metric": 0.8, "max_epochs": 3, "learning_curve_stop": False}
    assert http.post("/jobs", json=body).status_code == 201
    run_one(http, job_id, {64: 0.9})  # the early-stop reference: 1 kJ an epoch

    def costly(trial: dict[str, object]) -> list[bool]:
        stops = []
        for epoch in (1, 2, 3):
            report = trial | {"time": 10.0 * epoch, "energy": 100_000.0 * epoch,
                              "metric": 0.1, "current_epoch": epoch}  # fmt: skip
            stops.append(http.post("/report", json=report).json()["stop_train"])
            if stops[-1]:
                break
        assert http.patch("/trials", json=trial).status_code == 200
        return stops

    assert costly(http.get("/jobs/batch_size", params={"job_id": job_id}).json()) == [True]
    last = http.get("/jobs/batch_size", params={"job_id": job_id, "deliver": "true"}).json()
    assert set(last) == {"job_id", "batch_size", "trial_number"}  # upstream's answer
    assert costly(last) == [False, False, True]  # on to max_epochs
    trials = {t["trial_number"]: t for t in http.get(f"/api/jobs/{job_id}").json()["trials"]}
    assert trials[last["trial_number"]]["must_deliver"] is True
    assert trials[last["trial_number"] - 1]["must_deliver"] is False


def test_a_job_registered_with_a_range_has_its_sizes_made_once(http: httpx.Client) -> None:
    job_id = unique_id()
    body = job_body(job_id, batch_size_range=[16, 256], default_batch_size=48)
    del body["batch_sizes"]
    created = http.post("/jobs", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["batch_sizes"] == [16, 32, 48, 64, 128, 256]
    again = http.post("/jobs", json=body)  # the same job, registered again
    assert again.status_code == 200, again.text
    trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    assert set(trial) == {"job_id", "batch_size", "trial_number"}  # upstream's answer
    assert trial["batch_size"] == 48
    neither = job_body(unique_id(), default_batch_size=48)
    del neither["batch_sizes"]
    refused = http.post("/jobs", json=neither)
    assert refused.status_code == 422
    assert "give batch_sizes, or batch_size_range" in refused.json()["message"]


def test_a_short_lived_jobs_budget_shown_follows_from_its_runs(http: httpx.Client) -> None:
    """A job with ``expected_recurrences`` shows its budget as its next decision reads it:
    3% over that many runs of the default (its mean converged cost), what its runs spent, and
    what one more exploration may lose (the budget less the spending and the runs left at the
    cheapest size's mean)."""
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[32, 64, 128], default_batch_size=64)
    body |= {"expected_recurrences": 10, "target_metric": 0.5, "learning_curve_stop": False}
    assert http.post("/jobs", json=body).status_code == 201
    horizon = http.get(f"/api/jobs/{job_id}").json()["horizon"]
    assert horizon == {
        "recurrences": 10, "expected": 10, "done": 0, "spent": 0.0, "budget": None,
        "allowance": None, "cheapest_cost": None,
    }  # fmt: skip
    for i in range(3):
        trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
        size = trial["batch_size"]
        energy = 1000.0 * size / 64 + 10.0 * i
        report = trial | {"time": 10.0, "energy": energy, "metric": 0.9, "current_epoch": 1}
        assert http.post("/report", json=report).json()["stop_train"]
        assert http.patch("/trials", json=trial).status_code == 200

    state = http.get(f"/api/jobs/{job_id}").json()
    trials = state["trials"]
    assert all(t["converged"] for t in trials)
    costs: dict[int, list[float]] = defaultdict(list)
    for t in trials:
        costs[t["batch_size"]].append(t["cost"])
    assert len(costs) > 1  # it explored
    means = {size: sum(c) / len(c) for size, c in costs.items()}
    horizon = state["horizon"]
    assert (horizon["recurrences"], horizon["expected"], horizon["done"]) == (10, 10, 3)
    assert horizon["spent"] == pytest.approx(sum(t["cost"] for t in trials))
    assert horizon["budget"] == pytest.approx(1.03 * 10 * means[64])
    assert horizon["cheapest_cost"] == pytest.approx(min(means.values()))
    left = horizon["budget"] - horizon["spent"] - 7 * min(means.values())
    assert horizon["allowance"] == pytest.approx(left)
    page = http.get(f"/dashboard/jobs/{job_id}").text
    shown = f"{left / min(means.values()):.2f} of a run"
    assert "10 (3 done): the job explores only what can pay back" in page
    assert ("one more exploration may lose " + shown if left > 0 else "nothing more") in page


def _released(http: httpx.Client, job_id: str, message: str | None = None) -> None:
    ended = trial_id(dispatch(http, job_id)) | ({"message": message} if message else {})
    assert http.post("/api/trials/release", json=ended).json()["status"] == "released"


def test_a_job_whose_newest_runs_were_all_released_says_it_learns_nothing(
    server: ServerProcess, http: httpx.Client
) -> None:
    """Three runs released one after another (the framework's own epoch limit below the job's,
    every time): none was counted, and the next run is dispatched as they were. The job's view
    says so, with what the latest said; a run that is counted ends it, and one or two released
    runs (an interruption) say nothing."""
    job_id = unique_id()
    assert http.post("/jobs", json=job_body(job_id)).status_code == 201
    said = "the Trainer's max_epochs (2) is below the job's (4)"
    for run in range(3):
        assert http.get(f"/api/jobs/{job_id}").json()["not_learning"] is None
        _released(http, job_id, said if run == 2 else None)
    words = http.get(f"/api/jobs/{job_id}").json()["not_learning"]
    assert words.startswith("its last 3 runs were released: none was counted")
    assert f"the latest said: {said}" in words
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert 'id="not-learning"' in page
    shown = " ".join(jobs_show(server.url, job_id).stdout.split())  # as wrapped, unwrapped
    assert f"not learning: {words}" in shown
    (listed,) = http.get("/api/jobs", params={"prefix": job_id}).json()
    # The job list says so too (it reads no more than the three runs it takes), and its page.
    assert listed["not_learning"].startswith("its last 3 or more runs were released: none")
    listed_page = http.get("/dashboard", params={"prefix": job_id}).text
    assert 'class="badge not-learning"' in listed_page
    # The fleet's totals count it, linked to the list of those jobs, for an alert on them.
    assert "1 job learns nothing now" in listed_page
    (link,) = re.findall(r'id="not-learning-jobs" href="([^"]+)"', listed_page)
    only = http.get(html.unescape(link)).text
    assert "Jobs that learn nothing now" in only
    assert f">{job_id}</a>" in only
    assert http.get("/api/summary", params={"prefix": job_id}).json()["jobs_not_learning"] == 1
    cli = [str(Path(sys.executable).parent / "zeus-bso"), "jobs"]
    where = ["--prefix", job_id, "--server", server.url]
    wide = {**os.environ, "COLUMNS": "200"}
    only_them = [*cli, "list", "--not-learning", *where]
    listing = subprocess.run(only_them, capture_output=True, text=True, timeout=60, env=wide)
    assert "pruning, not learning" in listing.stdout, listing.stderr
    summary = subprocess.run(
        [*cli, "summary", *where], capture_output=True, text=True, timeout=60, env=wide
    )
    assert "1 job learns nothing now" in " ".join(summary.stdout.split()), summary.stderr
    in_progress = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    assert http.get(f"/api/jobs/{job_id}").json()["not_learning"] == words  # not ended yet
    report = in_progress | {"time": 10.0, "energy": 1000.0, "metric": 0.1, "current_epoch": 1}
    assert http.post("/report", json=report).status_code == 200
    assert http.patch("/trials", json=in_progress).status_code == 200
    assert http.get(f"/api/jobs/{job_id}").json()["not_learning"] is None
    _released(http, job_id)
    _released(http, job_id)
    assert http.get(f"/api/jobs/{job_id}").json()["not_learning"] is None
    assert 'id="not-learning"' not in http.get(f"/dashboard/jobs/{job_id}").text
    assert http.get("/api/jobs", params={"prefix": job_id, "not_learning": True}).json() == []
    assert http.get("/api/summary", params={"prefix": job_id}).json()["jobs_not_learning"] == 0
