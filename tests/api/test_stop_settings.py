"""A job's stop settings (``early_stop_reference``, ``max_run_cost_ratio``) change by
registering again, as its power settings: the job keeps its history, and its early-stop
reference is made again from it at once. Real server process, each backend."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import create_engine, select, update

from tests.helpers import ServerProcess, dispatch, job_body, unique_id
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store.tables import JobRow


def _converge(http: httpx.Client, job_id: str, time: float, energy: float) -> None:
    """One run that reaches the target at its first epoch (cost 0.5 * energy + 150 * time)."""
    trial = dispatch(http, job_id)
    report = {**trial, "time": time, "energy": energy, "metric": 0.9, "current_epoch": 1}
    assert http.post("/report", json=report).json()["converged"]
    assert http.patch("/trials", json=trial).status_code == 200


def _job(http: httpx.Client, job_id: str) -> dict[str, Any]:
    return dict(http.get(f"/api/jobs/{job_id}").json())


def test_stop_settings_change_and_the_job_keeps_its_history(http: httpx.Client) -> None:
    job_id = unique_id("stops")
    body = job_body(job_id, batch_sizes=[64], default_batch_size=64, target_metric=0.5)
    body["early_stop_reference"] = "best_run"
    assert http.post("/jobs", json=body).status_code == 201
    _converge(http, job_id, 10.0, 1000.0)  # 2000 J
    _converge(http, job_id, 20.0, 2000.0)  # 4000 J
    assert _job(http, job_id)["best_cost"] == 2000.0  # the cheapest run
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert "64 (its cheapest converged run: 2,000 J)" in page

    again = http.post("/jobs", json={**body, "early_stop_reference": "best_mean"})
    assert again.status_code == 200, again.text
    state = _job(http, job_id)
    assert state["job"]["early_stop_reference"] == "best_mean"
    assert state["best_cost"] == 3000.0  # the size's mean, at once
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert "64 (the mean of its converged runs, the lowest of any size's: 3,000 J)" in page
    assert state["trial_count"] == 2

    capped = http.post("/jobs", json={**body, "max_run_cost_ratio": 1.5})
    assert capped.status_code == 200, capped.text
    state = _job(http, job_id)
    assert state["job"]["max_run_cost_ratio"] == 1.5
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert "no run at another batch size costs more than 1.5\u00d7 the default" in page
    assert state["job"]["early_stop_reference"] == "best_run"  # sent again: changed back
    assert state["best_cost"] == 2000.0
    assert state["trial_count"] == 2

    other = http.post("/jobs", json={**body, "eta_knob": 0.2})
    assert other.status_code == 409
    message = other.json()["message"]
    settings = "early_stop_reference, max_run_cost_ratio, expected_recurrences"
    assert f"stop settings: {settings}" in message

    short = http.post("/jobs", json={**body, "expected_recurrences": 5})
    assert short.status_code == 200, short.text
    state = _job(http, job_id)
    assert state["job"]["expected_recurrences"] == 5
    assert state["trial_count"] == 2
    assert state["best_cost"] == 2000.0
    page = http.get(f"/dashboard/jobs/{job_id}").text
    assert "explores only what can pay back within them" in page


def test_a_cap_at_or_below_the_default_is_refused(http: httpx.Client) -> None:
    job_id = unique_id("badcap")
    for ratio in (1.0, 0.5, "cheap"):
        body = job_body(job_id, max_run_cost_ratio=ratio)
        refused = http.post("/jobs", json=body)
        assert refused.status_code == 422
        assert "max_run_cost_ratio" in refused.text
    assert http.get(f"/api/jobs/{job_id}").status_code == 404


def test_a_new_job_whose_beta_knob_would_stop_its_best_runs_is_refused(
    server: ServerProcess, http: httpx.Client
) -> None:
    """``beta_knob`` at 1 or below stops runs as cheap as the early-stop reference: refused for
    a new job (422, nothing written); a job stored with one (registered before the refusal)
    keeps it, registers again and runs."""
    job_id = unique_id("badbeta")
    for beta in (1.0, 0.5):
        refused = http.post("/jobs", json=job_body(job_id, beta_knob=beta))
        assert refused.status_code == 422
        assert f"beta_knob={beta:g} would stop runs" in refused.json()["message"]
        assert "give more than 1" in refused.json()["message"]
    assert http.get(f"/api/jobs/{job_id}").status_code == 404
    assert http.post("/jobs", json=job_body(job_id, beta_knob=1.2)).status_code == 201

    stored = unique_id("oldbeta")
    assert http.post("/jobs", json=job_body(stored)).status_code == 201
    assert server.db_url is not None
    engine = create_engine(to_engine_url(server.db_url))
    try:
        with engine.begin() as conn:
            table = JobRow.__table__
            where = table.c.job_id == stored
            config = conn.execute(select(table.c.config).where(where)).scalar_one()
            conn.execute(update(table).where(where).values(config={**config, "beta_knob": 0.8}))
    finally:
        engine.dispose()
    again = http.post("/jobs", json=job_body(stored, beta_knob=0.8))
    assert again.status_code == 200, again.text
    assert again.json()["beta_knob"] == 0.8
    assert dispatch(http, stored)["batch_size"] in again.json()["batch_sizes"]
    assert http.get(f"/api/jobs/{stored}").json()["job"]["beta_knob"] == 0.8
