"""A job whose runs trained models of other sizes: each report may say the parameters its run
trains (``model_parameters``, an extension upstream's server ignores); the trial keeps the
first it said, a run whose job's other runs trained other sizes is told so in its first
report's answer (``notice``), and the job's view, the CLI's words and the dashboard say it.
Real server process, on each backend."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import dispatch, job_body, trial_id, unique_id
from zeus_bso_server.mixed_models import mixed_models, model_changed
from zeus_bso_server.store.repository import ModelRuns


def report(
    http: httpx.Client, trial: dict[str, Any], epoch: int, parameters: int | None
) -> dict[str, Any]:
    body = {
        **trial_id(trial),
        "time": 10.0 * epoch,
        "energy": 2000.0 * epoch,
        "metric": 0.5,
        "current_epoch": epoch,
    }
    if parameters is not None:
        body["model_parameters"] = parameters
    answer = http.post("/report", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def run(
    http: httpx.Client, job_id: str, parameters: int | None, **gpus: Any
) -> tuple[int, list[Any]]:
    """A run of two reports (on ``gpus``, where given): its trial's number and each report's
    notice."""
    trial = dispatch(http, job_id, **gpus)
    notices = [report(http, trial, epoch, parameters).get("notice") for epoch in (1, 2)]
    assert http.patch("/trials", json=trial_id(trial)).status_code == 200
    return trial["trial_number"], notices


def test_a_run_whose_job_trained_another_model_is_told_and_the_view_says_it(
    http: httpx.Client,
) -> None:
    job_id = unique_id("models")
    body = job_body(job_id, max_epochs=8, target_metric=0.9, learning_curve_stop=False)
    assert http.post("/jobs", json=body).status_code == 201
    first, said = run(http, job_id, 11_689_512)
    assert said == [None, None]  # the job's first model
    same, said = run(http, job_id, 11_689_512)
    assert said == [None, None]
    upstream, said = run(http, job_id, None)  # upstream's clients say nothing
    assert said == [None, None]
    changed, said = run(http, job_id, 25_557_032)
    notice = said[0]
    assert notice is not None
    assert said[1] is None  # once a run: its first report
    assert f"trial {changed} of job {job_id} trains a model of 25,557,032 parameters" in notice
    assert f"11,689,512 parameters in trials {first}-{same}" in notice
    assert f"prior_from={job_id!r}" in notice
    again, said = run(http, job_id, 25_557_032)  # the job mixes models until it is left
    assert said[0] is not None
    assert f"trial {again} of job {job_id}" in said[0]

    view = http.get(f"/api/jobs/{job_id}").json()
    profile = view["trials"][0]["profile"]  # the job's GPUs (job_body's)
    assert view["models"] == [
        {"profile": profile, "parameters": 11_689_512, "trials": 2, "first_trial": first,
         "last_trial": same},
        {"profile": profile, "parameters": 25_557_032, "trials": 2, "first_trial": changed,
         "last_trial": again},
    ]  # fmt: skip
    assert view["mixed_models"].startswith("its runs trained models of 2 sizes")
    by_number = {t["trial_number"]: t["model_parameters"] for t in view["trials"]}
    assert (by_number[first], by_number[upstream], by_number[changed]) == (
        11_689_512,
        None,
        25_557_032,
    )
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert 'id="mixed-models"' in page
    assert "25,557,032 parameters" in page
    (listed,) = http.get("/api/jobs", params={"prefix": job_id}).json()
    assert listed["mixed_models"] == view["mixed_models"]
    assert "mixed models</span>" in http.get("/dashboard", params={"prefix": job_id}).text


def test_a_job_of_one_model_says_nothing(http: httpx.Client) -> None:
    job_id = unique_id("models")
    assert http.post("/jobs", json=job_body(job_id, target_metric=0.9)).status_code == 201
    for _ in range(2):
        assert run(http, job_id, 1_000)[1] == [None, None]
    view = http.get(f"/api/jobs/{job_id}").json()
    assert (len(view["models"]), view["mixed_models"]) == (1, None)
    assert 'id="mixed-models"' not in http.get(f"/dashboard/jobs/{job_id}").text
    (listed,) = http.get("/api/jobs", params={"prefix": job_id}).json()
    assert listed["mixed_models"] is None
    assert "mixed models</span>" not in http.get("/dashboard", params={"prefix": job_id}).text


def test_runs_on_other_gpus_are_compared_with_their_own_profiles_runs(http: httpx.Client) -> None:
    """An optimizer that holds each process's part of the parameters (DeepSpeed's ZeRO stages 1
    and 2) counts fewer on more GPUs: a run on another hardware profile is not compared with
    the first profile's runs, only with its own profile's."""
    job_id = unique_id("models")
    assert http.post("/jobs", json=job_body(job_id, target_metric=0.9)).status_code == 201
    assert run(http, job_id, 4_000)[1] == [None, None]
    four = {"gpu_model": "A40", "number_of_gpus": 4, "max_power": 1200.0}
    assert run(http, job_id, 1_000, **four)[1] == [None, None]
    view = http.get(f"/api/jobs/{job_id}").json()
    assert [(m["profile"], m["parameters"]) for m in view["models"]] == [
        (view["trials"][-1]["profile"], 4_000),  # the job's GPUs (job_body's)
        ("4xA40@1200W", 1_000),
    ]
    assert view["mixed_models"] is None
    later, said = run(http, job_id, 2_000, **four)
    assert said[0] is not None
    assert "(1,000 parameters in trial" in said[0]
    assert "4,000" not in said[0]
    mixed = http.get(f"/api/jobs/{job_id}").json()["mixed_models"]
    assert "of 2 sizes (on 4xA40@1200W: 1,000 parameters in trial" in mixed
    assert f"2,000 parameters in trial {later})" in mixed


@pytest.mark.parametrize("parameters", [0, -5, 10**16, 1.5, "many"])
def test_a_count_out_of_bounds_is_refused_and_nothing_is_kept(
    http: httpx.Client, parameters: object
) -> None:
    job_id = unique_id("models")
    assert http.post("/jobs", json=job_body(job_id, target_metric=0.9)).status_code == 201
    trial = dispatch(http, job_id)
    body = {**trial_id(trial), "time": 1.0, "energy": 100.0, "metric": 0.5, "current_epoch": 1}
    refused = http.post("/report", json={**body, "model_parameters": parameters})
    assert refused.status_code == 422, refused.text
    assert "model_parameters" in refused.text
    stored = http.get(f"/api/jobs/{job_id}").json()["trials"][0]
    assert (stored["epochs"], stored["model_parameters"]) == (None, None)


def test_the_words_name_each_model_by_its_trials() -> None:
    models = [
        ModelRuns(None, 100, 3, 1, 5),
        ModelRuns(None, 200, 1, 4, 4),
        ModelRuns(None, 300, 2, 6, 7),
    ]
    words = mixed_models("job-a", models, "1xV100@250W")
    assert words is not None
    assert "of 3 sizes (100 parameters in 3 trials of 1-5; 200 parameters in trial 4; 300" in words
    assert "parameters in trials 6-7" in words
    assert mixed_models("job-a", models[:1], "1xV100@250W") is None
    elsewhere = [*models[:2], ModelRuns("2xV100@500W", 50, 1, 8, 8)]
    both = mixed_models("job-a", elsewhere, "1xV100@250W")
    assert both is not None
    assert "of 2 sizes (on 1xV100@250W: 100 parameters in 3 trials of 1-5; 200" in both
    assert "2xV100" not in both
    assert model_changed("job-a", 9, 50, "2xV100@500W", elsewhere) is None
    assert model_changed("job-a", 7, 300, None, models[2:]) is None
    # Sizes within 5% are one model: a vocabulary grown by a few tokens.
    alike = [ModelRuns(None, 1_000_000, 4, 1, 4), ModelRuns(None, 1_049_000, 2, 5, 6)]
    assert mixed_models("job-a", alike, "1xV100@250W") is None
    assert model_changed("job-a", 7, 1_049_000, None, alike[:1]) is None
    assert model_changed("job-a", 7, 1_051_000, None, alike[:1]) is not None
    grown = mixed_models("job-a", [*alike, ModelRuns(None, 1_200_000, 1, 7, 7)], "1xV100@250W")
    assert grown is not None
    assert "of 3 sizes" in grown
    changed = model_changed("job-a", 7, 300, None, models)
    assert changed is not None
    assert "300 parameters in" not in changed
