"""Why a run ended, in its client's words: the ``message`` of ``PATCH /trials`` and ``POST
/api/trials/release`` (an extension upstream's server ignores), kept with a trial that did not
report it, on each backend, and shown by the read API and the dashboard. Real server process."""

from __future__ import annotations

from typing import Any

import httpx

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
