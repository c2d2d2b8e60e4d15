"""Why a run ended, in its client's words: the ``message`` of ``PATCH /trials`` and ``POST
/api/trials/release`` (an extension upstream's server ignores), kept with a trial that did not
report it, on each backend, and shown by the read API and the dashboard. Real server process."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import dispatch, job_body, trial_id, unique_id

WHY = "EarlyStopping(monitor='val_loss') ended the fit: naïve → “quoted” 😀"
"""Characters beyond ASCII, and one beyond the Basic Multilingual Plane (utf8mb4 on MySQL)."""


def trials_of(http: httpx.Client, job_id: str) -> dict[int, dict[str, Any]]:
    trials = http.get(f"/api/jobs/{job_id}").json()["trials"]
    return {trial["trial_number"]: trial for trial in trials}


def test_a_failed_or_released_trial_keeps_why_its_run_ended(http: httpx.Client) -> None:
    job_id = unique_id("endings")
    assert http.post("/jobs", json=job_body(job_id)).status_code == 201
    failed = dispatch(http, job_id)
    assert http.patch("/trials", json={**trial_id(failed), "message": WHY}).status_code == 200
    released = dispatch(http, job_id)
    answer = http.post(
        "/api/trials/release", json={**trial_id(released), "message": "it exited before training"}
    )
    assert answer.json()["status"] == "released"
    upstream = dispatch(http, job_id)  # upstream's clients end a trial without a message
    assert http.patch("/trials", json=trial_id(upstream)).status_code == 200
    reported = dispatch(http, job_id)
    body = {**trial_id(reported), "time": 1.0, "energy": 500.0, "metric": 0.99, "current_epoch": 1}
    verdict = http.post("/report", json=body).json()
    assert verdict["stop_train"]
    ended = http.patch("/trials", json={**trial_id(reported), "message": "ended"})
    assert ended.status_code == 200
    trials = trials_of(http, job_id)
    assert (
        trials[failed["trial_number"]]["status"],
        trials[failed["trial_number"]]["message"],
    ) == (
        "failed",
        WHY,
    )
    assert trials[released["trial_number"]]["message"] == "it exited before training"
    assert trials[upstream["trial_number"]]["message"] is None
    # A trial that reported its end keeps the server's words for it.
    assert trials[reported["trial_number"]]["message"] == verdict["message"]
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert "EarlyStopping(monitor=&#39;val_loss&#39;) ended the fit" in page


def test_a_message_too_long_or_with_control_characters_is_refused(http: httpx.Client) -> None:
    job_id = unique_id("endings")
    assert http.post("/jobs", json=job_body(job_id)).status_code == 201
    trial = dispatch(http, job_id)
    for message in ("x" * 1001, "two\nlines"):
        refused = http.patch("/trials", json={**trial_id(trial), "message": message})
        assert refused.status_code == 422, refused.text
    assert trials_of(http, job_id)[trial["trial_number"]]["status"] == "dispatched"


def test_a_report_marked_final_ends_its_run_as_not_converging(http: httpx.Client) -> None:
    """A run that stopped itself below the target (its early stopping) sends its last report
    again as ``final``: the trial ends reported and not converged, charged as if it had trained
    the job's max_epochs, and the pruning round moves on to another size at once. A report the
    server already ended answers as before."""
    job_id = unique_id("final")
    body = job_body(job_id, max_epochs=8, target_metric=0.9, learning_curve_stop=False)
    assert http.post("/jobs", json=body).status_code == 201
    trial = dispatch(http, job_id)
    report = {**trial_id(trial), "time": 10.0, "energy": 2000.0, "metric": 0.5, "current_epoch": 2}
    assert not http.post("/report", json=report).json()["stop_train"]
    answer = http.post("/report", json={**report, "final": True}).json()
    assert (answer["stop_train"], answer["converged"], answer["reason"]) == (
        True,
        False,
        "ended_early",
    )
    stored = trials_of(http, job_id)[trial["trial_number"]]
    assert (stored["status"], stored["converged"]) == ("reported", False)
    assert stored["cost"] == answer["cost"] * 4  # 2 of 8 epochs
    assert stored["message"] == (
        "Train failed to converge: the run stopped itself at epoch 2, charged as max_epochs(8)"
    )
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert "stopped itself below the target (its early stopping) shows the cost" in page
    assert dispatch(http, job_id)["batch_size"] != trial["batch_size"]
    again = http.post("/report", json={**report, "final": True}).json()
    assert (again["stop_train"], again["converged"]) == (True, False)
    assert http.post("/report", json={**report, "final": "maybe"}).status_code == 422


def test_a_final_reports_words_are_kept_in_the_trials_message(http: httpx.Client) -> None:
    """A final report says why its run stopped itself (``message``, an extension): the trial's
    message keeps it, where the dashboard and ``zeus-bso jobs trials`` show it. Words no
    message may hold are refused, and nothing is stored."""
    job_id = unique_id("finalwhy")
    body = job_body(job_id, max_epochs=8, target_metric=0.9, learning_curve_stop=False)
    assert http.post("/jobs", json=body).status_code == 201
    trial = dispatch(http, job_id)
    report = {**trial_id(trial), "time": 10.0, "energy": 2000.0, "metric": 0.5, "current_epoch": 2}
    for message in ("x" * 1001, "two\nlines"):
        refused = http.post("/report", json={**report, "final": True, "message": message})
        assert refused.status_code == 422, refused.text
    assert trials_of(http, job_id)[trial["trial_number"]]["status"] == "dispatched"
    why = "training diverged at batch size 32: its metric at epoch 2 is nan"
    answer = http.post("/report", json={**report, "final": True, "message": why}).json()
    assert (answer["stop_train"], answer["converged"]) == (True, False)
    stored = trials_of(http, job_id)[trial["trial_number"]]
    assert stored["message"] == (
        f"Train failed to converge: the run stopped itself at epoch 2 ({why}), charged as"
        " max_epochs(8)"
    )


def test_a_report_that_training_diverged_ends_its_run_without_its_metric(
    http: httpx.Client,
) -> None:
    """A report that says its training diverged (``diverged``) ends the run as a final one does,
    not converged and charged at max_epochs, and its metric (a number only because the
    protocol asks for one) is not taken: the trial keeps its last one, or none, and its curve.
    The server declares the extension at dispatch."""
    job_id = unique_id("diverged")
    body = job_body(job_id, max_epochs=8, target_metric=0.9, learning_curve_stop=False)
    assert http.post("/jobs", json=body).status_code == 201
    for earlier in (None, 0.5):
        answer = http.get("/jobs/batch_size", params={"job_id": job_id})
        assert "diverged" in answer.headers["Zeus-BSO-Extensions"].split(", ")
        trial = answer.json()
        report = {**trial_id(trial), "time": 10.0, "energy": 2000.0, "current_epoch": 1}
        if earlier is not None:
            assert not http.post("/report", json={**report, "metric": earlier}).json()["stop_train"]
            report = {**report, "time": 20.0, "energy": 4000.0, "current_epoch": 2}
        said = {
            "diverged": True,
            "message": f"training diverged at epoch {report['current_epoch']}",
        }
        ended = http.post("/report", json={**report, "metric": 0.95, **said}).json()
        assert (ended["stop_train"], ended["converged"], ended["reason"]) == (
            True,
            False,
            "ended_early",
        )
        stored = trials_of(http, job_id)[trial["trial_number"]]
        assert (stored["status"], stored["converged"], stored["metric"]) == (
            "reported",
            False,
            earlier,
        )
        assert stored["curve"] == ([] if earlier is None else [[1, 0.5]])
        assert stored["cost"] == pytest.approx(ended["cost"] * 8 / report["current_epoch"])
    page = http.get(f"/dashboard/jobs/{job_id}")
    assert page.status_code == 200
    for epoch in (1, 2):  # each trial's message, where a metric and a curve are shown or not
        assert f"(training diverged at epoch {epoch})" in page.text
    assert (
        http.post("/report", json={**report, "metric": 0.1, "diverged": "maybe"}).status_code == 422
    )
