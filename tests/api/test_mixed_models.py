"""A job whose runs trained other models: each report may say the parameters its run trains and
the precision (``model_parameters``, ``precision``: extensions upstream's server ignores); the
trial keeps the first it said, a run whose job's other runs trained other models is told so in
its first report's answer (``notice``), and the job's view, the CLI's words and the dashboard
say it.
Real server process, on each backend."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import dispatch, job_body, trial_id, unique_id
from zeus_bso_server.mixed_models import mixed_models, model_changed
from zeus_bso_server.store.repository import ModelRuns


def report(
    http: httpx.Client,
    trial: dict[str, Any],
    epoch: int,
    parameters: int | None,
    precision: str | None = None,
    techniques: list[str] | None = None,
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
    if precision is not None:
        body["precision"] = precision
    if techniques is not None:
        body["techniques"] = techniques
    answer = http.post("/report", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def run(
    http: httpx.Client,
    job_id: str,
    parameters: int | None,
    precision: str | None = None,
    techniques: list[str] | None = None,
    **gpus: Any,
) -> tuple[int, list[Any]]:
    """A run of two reports (on ``gpus``, where given): its trial's number and each report's
    notice."""
    trial = dispatch(http, job_id, **gpus)
    notices = [
        report(http, trial, epoch, parameters, precision, techniques).get("notice")
        for epoch in (1, 2)
    ]
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
        {"profile": profile, "parameters": 11_689_512, "precision": None, "techniques": None,
         "trials": 2, "first_trial": first, "last_trial": same},
        {"profile": profile, "parameters": 25_557_032, "precision": None, "techniques": None,
         "trials": 2, "first_trial": changed, "last_trial": again},
    ]  # fmt: skip
    assert view["mixed_models"].startswith("its runs trained other models (11,689,512 param")
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


def test_a_run_in_another_precision_is_told_and_its_trial_keeps_it(http: httpx.Client) -> None:
    job_id = unique_id("models")
    assert http.post("/jobs", json=job_body(job_id, target_metric=0.9)).status_code == 201
    full, said = run(http, job_id, 5_000, "32-true")
    assert said == [None, None]
    half, said = run(http, job_id, 5_000, "bf16-mixed")
    assert said[0] is not None
    assert "a model of 5,000 parameters (bf16-mixed), and the job's other runs" in said[0]
    assert f"(5,000 parameters (32-true) in trial {full})" in said[0]
    view = http.get(f"/api/jobs/{job_id}").json()
    assert {t["trial_number"]: t["precision"] for t in view["trials"]} == {
        full: "32-true",
        half: "bf16-mixed",
    }
    assert [m["precision"] for m in view["models"]] == ["32-true", "bf16-mixed"]


def test_a_run_that_trains_otherwise_is_told_and_its_trial_keeps_how(http: httpx.Client) -> None:
    """The same model in the same precision, with activation checkpointing or compiled: each
    changes what a batch size costs (and what fits), so it is another model; a run that does
    not say (a plain loop, an older client) is no difference, nor is the order it is said in."""
    job_id = unique_id("models")
    assert http.post("/jobs", json=job_body(job_id, target_metric=0.9)).status_code == 201
    plain, said = run(http, job_id, 5_000, "bf16-mixed", [])
    assert said == [None, None]
    assert run(http, job_id, 5_000, "bf16-mixed")[1] == [None, None]  # not said
    ways = ["compiled", "activation_checkpointing"]
    otherwise, said = run(http, job_id, 5_000, "bf16-mixed", ways)
    assert said[0] is not None
    assert (
        "a model of 5,000 parameters (bf16-mixed, activation checkpointing, compiled), and the "
        "job's other runs" in said[0]
    )
    assert f"(5,000 parameters (bf16-mixed) in trial {plain})" in said[0]
    again, said = run(http, job_id, 5_000, "bf16-mixed", ways[::-1])  # another order
    view = http.get(f"/api/jobs/{job_id}").json()
    assert {t["trial_number"]: t["techniques"] for t in view["trials"]} == {
        plain: [],
        plain + 1: None,
        otherwise: ["activation_checkpointing", "compiled"],
        again: ["activation_checkpointing", "compiled"],
    }
    models = [(m["techniques"], m["trials"]) for m in view["models"]]
    assert sorted(models, key=str) == sorted(
        [([], 1), (None, 1), (["activation_checkpointing", "compiled"], 2)], key=str
    )
    assert "activation checkpointing, compiled" in view["mixed_models"]


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
    assert "other models (on 4xA40@1200W: 1,000 parameters in trial" in mixed
    assert f"2,000 parameters in trial {later})" in mixed


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("model_parameters", 0),
        ("model_parameters", -5),
        ("model_parameters", 10**16),
        ("model_parameters", 1.5),
        ("model_parameters", "many"),
        ("precision", ""),
        ("precision", "x" * 33),
        ("precision", "bf16\nmixed"),
        ("techniques", ["fast"]),
        ("techniques", "compiled"),
        ("techniques", ["compiled"] * 3),
    ],
)
def test_a_count_or_precision_out_of_bounds_is_refused_and_nothing_is_kept(
    http: httpx.Client, name: str, value: object
) -> None:
    job_id = unique_id("models")
    assert http.post("/jobs", json=job_body(job_id, target_metric=0.9)).status_code == 201
    trial = dispatch(http, job_id)
    body = {**trial_id(trial), "time": 1.0, "energy": 100.0, "metric": 0.5, "current_epoch": 1}
    refused = http.post("/report", json={**body, "model_parameters": 100, name: value})
    assert refused.status_code == 422, refused.text
    assert name in refused.text
    stored = http.get(f"/api/jobs/{job_id}").json()["trials"][0]
    assert (stored["epochs"], stored["model_parameters"]) == (None, None)


def test_the_words_name_each_model_by_its_trials() -> None:
    models = [
        ModelRuns(None, 100, None, 3, 1, 5),
        ModelRuns(None, 200, None, 1, 4, 4),
        ModelRuns(None, 300, None, 2, 6, 7),
    ]
    words = mixed_models("job-a", models, "1xV100@250W")
    assert words is not None
    assert "(100 parameters in 3 trials of 1-5; 200 parameters in trial 4; 300" in words
    assert "parameters in trials 6-7)" in words
    assert mixed_models("job-a", models[:1], "1xV100@250W") is None
    elsewhere = [*models[:2], ModelRuns("2xV100@500W", 50, None, 1, 8, 8)]
    both = mixed_models("job-a", elsewhere, "1xV100@250W")
    assert both is not None
    assert "(on 1xV100@250W: 100 parameters in 3 trials of 1-5; 200" in both
    assert "2xV100" not in both
    assert model_changed("job-a", ModelRuns("2xV100@500W", 50, None, 1, 9, 9), elsewhere) is None
    assert model_changed("job-a", ModelRuns(None, 300, None, 1, 8, 8), models[2:]) is None
    changed = model_changed("job-a", ModelRuns(None, 300, None, 1, 8, 8), models)
    assert changed is not None
    assert changed.startswith("trial 8 of job job-a trains a model of 300 parameters, and")
    assert "300 parameters in" not in changed


def test_sizes_a_few_percent_apart_are_one_model_and_precisions_are_told_apart() -> None:
    """A vocabulary grown by a few tokens is one model; the same model in another precision is
    another (it costs differently); a precision one of the runs did not say (a plain loop, a
    client before it) is no difference."""
    alike = [ModelRuns(None, 1_000_000, None, 4, 1, 4), ModelRuns(None, 1_049_000, None, 2, 5, 6)]
    assert mixed_models("job-a", alike, "1xV100@250W") is None
    assert model_changed("job-a", ModelRuns(None, 1_049_000, None, 1, 7, 7), alike[:1]) is None
    assert model_changed("job-a", ModelRuns(None, 1_051_000, None, 1, 7, 7), alike[:1])
    full = ModelRuns(None, 1_000_000, "32-true", 3, 1, 3)
    half = ModelRuns(None, 1_000_000, "bf16-mixed", 1, 4, 4)
    changed = model_changed("job-a", half, [full])
    assert changed is not None
    assert "trains a model of 1,000,000 parameters (bf16-mixed), and the job's other" in changed
    assert "(1,000,000 parameters (32-true) in trials 1-3)" in changed
    assert mixed_models("job-a", [full, half], "1xV100@250W") is not None
    unsaid = ModelRuns(None, 1_000_000, None, 1, 5, 5)
    assert model_changed("job-a", unsaid, [full, half]) is None
    assert mixed_models("job-a", [full, unsaid], "1xV100@250W") is None
