"""Out of memory over HTTP (``POST /api/trials/infeasible``), on each backend: the trial ends
``infeasible``, its profile's runs never get that batch size or a larger one again, other
profiles keep them, and the read API, the dashboard and the CLI say so. Real server process."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers import ServerProcess, dispatch, job_body, jobs_show, trial_id, unique_id
from zeus_bso.energy import EstimateMeter

A100 = {"gpu_model": "NVIDIA A100-SXM4-40GB", "number_of_gpus": 1, "max_power": 300.0}
A100_KEY = "1xNVIDIA A100-SXM4-40GB@300W"
H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "number_of_gpus": 1, "max_power": 700.0}


def converge(http: httpx.Client, trial: dict[str, Any]) -> None:
    """One epoch that reaches the target; larger batch sizes are cheaper."""
    energy = 64_000.0 / trial["batch_size"]
    body = {**trial_id(trial), "time": 1.0, "energy": energy, "metric": 0.99, "current_epoch": 1}
    assert http.post("/report", json=body).json()["stop_train"]
    assert http.patch("/trials", json=trial_id(trial)).status_code == 200


def test_an_infeasible_size_is_never_dispatched_again_on_its_profile(
    http: httpx.Client, server: ServerProcess
) -> None:
    job_id = unique_id("oom")
    body = job_body(job_id, batch_sizes=[32, 64, 128, 256], default_batch_size=128)
    assert http.post("/jobs", json=body).status_code == 201
    upstream = dispatch(http, job_id)
    assert set(upstream) == {"job_id", "batch_size", "trial_number"}  # upstream's, to its clients
    assert http.post("/api/trials/release", json=upstream).is_success
    first = dispatch(http, job_id, **A100)
    assert first["batch_size"] == 128
    assert first["memory_unknown"] is True  # never ran on this profile: the client tries it
    answer = http.post("/api/trials/infeasible", json=trial_id(first))
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "infeasible"
    again = http.post("/api/trials/infeasible", json=trial_id(first))  # idempotent
    assert again.json()["status"] == "infeasible"

    sizes = []
    for _ in range(8):
        trial = dispatch(http, job_id)
        sizes.append(trial["batch_size"])
        converge(http, trial)
    assert max(sizes) < 128, sizes
    later = dispatch(http, job_id, **A100)
    # Left out when false (the answer keeps upstream's shape where it can).
    assert later.get("memory_unknown", False) is (later["batch_size"] not in sizes)
    converge(http, later)

    view = http.get(f"/api/jobs/{job_id}").json()
    assert view["memory_caps"] == {A100_KEY: 128}
    assert view["trials_by_status"]["infeasible"] == 1
    assert view["savings"] is None or view["savings"]["default_batch_size"] == 128
    page = http.get(f"/dashboard/jobs/{job_id}")
    assert page.status_code == 200
    assert "128 and above on" in page.text
    assert "status-infeasible" in page.text

    # Another profile keeps 128 and 256: the job explores them there (the cheapest arm's
    # neighbour, once the profile's costs are measured).
    h100 = dispatch(http, job_id, **H100)
    seen = {h100["batch_size"]}
    converge(http, h100)
    for _ in range(20):
        trial = dispatch(http, job_id, **H100)
        seen.add(trial["batch_size"])
        converge(http, trial)
        if trial["batch_size"] >= 128:
            break
    assert max(seen) >= 128, seen


def test_a_profile_where_nothing_fits_is_refused_with_what_to_change(http: httpx.Client) -> None:
    job_id = unique_id("oomall")
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    assert http.post("/jobs", json=body).status_code == 201
    for _ in range(2):
        assert http.post("/api/trials/infeasible", json=trial_id(dispatch(http, job_id))).is_success
    refused = http.get("/jobs/batch_size", params={"job_id": job_id})
    assert refused.status_code == 409
    assert "No batch size fits in memory" in refused.text
    assert "max_micro_batch_size" in refused.text
    view = http.get(f"/api/jobs/{job_id}").json()
    assert view["stage"] == "blocked"
    assert view["next_run"]["refused"]
    assert "fits in memory" in view["next_run"]["why"]


def test_forgotten_memory_caps_give_back_every_batch_size(http: httpx.Client) -> None:
    """An out-of-memory error that was a bug blocked the job on its GPUs (every size ran out);
    once it is fixed, forgetting the cap unblocks it, and the trials stay in the history."""
    job_id = unique_id("oomforget")
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    assert http.post("/jobs", json=body).status_code == 201
    for _ in range(2):
        out = dispatch(http, job_id, **A100)
        assert http.post("/api/trials/infeasible", json=trial_id(out)).is_success
    assert http.get(f"/api/jobs/{job_id}").json()["stage"] == "blocked"
    path = f"/api/jobs/{job_id}/memory_caps"
    other = http.delete(path, params={"profile": "1xNVIDIA H100 80GB HBM3@700W"})
    assert other.json() == {"job_id": job_id, "forgotten": {}, "forgotten_doubts": {}}
    assert http.get(f"/api/jobs/{job_id}").json()["memory_caps"] == {A100_KEY: 32}
    forgot = http.delete(path, params={"profile": A100_KEY})
    assert forgot.status_code == 200, forgot.text
    assert forgot.json() == {"job_id": job_id, "forgotten": {A100_KEY: 32}, "forgotten_doubts": {}}
    view = http.get(f"/api/jobs/{job_id}").json()
    assert (view["memory_caps"], view["stage"]) == ({}, "pruning"), view["next_run"]
    assert view["trials_by_status"]["infeasible"] == 2
    again = dispatch(http, job_id, **A100)
    assert again["batch_size"] == 64
    assert again["memory_unknown"] is True  # the client tries it again
    assert http.delete(path).json()["forgotten"] == {}  # nothing left: not an error
    assert http.delete(f"/api/jobs/{unique_id('none')}/memory_caps").status_code == 404
    assert http.delete(path, params={"profile": ""}).status_code == 422


def test_forgetting_memory_forgets_a_doubt_with_the_caps(http: httpx.Client) -> None:
    """A size that trained ran out while it trained (a leak of the script's, fixed since): its
    doubt, which the same error left as a cap would, is forgotten with the caps, on the profile
    named alone, and the size is taken to fit there again."""
    job_id = unique_id("oomforgetdoubt")
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
    assert http.post("/jobs", json=body).status_code == 201
    assert http.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 64}).status_code == 200
    h100 = {**A100, "gpu_model": "NVIDIA H100 80GB HBM3"}
    for gpu in (A100, h100):
        converge(http, dispatch(http, job_id, **gpu))
        ran_out = {**trial_id(dispatch(http, job_id, **gpu)), "out_of_memory": True}
        assert http.post("/api/trials/release", json=ran_out).is_success
    h100_key = "1xNVIDIA H100 80GB HBM3@300W"
    doubts = {A100_KEY: 64, h100_key: 64}
    assert http.get(f"/api/jobs/{job_id}").json()["memory_doubts"] == doubts
    path = f"/api/jobs/{job_id}/memory_caps"
    forgot = http.delete(path, params={"profile": A100_KEY})
    assert forgot.status_code == 200, forgot.text
    assert forgot.json() == {"job_id": job_id, "forgotten": {}, "forgotten_doubts": {A100_KEY: 64}}
    assert http.get(f"/api/jobs/{job_id}").json()["memory_doubts"] == {h100_key: 64}
    assert dispatch(http, job_id, **A100).get("memory_unknown", False) is False  # it fits
    assert dispatch(http, job_id, **h100)["memory_unknown"] is True  # the other's stands
    assert http.delete(path).json()["forgotten_doubts"] == {h100_key: 64}
    assert http.get(f"/api/jobs/{job_id}").json()["memory_doubts"] == {}


def test_an_unknown_or_ended_trial(http: httpx.Client) -> None:
    job_id = unique_id("oomend")
    assert http.post("/jobs", json=job_body(job_id)).status_code == 201
    trial = dispatch(http, job_id)
    converge(http, trial)
    ended = http.post("/api/trials/infeasible", json=trial_id(trial))
    assert ended.json()["status"] == "reported"  # an ended trial is left as it is
    assert http.get(f"/api/jobs/{job_id}").json()["memory_caps"] == {}
    missing = http.post("/api/trials/infeasible", json={**trial_id(trial), "trial_number": 99})
    assert missing.status_code == 404
    assert "trial" in missing.text.lower()


def test_a_run_that_accumulates_lowers_the_cap_and_goes_on_and_gets_any_size(
    http: httpx.Client,
) -> None:
    """Extensions for gradient accumulation: micro-batches that ran out of memory lower the
    profile's cap and leave the trial open; a dispatch that says it accumulates may get a size
    at or above the cap (and is told the cap), one that does not never does; the reports'
    accumulation steps are kept on the trial."""
    job_id = unique_id("accum")
    body = job_body(job_id, batch_sizes=[32, 64, 128, 256], default_batch_size=128)
    assert http.post("/jobs", json=body).status_code == 201
    first = dispatch(http, job_id, accumulate="true", **A100)
    assert (first["batch_size"], first.get("memory_cap")) == (128, None)
    lowered = http.post("/api/trials/infeasible", json={**trial_id(first), "micro_batch_size": 64})
    assert lowered.status_code == 200, lowered.text
    assert lowered.json()["status"] == "dispatched"  # it goes on, as two micro-batches of 32
    report = {**trial_id(first), "time": 1.0, "energy": 500.0, "metric": 0.99, "current_epoch": 1}
    answer = http.post("/report", json={**report, "accumulation_steps": 4})
    assert answer.json()["stop_train"]
    assert http.patch("/trials", json=trial_id(first)).status_code == 200
    state = http.get(f"/api/jobs/{job_id}").json()
    assert state["memory_caps"] == {A100_KEY: 64}
    (trial,) = state["trials"]
    assert (trial["status"], trial["accumulation_steps"]) == ("reported", 4)
    # A run that does not accumulate never gets 64 or more here; one that does may.
    plain, accumulating = set(), set()
    for _ in range(10):
        trial = dispatch(http, job_id, **A100)
        assert trial["memory_cap"] == 64
        plain.add(trial["batch_size"])
        converge(http, trial)
        trial = dispatch(http, job_id, accumulate="true", **A100)
        accumulating.add(trial["batch_size"])
        converge(http, trial)
    assert max(plain) < 64, plain
    assert max(accumulating) >= 64, accumulating
    # An upstream client is told neither extension.
    upstream = dispatch(http, job_id)
    assert set(upstream) == {"job_id", "batch_size", "trial_number"}


def test_an_infeasible_trials_run_that_went_on_smaller_lowers_the_cap(
    http: httpx.Client,
) -> None:
    """A run whose trial ended infeasible and went on at smaller sizes of its framework's
    (the HF Trainer's ``auto_find_batch_size``) tells each one that ran out too: the profile's
    cap comes down to it, and the trial stays infeasible. A reported trial's run cannot."""
    job_id = unique_id("oomless")
    body = job_body(job_id, batch_sizes=[32, 64, 128, 256], default_batch_size=128)
    assert http.post("/jobs", json=body).status_code == 201
    first = dispatch(http, job_id, **A100)
    assert http.post("/api/trials/infeasible", json=trial_id(first)).is_success
    for size in (115, 103, 92):
        answer = http.post(
            "/api/trials/infeasible", json={**trial_id(first), "micro_batch_size": size}
        )
        assert answer.json()["status"] == "infeasible"
    assert http.get(f"/api/jobs/{job_id}").json()["memory_caps"] == {A100_KEY: 92}
    assert dispatch(http, job_id, **A100)["batch_size"] < 92
    again = http.post("/api/trials/infeasible", json={**trial_id(first), "micro_batch_size": 128})
    assert again.status_code == 409, again.text  # its batch size ran out already
    assert "which ran out of memory already" in again.json()["message"]

    other = unique_id("oomdone")
    assert http.post("/jobs", json=job_body(other)).status_code == 201
    trial = dispatch(http, other, **A100)
    converge(http, trial)
    done = http.post("/api/trials/infeasible", json={**trial_id(trial), "micro_batch_size": 8})
    assert done.status_code == 409
    assert "ended (reported)" in done.json()["message"]
    assert http.get(f"/api/jobs/{other}").json()["memory_caps"] == {}


def test_a_micro_batch_above_the_batch_size_sets_no_cap(http: httpx.Client) -> None:
    """``micro_batch_size`` says which micro-batch of an accumulating run ran out: one above
    the trial's batch size is refused (it set any cap for good)."""
    job_id = unique_id("oombad")
    body = job_body(job_id, batch_sizes=[32, 64, 128, 256], default_batch_size=128)
    assert http.post("/jobs", json=body).status_code == 201
    trial = dispatch(http, job_id, accumulate="true", **A100)
    for size in (129, 4096):
        answer = http.post(
            "/api/trials/infeasible", json={**trial_id(trial), "micro_batch_size": size}
        )
        assert answer.status_code == 409, answer.text
        assert "is above trial" in answer.json()["message"]
    for size in (0, 2**40):
        answer = http.post(
            "/api/trials/infeasible", json={**trial_id(trial), "micro_batch_size": size}
        )
        assert answer.status_code == 422, answer.text
    state = http.get(f"/api/jobs/{job_id}").json()
    assert state["memory_caps"] == {}
    assert state["trials"][0]["status"] == "dispatched"


def test_only_a_run_that_accumulates_says_which_micro_batch_ran_out(http: httpx.Client) -> None:
    """One micro_batch_size from a trial whose run trains whole batches set the job's cap on
    those GPUs to any size (1: every later run refused): only a run that said it accumulates,
    when it asked for its batch size or resumed its trial, sends one."""
    job_id = unique_id("oomwhole")
    body = job_body(job_id, batch_sizes=[32, 64, 128, 256], default_batch_size=128)
    assert http.post("/jobs", json=body).status_code == 201
    whole = dispatch(http, job_id, run_key="whole-batches", **A100)
    refused = http.post("/api/trials/infeasible", json={**trial_id(whole), "micro_batch_size": 1})
    assert refused.status_code == 409, refused.text
    assert "did not say it accumulates gradients" in refused.json()["message"]
    state = http.get(f"/api/jobs/{job_id}").json()
    assert (state["memory_caps"], state["trials"][0]["status"]) == ({}, "dispatched")

    # Restarted on fewer GPUs, the run accumulates now: it says so when it resumes.
    resumed = dispatch(http, job_id, run_key="whole-batches", accumulate="true", **A100)
    assert (resumed["trial_number"], resumed["resumed"]) == (whole["trial_number"], True)
    answer = http.post("/api/trials/infeasible", json={**trial_id(whole), "micro_batch_size": 64})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "dispatched"  # the trial goes on, in smaller micro-batches
    assert http.get(f"/api/jobs/{job_id}").json()["memory_caps"] == {A100_KEY: 64}


def test_a_late_report_does_not_revive_an_infeasible_trial(http: httpx.Client) -> None:
    """A report that comes after the trial ended infeasible (a rank that went on, a delivery
    that came late) is answered with a stop, and counts nothing: the trial stays infeasible and
    no batch size gains a run. (A released trial takes the reports of a run resumed from a
    checkpoint: tests/integrations, the resumed runs.)"""
    job_id = unique_id("late")
    body = job_body(job_id, batch_sizes=[32, 64, 128, 256], default_batch_size=128)
    assert http.post("/jobs", json=body).status_code == 201
    trial = dispatch(http, job_id, **A100)
    assert http.post("/api/trials/infeasible", json=trial_id(trial)).status_code == 200
    report = {**trial_id(trial), "time": 1.0, "energy": 10.0, "metric": 0.99, "current_epoch": 1}
    answer = http.post("/report", json=report)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["stop_train"], answer.json()["converged"]) == (True, False)
    assert "is not counted" in answer.json()["message"]
    state = http.get(f"/api/jobs/{job_id}").json()
    (stored,) = state["trials"]
    assert (stored["status"], stored["epochs"]) == ("infeasible", None)
    assert all(size["reports"] == 0 for size in state["batch_sizes"])


def test_a_pinned_job_never_gets_a_size_that_ran_out_of_memory(http: httpx.Client) -> None:
    """Pinning to a size at or above the GPUs' memory cap is refused; a pinned size that runs
    out of memory later refuses the next run (409, saying what to change) instead of dispatching
    it again, except to a run that accumulates."""
    job_id = unique_id("pinoom")
    body = job_body(job_id, batch_sizes=[32, 64, 128, 256], default_batch_size=128)
    assert http.post("/jobs", json=body).status_code == 201
    first = dispatch(http, job_id, **A100)
    assert http.post("/api/trials/infeasible", json=trial_id(first)).status_code == 200
    refused = http.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 128})
    assert refused.status_code == 409, refused.text
    assert "does not fit in memory" in refused.json()["message"]
    assert http.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 64}).status_code == 200
    pinned = dispatch(http, job_id, **A100)
    assert pinned["batch_size"] == 64
    assert http.post("/api/trials/infeasible", json=trial_id(pinned)).status_code == 200
    again = http.get("/jobs/batch_size", params={"job_id": job_id, **A100})
    assert again.status_code == 409, again.text
    assert "pinned to batch size 64, which does not fit" in again.json()["message"]
    view = http.get(f"/api/jobs/{job_id}").json()
    assert view["next_run"]["refused"] is True
    assert dispatch(http, job_id, accumulate="true", **A100)["batch_size"] == 64


def test_a_machine_that_measured_nothing_is_not_named_as_a_gpu(
    http: httpx.Client, server: ServerProcess
) -> None:
    """Runs with the energy estimate name no GPU (their model is the estimate's): the dashboard,
    ``zeus-bso jobs show`` and a refused pin say "an unmetered machine", not "estimate"."""
    estimate = EstimateMeter(300.0)
    machine = {"gpu_model": estimate.device_model, "number_of_gpus": 1, "max_power": 300.0}
    words = "an unmetered machine (energy estimated at 300 W)"
    job_id = unique_id("unmetered")
    body = job_body(job_id, batch_sizes=[32, 64, 128], default_batch_size=64, **machine)
    assert http.post("/jobs", json=body).status_code == 201
    first = dispatch(http, job_id, **machine)
    assert http.post("/api/trials/infeasible", json=trial_id(first)).status_code == 200
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert f"none measured: {words}" in page
    assert f"64 and above on {words}" in page
    assert "\u00d7 estimate" not in page
    refused = http.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 64})
    assert f"does not fit in memory on {words}" in refused.json()["message"]
    if not (server.db_url or "").startswith("sqlite"):
        return  # the command reads the same answer from every backend: once is enough
    shown = jobs_show(server.url, job_id)
    assert words in shown.stdout
    assert f"64 and above on {words}" in shown.stdout
    assert "estimate" not in shown.stdout.replace("estimated", "")


def test_a_size_that_trained_and_runs_out_is_tried_first_and_capped_if_it_runs_out_again(
    http: httpx.Client, server: ServerProcess
) -> None:
    """The model, its data or its precision needs more memory than when a size trained on these
    GPUs: the size runs out while it trains, and its run releases the trial saying so
    (``out_of_memory``). Nothing is capped (it may be a leak, another process), but its fit is
    in doubt: the next run of it there is told its fit is unknown (the client tries it first),
    and a second error caps it. A run of it that trains clears the doubt. (Before, the size was
    dispatched, and ran out, at every run.)"""
    job_id = unique_id("oomgrew")
    body = job_body(job_id, batch_sizes=[32, 64, 128], default_batch_size=64)
    assert http.post("/jobs", json=body).status_code == 201
    assert http.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 64}).status_code == 200
    first = dispatch(http, job_id, **A100)
    assert first["memory_unknown"] is True
    converge(http, first)

    def runs_out_while_it_trains() -> None:
        trial = dispatch(http, job_id, **A100)
        assert trial.get("memory_unknown", False) is False  # it trained here
        body = {**trial_id(trial), "message": "ran out of memory", "out_of_memory": True}
        released = http.post("/api/trials/release", json=body)
        assert released.status_code == 200, released.text
        assert released.json()["status"] == "released"

    runs_out_while_it_trains()
    view = http.get(f"/api/jobs/{job_id}").json()
    assert (view["memory_caps"], view["memory_doubts"]) == ({}, {A100_KEY: 64})
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert 'id="memory-doubts">64 and above on' in page
    if (server.db_url or "").startswith("sqlite"):  # the same answer from every backend
        assert "memory in doubt: batch size 64" in jobs_show(server.url, job_id).stdout
    tried = dispatch(http, job_id, **A100)
    assert tried["memory_unknown"] is True
    converge(http, tried)  # it fit after all: a leak, another process
    assert http.get(f"/api/jobs/{job_id}").json()["memory_doubts"] == {}

    runs_out_while_it_trains()
    tried = dispatch(http, job_id, **A100)
    assert tried["memory_unknown"] is True
    # An epoch is not a run: one whose longest samples come late runs out after it.
    epoch = {**trial_id(tried), "time": 1.0, "energy": 500.0, "metric": 0.1, "current_epoch": 1}
    assert http.post("/report", json=epoch).json()["stop_train"] is False
    assert http.get(f"/api/jobs/{job_id}").json()["memory_doubts"] == {A100_KEY: 64}
    assert http.post("/api/trials/infeasible", json=trial_id(tried)).is_success
    view = http.get(f"/api/jobs/{job_id}").json()
    assert (view["memory_caps"], view["memory_doubts"]) == ({A100_KEY: 64}, {})
    refused = http.get("/jobs/batch_size", params={"job_id": job_id, **A100})
    assert refused.status_code == 409  # pinned to 64, which does not fit now
    # A release that says nothing of memory leaves no doubt (a misconfigured script, say).
    other = unique_id("released")
    assert http.post("/jobs", json=job_body(other)).status_code == 201
    trial = dispatch(http, other, **A100)
    converge(http, trial)
    assert http.post("/api/trials/release", json=trial_id(dispatch(http, other, **A100))).is_success
    assert http.get(f"/api/jobs/{other}").json()["memory_doubts"] == {}
