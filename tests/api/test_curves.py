"""The learning-curve stop through the API: trials store their curves, a run that cannot
converge within the bound stops at its second report and counts its predicted cost."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import job_body, unique_id


def _epochs(http: httpx.Client, job_id: str, curve: list[tuple[float, float]]) -> dict:
    """Run one trial: report ``(energy per epoch, metric)`` epoch by epoch until it stops."""
    trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    energy = 0.0
    for epoch, (per_epoch, metric) in enumerate(curve, start=1):
        energy += per_epoch
        report = trial | {"time": 0.0, "energy": energy, "metric": metric, "current_epoch": epoch}
        answer = http.post("/report", json=report).json()
        if answer["stop_train"]:
            break
    assert http.patch("/trials", json=trial).status_code == 200
    return answer


@pytest.mark.parametrize("stop_on_curves", [True, False])
def test_a_hopeless_run_stops_at_its_second_report_and_counts_its_prediction(
    http: httpx.Client, stop_on_curves: bool
) -> None:
    job_id = unique_id()
    body = job_body(job_id, batch_sizes=[64], default_batch_size=64)
    body |= {"eta_knob": 1.0, "target_metric": 0.5, "learning_curve_stop": stop_on_curves}
    assert http.post("/jobs", json=body).status_code == 201
    # The first run converges in 3 epochs of 30 J: the bound is 2 x 90 J.
    first = _epochs(http, job_id, [(30.0, 0.2), (30.0, 0.4), (30.0, 0.5)])
    assert first["converged"]
    # 100 J an epoch at 0.0 (70 J without the curves): after two (200 J) the curve says 2
    # more, 400 J in all, over the bound taken at the run's pace, which counts twice the size's
    # 30 J epochs at most (2 x 180 J). (After one it says nothing: a first epoch may hold
    # start-up work.)
    per_epoch = 100.0 if stop_on_curves else 70.0
    second = _epochs(http, job_id, [(per_epoch, 0.0), (per_epoch, 0.0), (10.0, 0.5)])
    # On track (0.2 after 30 J): left alone, it converges.
    third = _epochs(http, job_id, [(30.0, 0.2), (30.0, 0.45), (30.0, 0.5)])
    assert third["converged"]
    if stop_on_curves:  # 70 J an epoch: 280 J predicted, within 2 x 180 J at its pace
        fourth = _epochs(http, job_id, [(70.0, 0.0), (70.0, 0.0), (10.0, 0.5)])
        assert fourth["converged"]

    state = http.get(f"/api/jobs/{job_id}").json()
    trials = {t["trial_number"]: t for t in state["trials"]}
    assert trials[1]["curve"] == [[1, 0.2], [2, 0.4], [3, 0.5]]
    (stats,) = state["batch_sizes"]
    if stop_on_curves:
        assert not second["converged"]
        assert "learning curve" in second["message"]
        assert second["cost"] == pytest.approx(200.0)  # what it cost
        assert trials[2]["energy"] == pytest.approx(200.0)
        assert trials[2]["epochs"] == 2
        assert trials[2]["cost"] == pytest.approx(400.0)  # what the job counts for it
        assert trials[2]["curve"] == [[1, 0.0]]
        # A report after the final one is answered with what the run cost, as the first was.
        late = {k: trials[2][k] for k in ("job_id", "batch_size", "trial_number")}
        late |= {"time": 0.0, "energy": 200.0, "metric": 0.0, "current_epoch": 2}
        again = http.post("/report", json=late).json()
        assert again["stop_train"]
        assert again["cost"] == pytest.approx(200.0)
        assert trials[4]["converged"]
        assert stats["mean_cost"] == pytest.approx((90.0 + 400.0 + 90.0 + 150.0) / 4)
    else:
        assert second["converged"]  # 150 J: within the bound
        assert trials[2]["curve"] == [[1, 0.0], [3, 0.5]]
        assert stats["mean_cost"] == pytest.approx((90.0 + 150.0 + 90.0) / 3)
