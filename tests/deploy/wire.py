"""One recurrence of a job through the upstream wire protocol, as a Zeus client sends it."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers import job_body


def run_recurrence(url: str, token: str, job_id: str) -> dict[str, Any]:
    """Register ``job_id``, take a batch size, report two epochs (the second reaches the
    target), end the trial; returns the trial ``{job_id, batch_size, trial_number}``."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        registered = http.post("/jobs", json=job_body(job_id, target_metric=0.8))
        assert registered.status_code in (200, 201), registered.text
        trial = http.get("/jobs/batch_size", params={"job_id": job_id})
        assert trial.status_code == 200, trial.text
        body = trial.json()
        for epoch, metric in ((1, 0.5), (2, 0.9)):
            report = {**body, "time": 10.0 * epoch, "energy": 1000.0 * epoch}
            answer = http.post("/report", json=report | {"metric": metric, "current_epoch": epoch})
            assert answer.status_code == 200, answer.text
        assert answer.json()["stop_train"], answer.text
        assert answer.json()["converged"], answer.text
        ended = http.patch("/trials", json=body)
        assert ended.status_code == 200, ended.text
        return dict(body)


def job_state(url: str, token: str | None, job_id: str) -> dict[str, Any]:
    """The read API's view of a job (its trials among it)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(f"{url}/api/jobs/{job_id}", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())
